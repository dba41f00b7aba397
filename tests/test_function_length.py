"""No function of etl/, cli/ or transforms/ longer than MAX_LINES (issue 32: a function a reader
takes in at once; longer ones were split where a reader would). Read with `ast`: no import."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

MAX_LINES = 60
PACKAGES = ("etl", "cli", "transforms")


def long_functions(files: list[Path], most: int = MAX_LINES) -> list[str]:
    """`path:line name (n lines)` of every function or method longer than `most` lines."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > most:
                    found.append(f"{path}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_is_longer_than_sixty_lines() -> None:
    files = sorted(p for pkg in PACKAGES for p in (Path(ROOT) / pkg).rglob("*.py"))
    assert len(files) > 100
    assert long_functions(files) == []


def test_the_check_counts_a_functions_lines(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n\ndef short():\n    pass\n")
    assert long_functions([tmp_path / "m.py"]) == [f"{tmp_path / 'm.py'}:1 long (61 lines)"]
    assert long_functions([tmp_path / "m.py"], most=61) == []
