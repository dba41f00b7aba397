"""Where a run's CPU goes, by thread: runs our CLI in this process with each Python thread's
CPU seconds summed by its name and target (digits folded: `etl-encode_0` and `_1` are one
row), and the process's total, which also holds threads Python did not start (Arrow's pool,
gRPC's). Threads still alive at exit (Beam's worker threads) are read from /proc. Linux only.

    python -m benchmarks.thread_cpu run JOB --force --progress none [BEAM ARGS]

benchmarks/README.md ("The local runner's mode for one read task") has what it showed;
benchmarks/cpu_timeline.py gives the cores busy over time instead, by thread id.
"""

from __future__ import annotations

import atexit
import collections
import os
import re
import runpy
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spent: collections.Counter[str] = collections.Counter()
_count: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()


def _name(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None)
    label = thread.name + (" " + getattr(target, "__qualname__", "") if target else "")
    return re.sub(r"\d+", "N", label)


def _add(name: str, seconds: float) -> None:
    with _lock:
        _spent[name] += seconds
        _count[name] += 1


def _measured_run(run):
    def measured(self: threading.Thread) -> None:
        name = _name(self)  # before run(), which drops the target
        try:
            run(self)
        finally:
            _add(name, time.thread_time())
    return measured


def _alive_cpu(thread: threading.Thread) -> float | None:
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _report() -> None:
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and thread.native_id is not None:
            seconds = _alive_cpu(thread)
            if seconds is not None:
                _add("alive at exit: " + _name(thread), seconds)
    _add("MainThread", time.thread_time())
    total = os.times()
    lines = [f"process {total.user + total.system:.2f} CPU-s (Python's threads below)"]
    lines += [f"{s:7.2f} {_count[k]:4d}  {k}" for k, s in _spent.most_common() if s >= 0.005]
    print("\n".join(lines), file=sys.__stderr__)


def main() -> None:
    threading.Thread.run = _measured_run(threading.Thread.run)  # type: ignore[method-assign]
    atexit.register(_report)
    sys.argv = [os.path.join(ROOT, "run_pipeline.py"), *sys.argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
