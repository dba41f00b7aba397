"""Issue 28's leftover cases ("every leftover is ours to clean", signals at start-up), run
through the real CLI like benchmarks/fault_cases.py, one table row each; they work against an
older checkout too (`--code`), which gives the "before" column.

    python -m benchmarks.fault_cases --group faults_leftovers [--code /path/to/checkout]

Each case returns the facts that differ before/after the fix: exit codes, the first stderr
line, what is left in the temp directory and beside the output after the next run, whether
another program's files survived.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.fault_cases import CSV_SCHEMA, Runner, _csv, _job, _outcome
from benchmarks.worker_pool import portable_flags, worker_pool

TIMEOUT = 300


def _env(d: Path, **extra: str) -> dict[str, str]:
    """The CLI's environment: a temp directory of the case's own (so what a run leaves in
    it can be counted), and `extra` (pause points)."""
    temp = d / "tmp"
    temp.mkdir(exist_ok=True)
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TMPDIR": str(temp), **extra}


def _start(r: Runner, job: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([r.python, str(r.code / "run_pipeline.py"), "run", str(job),
                             "--progress", "none", *args], cwd=job.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(r: Runner, job: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    """The run's outcome (benchmarks.fault_cases._outcome), and its warnings."""
    proc = _start(r, job, env, "--runner=FnApiRunner", *args)
    _, err = proc.communicate(timeout=TIMEOUT)
    return {**_outcome(proc.returncode, err, job.parent / "out"),
            "warnings": [x[:200] for x in err.splitlines() if x.startswith("WARNING")]}


def _below(root: Path) -> list[str]:
    """Every entry below `root` (links not followed), relative to it."""
    if not root.is_dir():
        return []
    found = []
    for folder, dirs, names in os.walk(root):
        found += [str(Path(folder, n).relative_to(root)) for n in dirs + names]
    return sorted(found)


def _size(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _left(d: Path) -> dict[str, Any]:
    """What is left in the case's temp dir and in the output's work dir (logs aside)."""
    work = d / ".out.etl"
    beside = [n for n in _below(work) if not n.startswith("logs")]
    return {"tmp_left": [n for n in _below(d / "tmp") if "/" not in n],
            "tmp_bytes": _size(d / "tmp"), "work_left": [n for n in beside if "/" not in n],
            "work_bytes": sum(_size(work / n) for n in beside if "/" not in n
                              and (work / n).is_dir())}


def _wait_for(check: Callable[[], bool], proc: subprocess.Popen, seconds: float = 120) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _kill9_then_rerun(r: Runner, d: Path, fmt: str) -> dict[str, Any]:
    """SIGKILL while a shard is being written (its attempt file open: the ArrayRecord
    scratch exists then, in both versions), then a plain rerun."""
    _csv(d / "in.csv", rows=400_000)
    extra = {"format": "array_record"} if fmt == "array_record" else {}
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]}, **extra)
    env = _env(d)
    proc = _start(r, job, env, "--runner=FnApiRunner")
    work = d / ".out.etl"
    writing = _wait_for(lambda: any(".attempt" in n for n in _below(work)), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = _left(d)
    res = _run(r, job, env)
    return {"killed_while_writing": writing, "after_kill_tmp": killed["tmp_left"],
            "after_kill_tmp_bytes": killed["tmp_bytes"], "rerun_exit": res["exit"], **_left(d)}


def arrayrecord_kill9_scratch(r: Runner, d: Path) -> dict[str, Any]:
    return _kill9_then_rerun(r, d, "array_record")


def tfrecord_kill9_tmpdir(r: Runner, d: Path) -> dict[str, Any]:
    return _kill9_then_rerun(r, d, "tfrecord")


def sigterm_at_startup(r: Runner, d: Path) -> dict[str, Any]:
    """SIGTERM 0.1 s after the command starts (Python still importing our modules), beside
    an output with a history."""
    _csv(d / "in.csv", rows=300)
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    env = _env(d)
    first = _run(r, job, env)
    history = d / "_runs.jsonl"
    before = len(history.read_text().splitlines()) if history.exists() else 0
    proc = _start(r, job, env, "--runner=FnApiRunner", "--force")
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT)
    res = _outcome(proc.returncode, err, d / "out")
    after = len(history.read_text().splitlines()) if history.exists() else 0
    return {"first_exit": first["exit"], "exit": res["exit"], "stderr_lines": res["stderr_lines"],
            "first": res["first"], "history_added": after - before, **_left(d)}


FOREIGN = (*(f"app{i}.log" for i in range(1, 13)), "notes.txt")  # another program's


def log_prune_foreign(r: Runner, d: Path) -> dict[str, Any]:
    """Another program's logs (and 12 old runs' logs) in `.out.etl/logs`: which survive?"""
    _csv(d / "in.csv", rows=300)
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    logs = d / ".out.etl" / "logs"
    logs.mkdir(parents=True)
    for name in FOREIGN:
        (logs / name).write_text("theirs\n")
    for i in range(12):
        (logs / f"20261120T0000{i:02d}-abc{i:03d}-t-0123456789ab.log").write_text("old\n")
    res = _run(r, job, _env(d))
    names = set(os.listdir(logs))
    own = [n for n in names if n.endswith(".log") and n not in FOREIGN
           and not n.startswith("20261120T")]
    return {"exit": res["exit"], "foreign_deleted": sorted(set(FOREIGN) - names),
            "own_new_log_kept": len(own) == 1,
            "old_runs_kept": sum(n.startswith("20261120T") for n in names)}


def log_prune_symlink(r: Runner, d: Path) -> dict[str, Any]:
    """`.out.etl/logs` a symbolic link to another program's log folder."""
    _csv(d / "in.csv", rows=300)
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    theirs = d / "app-logs"
    theirs.mkdir()
    for name in FOREIGN:
        (theirs / name).write_text("theirs\n")
    for i in range(12):
        (theirs / f"20261120T0000{i:02d}-abc{i:03d}-t-0123456789ab.log").write_text("theirs\n")
    before = set(os.listdir(theirs))
    (d / ".out.etl").mkdir()
    (d / ".out.etl" / "logs").symlink_to(theirs)
    res = _run(r, job, _env(d))
    return {"exit": res["exit"], "deleted_through_link": len(before - set(os.listdir(theirs))),
            "warning": next((x for x in res["warnings"] if "prun" in x), "")}


def portable_sigint_staging(r: Runner, d: Path) -> dict[str, Any]:
    """SIGINT to a PortableRunner launcher while the worker pool's worker is about to write
    a shard (paused at `write`, released once the launcher cleaned up); then a second run."""
    _csv(d / "in.csv", rows=200_000)
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    pause = d / "pause"
    pause.mkdir()
    env = {**_env(d), "PATH": f"{Path(r.python).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(r.code)}
    pool_env = {**env, "ETL_PAUSE_AT": "write", "ETL_PAUSE_DIR": str(pause)}
    with ExitStack() as stack:
        try:
            port = stack.enter_context(worker_pool(r.python, r.code, pool_env, d / "pool.log"))
        except RuntimeError:
            return {"error": "the worker pool did not start"}
        launcher = _start(r, job, env, *portable_flags(port))
        work = d / ".out.etl"
        if not _wait_for(lambda: (pause / "write.reached").exists(), launcher):
            return {"error": "never paused at write", "stderr": launcher.communicate()[1][-300:]}
        launcher.send_signal(signal.SIGINT)
        _wait_for(lambda: not any(n.startswith("run-") for n in os.listdir(work)), launcher, 60)
        (pause / "write.go").touch()
        _, err = launcher.communicate(timeout=TIMEOUT)
        first = _outcome(launcher.returncode, err, d / "out")
        time.sleep(15)  # the worker writes on (or fails) without its launcher
        after_signal = _left(d)
    second = _run(r, job, _env(d))
    return {"exit": first["exit"], "first": first["first"],
            "left_after_signal": after_signal["work_left"],
            "bytes_after_signal": after_signal["work_bytes"], "second_exit": second["exit"],
            "left_after_second_run": _left(d)["work_left"]}


CASES: dict[str, Callable[[Runner, Path], dict[str, Any]]] = {
    f.__name__: f for f in (arrayrecord_kill9_scratch, tfrecord_kill9_tmpdir, sigterm_at_startup,
                            log_prune_foreign, log_prune_symlink, portable_sigint_staging)
}
