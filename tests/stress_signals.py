"""SIGINT and SIGTERM at random moments of real runs, many times: what a pause hook cannot show
(a signal landing inside Beam, the clean-up, the lock release, a range's worker processes
starting or ending, the interpreter's exit).

    python -m tests.stress_signals --loops 4 --runs 30 [--range]

Each loop converts a small job, then reruns it with new data and sends SIGINT or SIGTERM after
a random share (0.05-1.2) of a whole run's time, checking every time: exit 0 or 128 + the
signal with one of the two interrupt lines, exactly one whole output (the old or the new one),
no lock or run directory left, no hang. With --range each run is a four-day range with
`--parallel 2` (a fork server and two worker processes) and the check is per day: each day's
output is whole or absent, nothing left over. A run that hangs is killed with every process it
started, after each thread's stack of each of them is printed. Loops run in parallel (more
load, more timing spread). Prints one JSON line per anomaly and a final tally; exit 1 if there
was any. Not collected by pytest (minutes of load); the deterministic phase matrix is
tests/test_signals.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from etl.output.manifest import verify
from tests.helpers import ROOT, RUN, kill_tree, leftovers, stacks_env
from tests.jobs import NEW, OLD, write_job, write_rows

HANG_SECONDS = 120
DAYS = [f"2026-11-0{d}" for d in range(1, 5)]


def one_loop(seed: int, runs: int, base: Path, ranges: bool) -> list[dict[str, Any]]:
    folder = base / f"loop{seed}"
    out = str(folder / "out")
    job = write_job(folder / "job", out, rows=200, dated=ranges)
    args = ["run", job] + (["--from", DAYS[0], "--to", DAYS[-1], "--parallel", "2"]
                           if ranges else [])
    t0 = time.monotonic()
    subprocess.run([sys.executable, RUN, *args], cwd=ROOT, capture_output=True,
                   timeout=300, check=True)
    whole = time.monotonic() - t0
    rng = random.Random(seed)
    found = []
    for i in range(runs):
        rows = 201 + i
        if ranges:
            for day in DAYS:
                write_rows(folder / "job" / f"{day}.csv", rows)
            old = {day: verify(f"{out}/{day}")["records"] for day in DAYS}
        else:
            write_rows(folder / "job" / "ids.csv", rows)
            old = verify(out)["records"]
        stacks = folder / f"stacks{i}.txt"
        env = {**os.environ, **stacks_env(stacks)}
        # --force: every day runs again although its inputs' digest may match the last run's
        proc = subprocess.Popen([sys.executable, RUN, *args, *(["--force"] if ranges else [])],
                                cwd=ROOT, text=True, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        share = rng.uniform(0.05, 1.2)
        signum = rng.choice([signal.SIGINT, signal.SIGTERM])
        time.sleep(whole * share)
        proc.send_signal(signum)
        try:
            _, err = proc.communicate(timeout=HANG_SECONDS)
            hang = ""
        except subprocess.TimeoutExpired:
            hang = kill_tree(proc.pid, stacks)
            _, err = proc.communicate(timeout=60)
        lines = [ln for ln in err.splitlines() if not ln.startswith("progress: ")]
        name = signal.Signals(signum).name
        if ranges:
            problem = range_problem(proc.returncode, lines, name, signum, out, old, rows)
        else:
            problem = run_problem(proc.returncode, lines, name, signum, out, old, rows)
        places = [f"{out}/{day}" for day in DAYS] if ranges else [out]
        left = [p for place in places for p in leftovers(place)]
        if hang or problem or left:
            found.append({"loop": seed, "run": i, "share": round(share, 3), "signal": name,
                          "exit": proc.returncode, "problem": problem, "left": left,
                          "stderr": err[-2000:], "hang": hang[-30000:]})
            print(json.dumps(found[-1]), flush=True)
            if hang:
                print(hang, flush=True)
            if hang or left:
                break  # the next runs would only report the same leftovers
    return found


def run_problem(code: int | None, lines: list[str], name: str, signum: int, out: str,
                old: int, rows: int) -> str | None:
    """What is wrong with one interrupted run's exit, line and output, or None."""
    told = {f"error: interrupted by {name} {OLD}": old, f"error: interrupted by {name} {NEW}": rows}
    expected = rows if code == 0 and not lines else (
        told.get(lines[0]) if code == 128 + signum and len(lines) == 1 else None)
    try:
        records: Any = verify(out)["records"]
    except Exception as e:  # noqa: BLE001 - the anomaly is the report
        records = f"verify failed: {e}"
    if expected is None or records != expected:
        return f"records {records}, expected {expected}"
    return None


def range_problem(code: int | None, lines: list[str], name: str, signum: int, out: str,
                  old: dict[str, int], rows: int) -> str | None:
    """What is wrong with one interrupted range, or None: exit 0 or 128 + signum with one line
    saying so; each day's output the old or the new one, whole."""
    if code == 0:
        if lines:
            return f"exit 0 with {lines}"
    elif code != 128 + signum or len(lines) != 1 or not lines[0].startswith(
            f"error: interrupted by {name} after "):
        return f"exit {code}: {lines}"
    for day in DAYS:
        try:
            records: Any = verify(f"{out}/{day}")["records"]
        except Exception as e:  # noqa: BLE001 - the anomaly is the report
            records = f"verify failed: {e}"
        if records not in (old[day], rows) or (code == 0 and records != rows):
            return f"{day}: records {records} (old {old[day]}, new {rows})"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=4)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--range", action="store_true",
                        help="four-day ranges with --parallel 2 instead of single runs")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stress-signals-"))
    try:
        with ThreadPoolExecutor(args.loops) as pool:
            results = list(pool.map(lambda s: one_loop(s, args.runs, base, args.range),
                                    range(1, args.loops + 1)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    anomalies = sum(len(r) for r in results)
    print(f"{args.loops * args.runs} interrupted runs, {anomalies} anomalies")
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
