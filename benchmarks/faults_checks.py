"""Issue 28's quality-check fault cases, through the real CLI (registered in
benchmarks/fault_cases.py by the lead; runnable alone for a before/after table):

    python -m benchmarks.fault_cases --group faults_checks [--code /path/to/old]

Each case builds its inputs in a fresh temp dir and returns what a user sees: the exit code,
the first stderr line, and whether the span was published. Before the fix, nonsense checks
ran (a NaN threshold turned its check off, min/max of a string passed), NaN and +inf passed
min/max/mean and drift, and strings with more than 1,024 distinct values crashed drift.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.fault_cases import Runner, _outcome

FLOATS = ("name: floats\nkind: example\nfeatures:\n  id: {dtype: int64, shape: []}\n"
          "  x: {dtype: float32, shape: [], allow_nan: true}\n"
          "  name: {dtype: bytes, shape: []}\n")
DAY1, DAY2 = "2026-01-01", "2026-01-02"


def _dated_job(d: Path, checks: str) -> Path:
    """A dated CSV job (id, x, name) writing out/{date}, with `checks` (a YAML line)."""
    (d / "schema.yaml").write_text(FLOATS)
    job = d / "job.yaml"
    job.write_text("schema: schema.yaml\nsource: {format: csv, paths: ['{date}/data.csv']}\n"
                   f"output: 'out/{{date}}'\nshards: 2\n{checks}\n")
    return job


def _day(d: Path, day: str, rows: int = 1000, nan: int = 0, inf: int = 0,
         names: str | None = None) -> None:
    """`rows` records, x = id % 10 (the first `nan` NaN, the next `inf` +inf); name: one of
    three, or distinct per record with prefix `names`."""
    (d / day).mkdir(parents=True, exist_ok=True)
    lines = ["id,x,name"]
    for i in range(rows):
        x = "nan" if i < nan else "inf" if i < nan + inf else str(i % 10)
        lines.append(f"{i},{x},{f'{names}{i}' if names else 'abc'[i % 3]}")
    (d / day / "data.csv").write_text("\n".join(lines) + "\n")


def _run(r: Runner, job: Path, day: str) -> dict[str, Any]:
    res = r.run(job, "--date", day)
    res["published"] = (job.parent / "out" / day / "_SUCCESS").exists()
    return res


def checks_nan_threshold(r: Runner, d: Path) -> dict[str, Any]:
    """`drift: .nan`: a check that can never fail."""
    _day(d, DAY1)
    return _run(r, _dated_job(d, "checks: {block: {drift: .nan}}"), DAY1)


def checks_min_above_max(r: Runner, d: Path) -> dict[str, Any]:
    _day(d, DAY1)
    return _run(r, _dated_job(d, "checks: {block: {features: {x: {min: 10, max: 5}}}}"), DAY1)


def checks_max_of_string(r: Runner, d: Path) -> dict[str, Any]:
    """min/max of a string feature measured nothing and passed."""
    _day(d, DAY1)
    return _run(r, _dated_job(d, "checks: {block: {features: {name: {max: 3}}}}"), DAY1)


def checks_inf_passes_max(r: Runner, d: Path) -> dict[str, Any]:
    """One +inf in an allow_nan feature with `max: 10`."""
    _day(d, DAY1, inf=1)
    return _run(r, _dated_job(d, "checks: {block: {features: {x: {max: 10}}}}"), DAY1)


def checks_nan_feed(r: Runner, d: Path) -> dict[str, Any]:
    """Day 2 is 90% NaN (finite values shaped as day 1's): min, max, mean and drift."""
    _day(d, DAY1)
    _day(d, DAY2, nan=900)
    job = _dated_job(d, "checks: {block: {features: {x: {min: 0, max: 10, mean: [0, 10], "
                        "drift: 0.1}}}}")
    first = _run(r, job, DAY1)
    res = _run(r, job, DAY2)
    res["day1_exit"] = first["exit"]
    return res


def checks_drift_many_strings(r: Runner, d: Path) -> dict[str, Any]:
    """A drift check of a string feature with 3,000 distinct values on both days."""
    _day(d, DAY1, rows=3000, names="a")
    _day(d, DAY2, rows=3000, names="b")
    job = _dated_job(d, "checks: {block: {features: {name: {drift: 0.1}}}}")
    first = _run(r, job, DAY1)
    res = _run(r, job, DAY2)
    res["day1_exit"] = first["exit"]
    return res


def report_against_many_strings(r: Runner, d: Path) -> dict[str, Any]:
    """`report DAY2 --against DAY1` of two plain runs of 3,000 distinct strings each."""
    _day(d, DAY1, rows=3000, names="a")
    _day(d, DAY2, rows=3000, names="b")
    job = _dated_job(d, "")
    runs = [_run(r, job, day)["exit"] for day in (DAY1, DAY2)]
    proc = subprocess.run([r.python, str(r.code / "run_pipeline.py"), "report",
                           str(d / "out" / DAY2), "--against", str(d / "out" / DAY1),
                           "--out", str(d / "report")], cwd=d, capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=600)
    res = _outcome(proc.returncode, proc.stderr, d / "none")
    res["runs_exit"] = runs
    res["report"] = (d / "report" / "report.json").exists()
    return res


CASES: dict[str, Callable[[Runner, Path], dict[str, Any]]] = {
    f.__name__: f for f in (checks_nan_threshold, checks_min_above_max, checks_max_of_string,
                            checks_inf_passes_max, checks_nan_feed, checks_drift_many_strings,
                            report_against_many_strings)
}
