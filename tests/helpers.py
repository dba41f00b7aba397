"""Helpers shared by several test modules: the CLI as users run it, block columns, and what a
run left behind (digests and listings of an output, a flipped byte, leftovers, error lines)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etl.sources.base import Block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "run_pipeline.py")
# ids plus a two-column packed vector: what the CLI tests convert
IDS_SCHEMA = textwrap.dedent("""\
    name: ids
    kind: example
    features:
      id: {dtype: int64, shape: []}
      x: {dtype: float32, shape: [2], source: [a, b]}
    """)


def make_run_recipe() -> list[str]:
    """The Makefile's `run` target, its recipe lines: `make run ARGS=...` must end in exactly
    `run_pipeline.py $(ARGS)` (what the README's commands assume), whatever comes before it."""
    with open(os.path.join(ROOT, "Makefile")) as fh:
        text = fh.read()
    recipe = text.split("\nrun: $(STAMP)\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in recipe.splitlines()]


def cli(*args: str, cwd: str | None = None, env: dict[str, str] | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`run_pipeline.py ARGS` in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, RUN, *args], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def column(blocks: list[Block], name: str) -> list[Any]:
    """One column of every block, as Python values."""
    out: list[Any] = []
    for b in blocks:
        col = b.columns[name]
        out.extend(col.to_pylist() if hasattr(col, "to_pylist") else list(col))
    return out


TRAIN, TEST = 1003, 37  # write_ids_job's split sizes


def write_ids_job(tmp: Path, out: Path) -> Path:
    """A job of a train split of 1003 records and a test split of 37, 5 shards each, ids in
    order (no slice of a percentage falls on a shard boundary): the readers' slicing and
    multi-host tests. Returns the job file's path."""
    (tmp / "schema.yaml").write_text(textwrap.dedent("""\
        name: ids
        kind: example
        features:
          id: {dtype: int64, shape: []}
          x: {dtype: float32, shape: [2], source: [a, b]}
        """))
    for name, start, n in (("train", 0, TRAIN), ("test", 10_000, TEST)):
        rows = "".join(f"{i},{i * 0.5},{-i}\n" for i in range(start, start + n))
        (tmp / f"{name}.csv").write_text("id,a,b\n" + rows)
    job = tmp / "job.yaml"
    job.write_text(textwrap.dedent(f"""\
        schema: schema.yaml
        sources:
          train: {{format: csv, paths: [train.csv]}}
          test: {{format: csv, paths: [test.csv]}}
        output: {out}
        shards: 5
        compression: none
        """))
    return job


def ids_output(tmp: Path) -> str:
    """write_ids_job converted by the CLI into tmp/out (asserting the run succeeded)."""
    target = tmp / "out"
    result = cli("run", str(write_ids_job(tmp, target)), "--runner=FnApiRunner")
    assert result.returncode == 0, result.stderr
    return str(target)


def record_ids(records: Any) -> list[int]:
    """The `id` feature of every record of an `open_records` view, in its order."""
    return [int(i) for i in records[:]["id"]] if len(records) else []


def as_python(value: Any) -> Any:
    """Decoded values (NumPy arrays and scalars, nested lists) as plain Python, to compare."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [as_python(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def wait_paused(proc: subprocess.Popen[str], pause_dir: Path, phase: str) -> None:
    """Until `proc` (run with ETL_PAUSE_AT=phase, ETL_PAUSE_DIR=pause_dir) waits at `phase`
    (etl.base.pause); fails the test with its stderr if it ends or never gets there."""
    reached = pause_dir / (phase.replace(":", "-") + ".reached")
    deadline = time.monotonic() + 120
    while not (reached.exists() and len(reached.read_text().split()) == 2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"never paused at {phase} (exit {proc.returncode}): {err[-2000:]}")
        time.sleep(0.02)


def parent_of(pid: int) -> int | None:
    """`pid`'s parent, or None once it ended (Linux: /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state"


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children first, then theirs)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ppid := parent_of(int(entry.name))) is not None:
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = sorted(parents.get(todo.pop(0), []))
        found += kids
        todo += kids
    return found


def processes_with(env_value: str) -> list[int]:
    """The processes whose environment holds `env_value` (a test's own folder, say): what a
    run left running after it ended, orphans included (Linux)."""
    found = []
    needle = env_value.encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # ended meanwhile, or not ours to read
    return found


def stacks_env(stacks: Path) -> dict[str, str]:
    """What makes a run, and every process it forks, dump its threads' stacks to the file
    `stacks` on SIGUSR1 (tests/stacks/sitecustomize.py; kill_tree sends it)."""
    folder = str(Path(__file__).parent / "stacks")
    path = os.pathsep.join(p for p in [folder, os.environ.get("PYTHONPATH", "")] if p)
    return {"PYTHONPATH": path, "ETL_TEST_STACKS": str(stacks)}


def kill_tree(pid: int, stacks: Path | None) -> str:
    """Every thread's stack of `pid` and of each process under it, appended to `stacks` (the
    file tests/stacks/sitecustomize.py makes SIGUSR1 write to) under a header per process, then
    all of them killed: a hung run's own processes (a range's fork server and workers) would
    otherwise hold its output pipes open. Returns what the file holds."""
    tree = [pid, *descendants(pid)]
    for p in tree:
        if stacks:
            with stacks.open("a") as fh:
                fh.write(f"\n--- pid {p}: {command_line(p)}\n")
        try:
            os.kill(p, signal.SIGUSR1)
        except ProcessLookupError:
            continue
        time.sleep(0.5)  # faulthandler writes at once; a moment for the file to fill
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return stacks.read_text() if stacks and stacks.is_file() else "(no stacks)"


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "(ended)"


def records_by_id(out: Any, splits: tuple[str, ...] = ("train", "test")) -> dict[int, dict[str, Any]]:
    """Every record of an output's `splits` as plain Python, by its `id` feature."""
    from etl.read.random_access import open_records  # noqa: PLC0415 - only the readers' tests

    found = {}
    for split in splits:
        records = open_records(str(out), split)
        for i in range(len(records)):
            r = {k: as_python(v) for k, v in records[i].items()}
            found[r["id"]] = r
    return found


# ---- what a run left: digests and listings of an output, damage, leftovers, error lines
def digest(folder: str) -> dict[str, str]:
    """sha256 of every file below a local output."""
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            out[os.path.relpath(p, folder)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def shas(out: Path) -> dict[str, str]:
    """sha256 of each TFRecord shard directly in `out`, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.glob("*.tfrecord")}


def listing(root: str) -> dict[str, str]:
    """Every entry below `root` (hidden ones too): file -> sha256, directory -> 'dir'."""
    out = {}
    for base, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(base, d), root) + "/"] = "dir"
        for f in files:
            path = os.path.join(base, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def flip_byte(path: Path, offset: int = 40, keep_mtime: bool = False) -> None:
    """Flip one bit in place (same inode); `keep_mtime`: then put the modification time back,
    as `touch -d` or a tool that preserves times would (only a full read sees that)."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def leftovers(out: str) -> list[str]:
    """What the local work dir holds besides logs (a lock, run directories)."""
    work = os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".etl")
    return sorted(n for n in os.listdir(work) if n != "logs") if os.path.isdir(work) else []


def error_lines(stderr: str) -> list[str]:
    """The non-blank lines of a run's stderr."""
    return [line for line in stderr.splitlines() if line.strip()]
