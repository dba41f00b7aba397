"""How many cores a command keeps busy, every TICK seconds: where a run leaves a core idle.

    python -m benchmarks.cpu_timeline [--tick 0.1] [--threads 3] -- COMMAND ...

Prints one line per tick: seconds since the start, cores busy (CPU seconds of the process
and its children over the tick), then the busiest threads of the main process (last three
digits of the thread id: cores). A run of the benchmark CSV shows its phases this way:
start-up on one core, stage 1 (read, encode, spill), the shard-writing stage, the publish.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cpu_timeline",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--tick", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=3, help="busiest threads shown per tick")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("a command to run is needed (after --)")
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    main_proc = psutil.Process(child.pid)
    start = time.monotonic()
    last_total, last_threads = 0.0, {}
    while child.poll() is None:
        time.sleep(args.tick)
        try:
            procs = [main_proc, *main_proc.children(recursive=True)]
            threads = {t.id: t.user_time + t.system_time for t in main_proc.threads()}
        except psutil.Error:
            break
        total = _cpu(procs)
        busy = sorted(((now - last_threads.get(tid, now), tid) for tid, now in threads.items()),
                      reverse=True)[: args.threads]
        shown = " ".join(f"{tid % 1000:03d}:{used / args.tick:.1f}" for used, tid in busy
                         if used > 0.01 * args.tick)
        print(f"{time.monotonic() - start:6.2f} {(total - last_total) / args.tick:4.2f} {shown}",
              flush=True)
        last_total, last_threads = total, threads
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
