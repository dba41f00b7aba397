"""Quality checks that cannot be fooled (issue 28): nonsense `checks:` refused before any
work with file:line (exit 2), NaN and infinite values out of range for min/max/mean unless a
`nan:` check names them, and drift of high-cardinality strings by a documented measure (the
top values plus "the rest"), never a crash: `run` with a drift check, `run --report` and
`report --against` on strings with more than 1,024 distinct values in both spans.
Through the CLI, as a user meets it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import cli

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

BEAM = ["--runner=FnApiRunner"]
STRINGS = """\
name: strings
kind: example
features:
  id: {dtype: int64, shape: []}
  name: {dtype: bytes, shape: []}
"""
ROWS = 3000  # more distinct names than the statistics count exactly (1,024) in every span


def _strings_day(folder: Path, day: str, prefix: str, spam: int = 0) -> None:
    """ROWS records of distinct names (`prefix`0, `prefix`1, ...); the first `spam` of them
    all named "spam" instead (one frequent value among many rare ones)."""
    (folder / day).mkdir(parents=True, exist_ok=True)
    names = ["spam" if i < spam else f"{prefix}{i}" for i in range(ROWS)]
    (folder / day / "data.csv").write_text(
        "id,name\n" + "".join(f"{i},{n}\n" for i, n in enumerate(names)))


def _strings_job(folder: Path, checks: str) -> Path:
    (folder / "schema.yaml").write_text(STRINGS)
    job = folder / "job.yaml"
    job.write_text("schema: schema.yaml\n"
                   "source: {format: csv, paths: ['{date}/data.csv']}\n"
                   "output: 'out/{date}'\nshuffle: {seed: 1}\nshards: 2\n" + checks)
    return job


def test_drift_of_strings_with_more_than_1024_distinct_values(tmp_path: Path) -> None:
    """Three days of 3,000 names each (1,024 is what the statistics count exactly): day 2 has
    other names in the same shape (no frequent value on either day: nothing drifts, the
    measure is 0), day 3 has 40% "spam" (a frequent value appeared: its share, estimated by
    the Misra-Gries sketch within 3,000/1,025 records, is the drift). Before: every day
    after the first ended in `unexpected ValueError: max() arg is an empty sequence`."""
    _strings_day(tmp_path, "2026-01-01", "a")
    _strings_day(tmp_path, "2026-01-02", "b")
    _strings_day(tmp_path, "2026-01-03", "c", spam=1200)
    job = _strings_job(tmp_path, "checks: {block: {features: {name: {drift: 0.1}}}}\n")
    first = cli("run", str(job), "--date", "2026-01-01", *BEAM)
    assert first.returncode == 0, first.stderr
    second = cli("run", str(job), "--date", "2026-01-02", "--report", *BEAM)
    assert second.returncode == 0, second.stderr
    report = json.loads((tmp_path / "out" / "2026-01-02" / "report.json").read_text())
    assert report["features"]["name"]["splits"]["train"]["distinct"] > 1024
    assert report["drift"]["features"]["name"]["splits"]["train"] == {
        "metric": "linf_top_values", "value": 0.0, "threshold": 0.1, "flagged": False}

    third = cli("run", str(job), "--date", "2026-01-03", *BEAM)
    assert third.returncode == 6, third.stderr
    lines = [x.strip() for x in third.stderr.splitlines() if x.startswith("  blocked: ")]
    assert len(lines) == 1, third.stderr
    found = re.fullmatch(r"blocked: features\.name\.drift, split train: measured (\S+), "
                         r"must be at most 0\.1", lines[0])
    assert found, lines
    assert 0.4 - ROWS / 1025 / ROWS <= float(found.group(1)) <= 0.4
    assert "unexpected" not in third.stderr

    against = cli("report", str(tmp_path / "out" / "2026-01-02"), "--against",
                  str(tmp_path / "out" / "2026-01-01"), "--out", str(tmp_path / "r"))
    assert against.returncode == 0, against.stderr
    drift = json.loads((tmp_path / "r" / "report.json").read_text())["drift"]
    assert drift["features"]["name"]["splits"]["train"]["metric"] == "linf_top_values"
    assert drift["features"]["name"]["splits"]["train"]["value"] == 0.0
    assert drift["flagged"] is False


# ---- nonsense checks: refused before any work, one line with file:line, exit 2 ---------------
MIXED = """\
name: mixed
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float32, shape: [], allow_nan: true}
  name: {dtype: bytes, shape: []}
"""
HEAD = ("schema: schema.yaml\nsources: {train: {format: jsonl, paths: [data.jsonl]}}\n"
        "output: out\n")  # the checks start on line 4


@pytest.mark.parametrize(("checks", "message"), [
    ("checks:\n  block:\n    features:\n      x: {min: 10, max: 5}\n",
     "job.yaml:7: checks.block.features.x.min 10 is above checks.block.features.x.max 5: no "
     "value can pass; swap them or fix the bound"),
    ("checks:\n  block:\n    records:\n      min: 10\n      max: 2\n",
     "job.yaml:7: checks.block.records.min 10 is above checks.block.records.max 2: no value "
     "can pass; swap them or fix the bound"),
    ("checks:\n  warn:\n    features:\n      name: {distinct: {min: 3, max: 2}}\n",
     "job.yaml:7: checks.warn.features.name.distinct.min 3 is above "
     "checks.warn.features.name.distinct.max 2: no value can pass; swap them or fix the bound"),
    ("checks:\n  block:\n    features:\n      x: {missing: -0.1}\n",
     "job.yaml:7: checks.block.features.x.missing must be within [0, 1], got -0.1"),
    ("checks:\n  block:\n    rejected: {max_fraction: 1.5}\n",
     "job.yaml:6: checks.block.rejected.max_fraction must be within [0, 1], got 1.5"),
    ("checks:\n  block:\n    drift: .nan\n",
     "job.yaml:6: checks.block.drift must be a finite number, got nan"),
    ("checks:\n  block:\n    features:\n      x:\n        max: .inf\n",
     "job.yaml:8: checks.block.features.x.max must be a finite number, got inf"),
    ("checks:\n  block:\n    features:\n      x: {mean: [.nan, 3]}\n",
     "job.yaml:7: checks.block.features.x.mean must be [low, high] (two finite numbers, "
     "low <= high), got [nan, 3]"),
    ("checks:\n  block:\n    features:\n      name:\n        max: 3\n",
     "job.yaml:8: checks.block.features.name.max: 'name' is a string feature (dtype bytes in "
     "SCHEMA): max applies to numbers; for strings use distinct, missing or drift"),
    ("checks:\n  block:\n    features:\n      name: {mean: [1, 2]}\n",
     "job.yaml:7: checks.block.features.name.mean: 'name' is a string feature (dtype bytes in "
     "SCHEMA): mean applies to numbers; for strings use distinct, missing or drift"),
    ("checks:\n  block:\n    features:\n      id: {nan: 0.0}\n",
     "job.yaml:7: checks.block.features.id.nan: 'id' is int64 in SCHEMA: only a float feature "
     "holds NaN or infinite values"),
    ("checks:\n  block:\n    features:\n      y: {drift: 0.1}\n",
     "job.yaml:7: checks.block.features.y: no feature 'y' in the schema SCHEMA (its features: "
     "id, x, name)"),
    ("checks:\n  block:\n    features:\n      x: {p99: 3}\n",
     "job.yaml:7: unknown check 'p99' in checks.block.features.x; allowed: min, max, missing, "
     "nan, mean, drift, distinct"),
    ("checks:\n  block:\n    drift: '0.1'\n",
     "job.yaml:6: checks.block.drift must be a number, got '0.1'"),
    ("checks:\n  block:\n    features: [x]\n",
     "job.yaml:6: checks.block.features must be a mapping (feature name: {check: threshold}), "
     "got ['x']"),
    ("checks:\n  block:\n    features:\n      x: {max: true}\n",
     "job.yaml:7: checks.block.features.x.max must be a number, got True"),
], ids=["min-above-max", "records-min-above-max", "distinct-min-above-max", "negative-fraction",
        "fraction-above-1", "nan-drift", "inf-max", "nan-mean", "max-of-string",
        "mean-of-string", "nan-of-int", "unknown-feature", "unknown-check", "drift-text",
        "features-list", "bool-max"])
def test_nonsense_checks_are_refused_before_any_work(tmp_path: Path, checks: str,
                                                      message: str) -> None:
    (tmp_path / "schema.yaml").write_text(MIXED)
    (tmp_path / "data.jsonl").write_text('{"id": 1, "x": 1.5, "name": "a"}\n')
    job = tmp_path / "job.yaml"
    job.write_text(HEAD + checks)
    proc = cli("run", str(job), *BEAM)
    expected = message.replace("job.yaml", str(job)).replace("SCHEMA",
                                                             str(tmp_path / "schema.yaml"))
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [f"error: {expected}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl", "job.yaml",
                                                          "schema.yaml"]  # no work begun


# ---- NaN and inf are out of range for min/max/mean unless a nan: check names them ------------
FLOATS = """\
name: floats
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float32, shape: [], allow_nan: true}
"""


def _floats_day(folder: Path, day: str, nan: int = 0, inf: int = 0) -> None:
    """1,000 records, x = id % 10 (each of 0..9 equally often); the first `nan` of them NaN,
    the next `inf` +inf."""
    (folder / day).mkdir(parents=True, exist_ok=True)
    xs = ["nan" if i < nan else "inf" if i < nan + inf else str(i % 10) for i in range(1000)]
    (folder / day / "data.csv").write_text(
        "id,x\n" + "".join(f"{i},{x}\n" for i, x in enumerate(xs)))


def test_a_nan_feed_and_inf_fail_min_max_mean_and_drift(tmp_path: Path) -> None:
    """Day 2 is 899 NaN and one +inf among 1,000 values, its finite values shaped as day 1's.
    Before: it passed min 0, max 10, mean [0, 10] and drift 0.1 (NaN were left out of every
    measure, +inf was not even counted) and published. Now min, max and mean fail on the 900
    non-finite values (no `nan:` check names them) and drift counts them as one more bin:
    Jensen-Shannon of [f, 0] and [0.1 f, 0.9] (f: the shared finite shape)."""
    (tmp_path / "schema.yaml").write_text(FLOATS)
    job = tmp_path / "job.yaml"
    job.write_text("schema: schema.yaml\nsource: {format: csv, paths: ['{date}/data.csv']}\n"
                   "output: 'out/{date}'\nshards: 2\n"
                   "checks: {block: {features: {x: {min: 0, max: 10, mean: [0, 10], "
                   "drift: 0.1}}}}\n")
    _floats_day(tmp_path, "2026-01-01")
    _floats_day(tmp_path, "2026-01-02", nan=899, inf=1)
    first = cli("run", str(job), "--date", "2026-01-01", *BEAM)
    assert first.returncode == 0, first.stderr
    second = cli("run", str(job), "--date", "2026-01-02", *BEAM)
    assert second.returncode == 6, second.stderr
    note = ("900 of 1000 values are NaN or infinite: out of range (a `nan:` check of x says "
            "how many may be)")
    m = [0.55, 0.45]  # the mixture of [1, 0] and [0.1, 0.9] (per finite bin: scaled alike)
    js = (np.log2(1 / m[0]) + 0.1 * np.log2(0.1 / m[0]) + 0.9 * np.log2(0.9 / m[1])) / 2
    assert [x.strip() for x in second.stderr.splitlines() if x.startswith("  blocked: ")] == [
        f"blocked: features.x.min, split train: {note}",
        f"blocked: features.x.max, split train: {note}",
        f"blocked: features.x.mean, split train: {note}",
        f"blocked: features.x.drift, split train: measured {round(float(js), 6)!r}, must be "
        "at most 0.1"]
    assert not (tmp_path / "out" / "2026-01-02").exists()

    # a nan: check names them: min/max/mean measure the finite values, nan judges the rest
    job.write_text(job.read_text().replace("drift: 0.1}", "nan: 0.9}"))
    named = cli("run", str(job), "--date", "2026-01-02", *BEAM)
    assert named.returncode == 0, named.stderr
    assert (tmp_path / "out" / "2026-01-02" / "_SUCCESS").exists()


def test_drift_of_a_feature_that_changed_from_strings_to_numbers(tmp_path: Path) -> None:
    """The schema changed `x` from strings to floats between two days: drift is total (the
    `type` measure, 1.0), not `unexpected KeyError: 'min'` (the previous day has no range)."""
    (tmp_path / "schema.yaml").write_text(FLOATS.replace("float32, shape: [], allow_nan: true",
                                                         "bytes, shape: []"))
    job = tmp_path / "job.yaml"
    job.write_text("schema: schema.yaml\nsource: {format: csv, paths: ['{date}/data.csv']}\n"
                   "output: 'out/{date}'\nshards: 2\n"
                   "checks: {block: {features: {x: {drift: 0.5}}}}\n")
    _floats_day(tmp_path, "2026-01-01")
    _floats_day(tmp_path, "2026-01-02")
    assert cli("run", str(job), "--date", "2026-01-01", *BEAM).returncode == 0
    (tmp_path / "schema.yaml").write_text(FLOATS)
    second = cli("run", str(job), "--date", "2026-01-02", *BEAM)
    assert second.returncode == 6, second.stderr
    assert [x.strip() for x in second.stderr.splitlines() if x.startswith("  blocked: ")] == [
        "blocked: features.x.drift, split train: measured 1, must be at most 0.5"]
