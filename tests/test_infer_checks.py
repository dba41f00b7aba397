"""`infer-schema --checks`: the proposed `checks:` block, exactly, from the sampled data; the
job file it is written into runs unchanged with its checks passing on the same data, and data
beyond a proposed range blocks the run (exit 6). Bounds are recomputed here from the CSV with
Decimal arithmetic (10% of the range on each side, rounded outwards to a step of 0.1, not
below 0 for values that are all >= 0)."""

from __future__ import annotations

import csv
import math
import os
import shutil
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path

import numpy as np
import pytest

from etl.job.checks import Check
from etl.job.config import load_job
from etl.output.manifest import load_manifest
from etl.quality.evaluate import evaluate
from etl.quality.stats import published_stats
from etl.tools.infer.checks import fraction, widened
from tests.helpers import ROOT, cli

IRIS = os.path.join(ROOT, "examples", "data", "iris.csv")
COLUMNS = ("sepal_length", "sepal_width", "petal_length", "petal_width")
IRIS_CHECKS = """\
# proposed by infer-schema from a sample of 150 records: review before relying on it
# (all 150 records of iris.csv; min/max: the sampled range widened by 10% of it on each side)
checks:
  block:
    records: {min: 1}  # per split: an empty split blocks
    rejected: {max_fraction: 0.01}  # of those read (beyond max_bad_fraction: exit 3 first)
    features:
      sepal_length: {min: 3.9, max: 8.3, nan: 0.0}  # observed 4.3..7.9 in 150 records
      sepal_width: {min: 1.7, max: 4.7, nan: 0.0}   # observed 2.0..4.4 in 150 records
      petal_length: {min: 0.4, max: 7.5, nan: 0.0}  # observed 1.0..6.9 in 150 records
      petal_width: {min: 0.0, max: 2.8, nan: 0.0}   # observed 0.1..2.5 in 150 records
      species: {distinct: {min: 2}}                 # observed 3 distinct values in 150 records
  warn:
    drift: 0.1  # every feature, against the previous published span
"""
JOB_HEAD = """\
# Written by `run_pipeline.py infer-schema` with schema.yaml: converts the inputs it was inferred
# from. Relative paths are relative to this file.
schema: schema.yaml
source:
  format: csv
  paths: [iris.csv]
# review: the split fractions (records are assigned by a hash of their position)
split: {train: 0.8, test: 0.2}
output: out/iris_csv_f96236
shuffle: {seed: 0}
"""
IRIS_SUMMARY = """\
infer-schema: 5 features from all 150 records of iris.csv (csv)
  csv: delimiter ',', header row, encoding utf-8
  vocabularies (text with at most 50 distinct values, each seen twice on average): species (3)
"""
IRIS_OUTPUT = "  output: out/iris_csv_f96236 (the job's; named after its inputs and format)\n"


def _bounds(values: list[str]) -> tuple[Decimal, Decimal]:
    """The proposed range of one iris column, recomputed from the CSV text."""
    lo, hi = min(map(Decimal, values)), max(map(Decimal, values))
    margin = (hi - lo) / 10
    assert Decimal("0.1") <= margin < 1  # so the step is 0.1 for every iris column
    low = max(Decimal(0), (lo - margin).quantize(Decimal("0.1"), ROUND_FLOOR))
    return low, (hi + margin).quantize(Decimal("0.1"), ROUND_CEILING)


def test_iris_block_is_the_sampled_ranges_with_a_margin() -> None:
    with open(IRIS, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    lines = IRIS_CHECKS.splitlines()
    for c in COLUMNS:
        values = [r[c] for r in rows]
        low, high = _bounds(values)
        line = next(x for x in lines if x.startswith(f"      {c}: "))
        assert line.startswith(f"      {c}: {{min: {low:.1f}, max: {high}, nan: 0.0}}"), line
        observed = f"observed {float(min(map(Decimal, values)))}..{float(max(map(Decimal, values)))}"
        assert line.endswith(f"# {observed} in 150 records"), line
    assert len({r["species"] for r in rows}) == 3


@pytest.mark.slow
def test_iris_job_with_checks_runs_and_data_beyond_a_range_blocks(tmp_path: Path) -> None:
    shutil.copy(IRIS, tmp_path / "iris.csv")
    r = cli("infer-schema", "iris.csv", "-o", "schema.yaml", "--job", "job.yaml", "--checks",
            cwd=str(tmp_path))
    assert (r.returncode, r.stdout, r.stderr) == (0, "wrote schema.yaml\nwrote job.yaml\n"
                                                  + IRIS_SUMMARY + IRIS_OUTPUT, "")
    job = str(tmp_path / "job.yaml")
    assert Path(job).read_text() == JOB_HEAD + IRIS_CHECKS

    # the project's own loader reads exactly these checks (file lines included)
    loaded = load_job(job)
    assert loaded.checks is not None
    assert loaded.checks.checks == (
        Check("block", "records.min", 1, None, 15),
        Check("block", "rejected.max_fraction", 0.01, None, 16),
        Check("block", "min", 3.9, "sepal_length", 18), Check("block", "max", 8.3, "sepal_length", 18),
        Check("block", "nan", 0.0, "sepal_length", 18),
        Check("block", "min", 1.7, "sepal_width", 19), Check("block", "max", 4.7, "sepal_width", 19),
        Check("block", "nan", 0.0, "sepal_width", 19),
        Check("block", "min", 0.4, "petal_length", 20), Check("block", "max", 7.5, "petal_length", 20),
        Check("block", "nan", 0.0, "petal_length", 20),
        Check("block", "min", 0.0, "petal_width", 21), Check("block", "max", 2.8, "petal_width", 21),
        Check("block", "nan", 0.0, "petal_width", 21),
        Check("block", "distinct.min", 2, "species", 22),
        Check("warn", "drift", 0.1, "*", 24))

    # runs unchanged; every check passes on the data it was proposed from
    r = cli("run", job, "--force")
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stderr.strip().splitlines() == [
        "WARNING drift and records.max_change checks passed: no previous span to compare with"]
    out = str(tmp_path / "out" / "iris_csv_f96236")
    stats = published_stats(out)
    results = evaluate(loaded.checks, stats, load_manifest(out), None)
    assert [(x.check, x.split) for x in results if not x.passed] == []
    assert len(results) == 2 + 2 * (4 * 3 + 1) + 2 * 5 + 1  # records per split, rejected, ...
    assert {x.check for x in results if x.measured is None} == {  # nothing published before
        f"features.{f}.drift" for f in (*COLUMNS, "species")}

    # one value beyond its proposed max: blocked, nothing published
    split = next(s for s, v in stats["features"]["sepal_length"]["splits"].items()
                 if v["max"] == float(np.float32(7.9)))
    text = (tmp_path / "iris.csv").read_text()
    assert text.count("\n7.9,") == 1
    (tmp_path / "iris.csv").write_text(text.replace("\n7.9,", "\n9.9,"))
    before = Path(out, "manifest.json").read_bytes()
    r = cli("run", job, "--force")
    assert r.returncode == 6, r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith(f"error: {out} blocked by 1 quality check(s): nothing published "
                               "(the previous output is unchanged)")
    assert lines[1:] == [f"  blocked: features.sepal_length.max, split {split}: measured "
                         f"{float(np.float32(9.9))!r}, must be at most 8.3"]
    assert Path(out, "manifest.json").read_bytes() == before


@pytest.mark.slow
def test_checks_without_job_are_printed_after_the_schema(tmp_path: Path) -> None:
    shutil.copy(IRIS, tmp_path / "iris.csv")
    schema = str(tmp_path / "schema.yaml")
    r = cli("infer-schema", str(tmp_path / "iris.csv"), "-o", schema, "--checks")
    assert (r.returncode, r.stdout) == (0, f"wrote {schema}\n" + IRIS_CHECKS + IRIS_SUMMARY)
    assert "checks:" not in Path(schema).read_text()
    r = cli("infer-schema", str(tmp_path / "iris.csv"), "--checks")
    assert (r.returncode, r.stderr) == (2, "error: --checks needs --output (and --job to put the "
                                           "checks: block in the job file; without it the block "
                                           "is printed after the schema is written)\n")


MIXED_CHECKS = """\
# proposed by infer-schema from a sample of 20 records: review before relying on it
# (all 20 records of mixed.csv; min/max: the sampled range widened by 10% of it on each side)
checks:
  block:
    records: {min: 1}  # per split: an empty split blocks
    rejected: {max_fraction: 0.01}  # of those read (beyond max_bad_fraction: exit 3 first)
    features:
      # observed 10..29 in 20 records; no min: the default -1 fills 1
      n: {max: 31}
      x: {min: 0.0, max: 5.3, nan: 0.38}               # observed 0.0..4.75 in 20 records, 1 NaN/Inf
      c: {distinct: {min: 2}}                          # observed 2 distinct values in 20 records
      neg: {min: -44, max: 0}                          # observed -40..-2 in 20 records
      big: {min: 1000000.0, max: 1580000.0, nan: 0.0}  # observed 1.05e+06..1.525e+06 in 20 records
  warn:
    drift: 0.1  # every feature, against the previous published span
"""


@pytest.mark.slow
def test_defaults_nan_negative_and_large_values(tmp_path: Path) -> None:
    """A default (-1 for a missing int, below the sampled range: the range is not widened to
    take it in, so the proposal has no min for that feature), NaN (its
    fraction with a margin), values all below 0 (the max stays 0), a large float range; the
    job runs with every check passing."""
    rows = ["n,x,c,neg,big"]
    for i in range(20):
        n = "" if i == 7 else str(10 + i)
        x = "nan" if i == 3 else str(i / 4)
        rows.append(f"{n},{x},{'ab'[i % 2]},{-2 * (i + 1)},{1_050_000 + 25_000 * i:.1f}")
    (tmp_path / "mixed.csv").write_text("\n".join(rows) + "\n")
    schema, job = str(tmp_path / "schema.yaml"), str(tmp_path / "job.yaml")
    r = cli("infer-schema", str(tmp_path / "mixed.csv"), "-o", schema, "--job", job, "--checks")
    assert r.returncode == 0, r.stderr
    text = Path(job).read_text()
    assert text.split("shuffle: {seed: 0}\n", 1)[1] == MIXED_CHECKS
    r = cli("run", job, "--force")
    assert r.returncode == 0, r.stderr + r.stdout
    out = str(tmp_path / "out" / "mixed_csv_2798b2")
    loaded = load_job(job)
    assert loaded.checks is not None
    results = evaluate(loaded.checks, published_stats(out), load_manifest(out), None)
    assert [(x.check, x.split) for x in results if not x.passed] == []


@pytest.mark.parametrize(("low", "high", "integer", "dtype", "want"), [
    (4.3, 7.9, False, "float32", (3.9, 8.3)),
    (0.1, 2.5, False, "float32", (0.0, 2.8)),  # not below 0: the values were all >= 0
    (-2.5, -0.1, False, "float64", (-2.8, 0.0)),  # not above 0
    (-1.0, 1.0, False, "float64", (-1.2, 1.2)),  # across 0 already: widened both ways
    (5.0, 5.0, False, "float64", (4.5, 5.5)),  # one value: 10% of it
    (0.0, 0.0, False, "float64", (0.0, 0.0)),  # all zero: neither bound crosses 0
    (0, 16, True, "uint8", (0, 18)),
    (3, 250, True, "uint8", (0, 255)),  # within the dtype
    (-40, -2, True, "int64", (-44, 0)),
    (100, 100, True, "int64", (90, 110)),
    (1.0000001, 1.0000002, False, "float32", (0.999999, 1.000002)),  # float32 steps, not 1e-8
])
def test_widened(low, high, integer, dtype, want) -> None:
    got = widened(low, high, integer, dtype)
    assert got == want and all(type(g) is (int if integer else float) for g in got)


@pytest.mark.parametrize(("count", "total", "rows", "want"), [
    (1, 20, 20, 0.38),  # 0.05 + 3 * sqrt(0.05 * 0.95 / 4) = 0.377
    (10, 40, 40, 0.71),
    (500, 10_000, 10_000, 0.08),  # half of 0.05 again
    (1, 10_000, 10_000, 0.02),  # at least +0.01
    (30, 40, 40, 1.0),
])
def test_fraction(count, total, rows, want) -> None:
    assert fraction(count, total, rows) == want
    assert math.isclose(want * 100, round(want * 100))


def test_the_docs_show_this_block() -> None:
    with open(os.path.join(ROOT, "docs", "tools.md"), encoding="utf-8") as fh:
        assert f"\n```yaml\n{IRIS_CHECKS}```\n" in fh.read()
