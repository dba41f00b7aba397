"""Ctrl-C at random moments of real runs, many times: what a pause hook cannot show (a signal
landing inside Beam, the clean-up, the lock release, the interpreter's exit).

    python -m tests.stress_signals --loops 4 --runs 30

Each loop converts a small job, then reruns it with new data and sends SIGINT after a random
share (0.05-1.2) of a whole run's time, checking every time: exit 0 or 130 with one of the two
interrupt lines, exactly one whole output (the old or the new one), no lock or run directory
left, no hang. Loops run in parallel (more load, more timing spread). Prints one JSON line
per anomaly and a final tally; exit 1 if there was any. Not collected by pytest (minutes of
load); the deterministic phase matrix is tests/test_signals.py.
"""

from __future__ import annotations

import argparse
import json
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
from tests.helpers import ROOT, RUN, leftovers
from tests.jobs import NEW, OLD, write_job, write_rows

HANG_SECONDS = 120


def one_loop(seed: int, runs: int, base: Path) -> list[dict[str, Any]]:
    folder = base / f"loop{seed}"
    out = str(folder / "out")
    job = write_job(folder / "job", out, rows=200)
    t0 = time.monotonic()
    subprocess.run([sys.executable, RUN, "run", job], cwd=ROOT, capture_output=True,
                   timeout=300, check=True)
    whole = time.monotonic() - t0
    rng = random.Random(seed)
    found = []
    for i in range(runs):
        rows = 201 + i
        write_rows(folder / "job" / "ids.csv", rows)
        old = verify(out)["records"]
        proc = subprocess.Popen([sys.executable, RUN, "run", job], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        share = rng.uniform(0.05, 1.2)
        time.sleep(whole * share)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=HANG_SECONDS)
            hang = False
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            hang = True
        lines = [ln for ln in err.splitlines() if not ln.startswith("progress: ")]
        told = {f"error: interrupted by SIGINT {OLD}": old, f"error: interrupted by SIGINT {NEW}": rows}
        expected = rows if proc.returncode == 0 and not lines else (
            told.get(lines[0]) if proc.returncode == 130 and len(lines) == 1 else None)
        try:
            records: Any = verify(out)["records"]
        except Exception as e:  # noqa: BLE001 - the anomaly is the report
            records = f"verify failed: {e}"
        left = leftovers(out)
        if hang or expected is None or records != expected or left:
            found.append({"loop": seed, "run": i, "share": round(share, 3),
                          "exit": proc.returncode, "hang": hang, "stderr": err[-2000:],
                          "records": records, "expected": expected, "left": left})
            print(json.dumps(found[-1]), flush=True)
            if hang or left:
                break  # the next runs would only report the same leftovers
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=4)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stress-signals-"))
    try:
        with ThreadPoolExecutor(args.loops) as pool:
            results = list(pool.map(lambda s: one_loop(s, args.runs, base),
                                    range(1, args.loops + 1)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    anomalies = sum(len(r) for r in results)
    print(f"{args.loops * args.runs} interrupted runs, {anomalies} anomalies")
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
