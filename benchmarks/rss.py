"""Run a command and sample the resident memory of its whole process tree.

Every `interval` seconds (default 50 ms) a thread walks the tree under the child's pid —
the child and every descendant, found through /proc/<pid>/task/<tid>/children (or psutil when
it is installed) — and sums VmRSS over those processes; the peak of these sums is reported.
Summing RSS counts pages shared between processes (libraries, fork copy-on-write) once per
process, so multi-process runs are over-, never under-reported. Processes that exit between
two samples are missed for that interval only: short spikes under 50 ms can be missed.
CPU seconds (user + sys) come from wait4's rusage: the child plus every descendant it waited
for; unlike wall-clock time they barely move when other work shares the machine.

    python -m benchmarks.rss -- python -c "x = bytearray(10**9)"
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

try:  # optional; /proc is used otherwise
    import psutil  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                out.extend(int(c) for c in fh.read().split())
        except OSError:
            continue
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0  # exited, or a zombie (no VmRSS line)


def tree_rss_bytes(root: int) -> tuple[int, int]:
    """(summed RSS in bytes, number of processes) of `root` and all its descendants."""
    if psutil is not None:
        try:
            proc = psutil.Process(root)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return 0, 0
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        return total, len(procs)
    total_kb, count, stack, seen = 0, 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        kb = _rss_kb(pid)
        if kb:
            total_kb += kb
            count += 1
        stack.extend(_children(pid))
    return total_kb * 1024, count


@dataclass
class Measurement:
    returncode: int | None
    seconds: float
    peak_rss_mb: float
    peak_processes: int
    samples: int
    timed_out: bool = False
    cpu_seconds: float | None = None  # user + sys of the child and its reaped descendants
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (s, MB) every ~1 s


class TreeSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak, self.peak_procs, self.samples = 0, 0, 0
        self.timeline: list[tuple[float, float]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        start = time.perf_counter()
        next_mark = 0.0
        while not self._stop_event.is_set():
            total, procs = tree_rss_bytes(self.pid)
            self.samples += 1
            if total > self.peak:
                self.peak = total
            self.peak_procs = max(self.peak_procs, procs)
            elapsed = time.perf_counter() - start
            if elapsed >= next_mark:
                self.timeline.append((round(elapsed, 2), round(total / 2**20, 1)))
                next_mark += 1.0
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def measure(cmd: list[str], *, stdout=None, stderr=None, cwd: str | None = None,
            env: dict[str, str] | None = None, timeout: float | None = None,
            interval: float = 0.05) -> Measurement:
    """Run `cmd` to completion; wall-clock seconds and peak summed RSS of its process tree."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, cwd=cwd, env=env,
                            start_new_session=True)
    sampler = TreeSampler(proc.pid, interval)
    sampler.start()
    timed_out = False
    cpu = None
    try:
        # wait4 (not Popen.wait) to get the rusage: CPU time is robust to a busy machine.
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                cpu = usage.ru_utime + usage.ru_stime
                break
            if timeout is not None and time.perf_counter() - t0 > timeout:
                timed_out = True
                _kill_tree(proc)
                break
            time.sleep(0.01)
    except BaseException:
        _kill_tree(proc)
        raise
    finally:
        seconds = time.perf_counter() - t0
        sampler.stop()
    return Measurement(proc.returncode, seconds, sampler.peak / 2**20, sampler.peak_procs,
                       sampler.samples, timed_out, cpu, sampler.timeline)


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill the child's process group (it was started in its own session) and reap it."""
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        proc.kill()
    proc.wait()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print("usage: python -m benchmarks.rss -- CMD [ARGS...]", file=sys.stderr)
        return 2
    m = measure(args)
    print(f"returncode={m.returncode} seconds={m.seconds:.2f} cpu_seconds={m.cpu_seconds} "
          f"peak_rss_mb={m.peak_rss_mb:.1f} "
          f"processes={m.peak_processes} samples={m.samples}", file=sys.stderr)
    return m.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
