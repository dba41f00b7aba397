"""The cost of a conversion grows with its input, not faster (issue 29, goal 0).

A merge whose rounds grew with the number of runs once made 10M rows cost 18x the time of 1M
(the square of the input, in the shard-writing step), and nobody saw it: every test ran small
inputs. This runs the benchmark's CSV job through the CLI at 1M and 5M rows (five times as
many, five times as many runs for each shard to merge) and compares the CPU seconds each
conversion costs beyond a 1k-row run of the same job (the start-up, which does not grow).
CPU seconds, not wall clock: the machine is shared. The least of two runs of each size, as
noise only ever adds CPU time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import data

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

REPO = Path(__file__).resolve().parent.parent
SMALL, LARGE = 1_000_000, 5_000_000
# linear is 5x; the bound leaves room for this machine's noise on the small run's ~2 CPU-s
# (the quadratic merge of ef6f653 measured 12.8x: benchmarks/README.md, "Linear cost")
BOUND = 7.0


def _cpu_seconds(tmp: Path, rows: int) -> float:
    """User + system CPU of one `run` of the benchmark CSV job on `rows` rows (least of two)."""
    csv = tmp / f"data-{rows}.csv"
    if not csv.exists():
        data.write_csv(str(csv), rows)
    job = {"schema": str(REPO / "schemas" / "bench_csv.yaml"), "output": str(tmp / f"out-{rows}"),
           "sources": {"train": {"format": "csv", "paths": [str(csv)]}},
           "shards": 8, "shuffle": {"seed": 42}}
    path = tmp / f"job-{rows}.json"
    path.write_text(json.dumps(job), encoding="utf-8")
    best = float("inf")
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, str(REPO / "run_pipeline.py"), "run", str(path),
                                 "--force", "--progress", "none", "--runner=FnApiRunner"],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode() if proc.stderr else ""
        proc.stderr.close()
        assert os.waitstatus_to_exitcode(status) == 0, err[-2000:]
        best = min(best, usage.ru_utime + usage.ru_stime)
    manifest = json.loads((tmp / f"out-{rows}" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["splits"]["train"]["num_records"] == rows
    return best


def test_five_times_the_rows_cost_about_five_times_the_cpu(tmp_path: Path) -> None:
    start = _cpu_seconds(tmp_path, 1_000)
    small = _cpu_seconds(tmp_path, SMALL) - start
    large = _cpu_seconds(tmp_path, LARGE) - start
    ratio = large / small
    assert ratio <= BOUND, (f"{LARGE} rows cost {large:.2f} CPU-s beyond start-up, {SMALL} rows "
                            f"{small:.2f}: {ratio:.1f}x for 5x the rows (start-up {start:.2f})")
