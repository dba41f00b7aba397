"""The import rule (docs/architecture.md), checked on the source: every package imports only
from itself or a lower layer, nothing imports in a circle, `etl/` never imports Beam, and an
import of our own code inside a function says why it is there.

The graph is read from the source with `ast` (module-level and in-function imports alike,
`TYPE_CHECKING` ones too: a circle only for the type checker is still a circle a reader must
follow), so the test needs no import and fails on a new arrow the moment it is written.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ROOT

# package -> layer; a module belongs to the longest package prefix listed here
LAYERS = {
    "etl.base": 1,
    "etl.storage": 2,
    "etl.run": 2,  # one run's live progress model
    "etl.formats": 3,
    "etl.contract": 4,
    "etl.shuffle": 4,
    "etl.sources": 5,
    "etl.output": 5,
    "etl.read": 6,  # reads what etl.output writes
    "etl.job": 6,
    "etl.stats": 6,  # the statistics the conversion gathers, the report shows and the gate checks
    "etl.tools": 7,  # infer-schema, inspect, and the report (rendering etl.stats)
    "etl.schedule": 7,
    "etl.quality": 8,  # quality gates: etl.stats against checks:, the page drawn by etl.tools
    "etl": 8,  # the public face (etl/__init__.py): nothing inside etl imports it
    "transforms": 8,
    "cli": 9,
    "run_pipeline": 10,
}
BEAM = "apache_beam"
# The one door from etl/ to Beam: gs:// and the other remote file systems go through Beam's
# FileSystems (the I/O seam Beam's own io/ uses), imported inside fs's functions on first
# remote use, so no etl module loads Beam at import (test_importing_etl_loads_no_beam).
BEAM_SEAM = {"etl.storage.fs"}


@dataclass(frozen=True)
class Arrow:
    source: str  # importing module
    target: str  # imported module (ours) or top-level name (others)
    line: int
    lazy: bool  # inside a function
    text: str  # the source line


def modules() -> dict[str, Path]:
    found = {"run_pipeline": Path(ROOT, "run_pipeline.py")}
    for top in ("etl", "transforms", "cli"):
        for folder, _, files in os.walk(Path(ROOT, top)):
            for name in files:
                if name.endswith(".py"):
                    path = Path(folder, name)
                    dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                    found[dotted.removesuffix(".__init__")] = path
    return found


def package_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return ".".join(parts[:n])
    raise AssertionError(f"{module} belongs to no package in LAYERS: add it there")


def arrows(mods: dict[str, Path]) -> list[Arrow]:
    out: list[Arrow] = []
    for module, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        lazy_nodes = {id(n) for f in ast.walk(tree)
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for target in targets:
                name = target
                while name not in mods and "." in name:
                    name = name.rpartition(".")[0]
                if name not in mods:
                    name = target.split(".")[0]
                if name != module:
                    out.append(Arrow(module, name, node.lineno, id(node) in lazy_nodes,
                                     lines[node.lineno - 1]))
    return out


def circles(mods: dict[str, Path], arrows_: list[Arrow]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for a in arrows_:
        if a.target in mods:
            graph[a.source].add(a.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        group.append(top)
                        if top == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


MODS = modules()
ARROWS = arrows(MODS)


def test_no_import_circles() -> None:
    assert circles(MODS, ARROWS) == []


def test_each_package_imports_only_itself_or_lower_layers() -> None:
    wrong = []
    for a in ARROWS:
        if a.target not in MODS:
            continue
        src, dst = package_of(a.source), package_of(a.target)
        if src == dst:
            continue
        if dst == "etl" or LAYERS[dst] >= LAYERS[src]:
            wrong.append(f"{a.source}:{a.line} imports {a.target} "
                         f"({src} L{LAYERS[src]} -> {dst} L{LAYERS[dst]})")
    assert wrong == []


def test_etl_never_imports_beam() -> None:
    """Only the file-system seam names Beam, and only inside functions."""
    wrong = [f"{a.source}:{a.line}" for a in ARROWS
             if a.source.split(".")[0] == "etl" and a.target.split(".")[0] == BEAM
             and not (a.source in BEAM_SEAM and a.lazy)]
    assert wrong == []


@pytest.mark.slow
def test_importing_etl_loads_no_beam() -> None:
    """Every module under etl/ imported in a fresh interpreter: apache_beam stays unloaded."""
    names = sorted(m for m in MODS if m.split(".")[0] == "etl")
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert (proc.returncode, proc.stdout) == (0, "[]\n"), proc.stderr[-2000:]


def test_a_lazy_import_of_our_code_says_why() -> None:
    """`from etl.x import y  # noqa: PLC0415 - why it waits` (start-up time, an optional
    dependency, a worker-only path): an in-function import without a reason is a defect."""
    silent = [f"{a.source}:{a.line}: {a.text.strip()}" for a in ARROWS
              if a.lazy and a.target in MODS and "PLC0415 - " not in a.text]
    assert silent == []


def test_every_package_says_what_it_owns() -> None:
    """Each package's __init__ docstring: what it owns and what it may import."""
    missing = []
    for package in LAYERS:
        path = MODS.get(package)
        if path is None or path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if len(doc.split()) < 12 or "import" not in doc.lower():
            missing.append(package)
    assert missing == []


def test_the_checker_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The checks above cannot pass by finding nothing: a circle, an upward arrow and a
    silent lazy import planted in a copy of the graph are all reported."""
    fake = {"etl.base.a": tmp_path / "a.py", "etl.storage.b": tmp_path / "b.py"}
    fake["etl.base.a"].write_text("def f():\n    from etl.storage import b\n")
    fake["etl.storage.b"].write_text("from etl.base import a\n")
    found = arrows(fake)
    assert [(a.source, a.target, a.lazy) for a in found] == [
        ("etl.base.a", "etl.storage.b", True), ("etl.storage.b", "etl.base.a", False)]
    assert circles(fake, found) == [["etl.base.a", "etl.storage.b"]]
    assert LAYERS[package_of("etl.storage.b")] > LAYERS[package_of("etl.base.a")]
    assert sum(1 for a in ARROWS if a.target in MODS) > 100  # the real graph was read
