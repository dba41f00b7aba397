"""Unit tests of the quality gate's two halves, called directly: etl/job/checks.py (the job
file's `checks:` block -> Check objects with their lines, and the blocks refused) and
etl/quality/evaluate.py (checks against report-shaped statistics and a manifest -> results
and their one-line messages). The gate's end-to-end runs are tests/test_quality_checks.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import yaml

from etl.base.errors import ConfigError
from etl.job.checks import Check, Checks, key_lines, parse_checks
from etl.quality.evaluate import NO_PREVIOUS, evaluate
from etl.stats.accumulators import Numeric

JOB = """checks:
  block:
    records: {min: 10, max: 1000, max_change: 0.2}
    rejected: {max_fraction: 0.01, not_in_vocabulary: 0.001}
    drift: 0.2
    features:
      x: {min: 0, max: 100, missing: 0.05, nan: 0.0, mean: [10, 20], distinct: {min: 2}}
  warn:
    features:
      x: {drift: 0.05}
"""


def parsed(text: str) -> Checks | None:
    return parse_checks(yaml.safe_load(text)["checks"], "job.yaml", key_lines(text))


def test_a_checks_block_becomes_flat_checks_that_keep_their_line() -> None:
    checks = parsed(JOB)
    assert checks is not None
    got = [(c.level, c.name, c.threshold, c.line) for c in checks.checks]
    assert got == [
        ("block", "records.min", 10, 3), ("block", "records.max", 1000, 3),
        ("block", "records.max_change", 0.2, 3),
        ("block", "rejected.max_fraction", 0.01, 4),
        ("block", "rejected.not_in_vocabulary", 0.001, 4),
        ("block", "drift", 0.2, 5),
        ("block", "features.x.min", 0, 7), ("block", "features.x.max", 100, 7),
        ("block", "features.x.missing", 0.05, 7), ("block", "features.x.nan", 0.0, 7),
        ("block", "features.x.mean", (10, 20), 7), ("block", "features.x.distinct.min", 2, 7),
        ("warn", "features.x.drift", 0.05, 10),
    ]
    assert parse_checks(None, "job.yaml") is None


@pytest.mark.parametrize("block, message", [
    ("drift: .nan", "job.yaml:3: checks.block.drift must be a finite number, got nan"),
    ("records: {min: 5, max: 2}", "job.yaml:3: checks.block.records.min 5 is above "
     "checks.block.records.max 2: no value can pass; swap them or fix the bound"),
    ("rejected: {max_fraction: 1.5}",
     "job.yaml:3: checks.block.rejected.max_fraction must be within [0, 1], got 1.5"),
    ("sizes: 3", "job.yaml:3: unknown check 'sizes' in checks.block; allowed: records, "
     "rejected, drift, features"),
])
def test_blocks_no_data_could_pass_are_refused_at_their_line(block: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parsed(f"checks:\n  block:\n    {block}\n")
    assert str(e.value) == message


def test_an_unknown_reject_reason_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown check 'bogus' in checks.block.rejected; "
                                          r"allowed: max_fraction, wrong_field_count, "):
        parsed("checks:\n  block:\n    rejected: {bogus: 0.1}\n")


# ---- evaluation ----------------------------------------------------------------------------
def stats_of(splits: dict[str, np.ndarray], records: dict[str, int]) -> dict[str, Any]:
    """Report-shaped statistics of one float feature `x` (what etl.quality.stats builds)."""
    per_split = {}
    for split, values in splits.items():
        acc = Numeric(str(values.dtype))
        acc.add(values)
        entry = acc.to_json()
        entry["records"] = records[split]
        entry["missing"] = records[split] - values.size
        per_split[split] = entry
    return {"splits": {s: {"num_records": n} for s, n in records.items()},
            "features": {"x": {"dtype": "float32", "splits": per_split}}}


def manifest_of(records: dict[str, int], read: int, rejected: dict[str, int]) -> dict[str, Any]:
    return {"splits": {s: {"num_records": n} for s, n in records.items()},
            "inputs": [{"read": read}],
            "rejected": {"num_records": sum(rejected.values()), "by_reason": rejected}}


def lines(results: list[Any]) -> list[str]:
    return [r.line() for r in results]


def test_every_check_measures_what_its_name_says() -> None:
    checks = parsed(JOB)
    assert checks is not None
    train = np.array([12.0, 14.0, 16.0, 18.0] * 5, np.float32)  # mean 15, distinct 4
    stats = stats_of({"train": train}, {"train": 21})
    manifest = manifest_of({"train": 21}, read=25, rejected={"not_in_vocabulary": 4})
    previous = stats_of({"train": train}, {"train": 20})
    out = lines(evaluate(checks, stats, manifest, previous, "span-1"))
    assert out == [
        "ok: records.min, split train: measured 21, must be at least 10",
        "ok: records.max, split train: measured 21, must be at most 1000",
        "ok: records.max_change, split train: measured 0.05, must be at most 0.2",
        "blocked: rejected.max_fraction: measured 0.16, must be at most 0.01",
        "blocked: rejected.not_in_vocabulary: measured 0.16, must be at most 0.001",
        # the level's default `drift: 0.2` becomes x's own drift check, where it was written
        "ok: features.x.drift, split train: measured 0, must be at most 0.2",
        "ok: features.x.min, split train: measured 12, must be at least 0",
        "ok: features.x.max, split train: measured 18, must be at most 100",
        "ok: features.x.missing, split train: measured 0.047619047619047616, must be at most 0.05",
        "ok: features.x.nan, split train: measured 0, must be at most 0",
        "ok: features.x.mean, split train: measured 15, must be within [10, 20]",
        "ok: features.x.distinct.min, split train: measured 4, must be at least 2",
        "ok: features.x.drift, split train: measured 0, must be at most 0.05",
    ]


def test_nan_fails_range_checks_unless_a_nan_check_names_it() -> None:
    x = np.array([15.0, np.nan, 15.0, np.inf], np.float32)
    stats = stats_of({"train": x}, {"train": 4})
    manifest = manifest_of({"train": 4}, read=4, rejected={})
    ranges = Checks("job.yaml", (Check("block", "min", 0, "x"), Check("block", "mean", (10, 20), "x")))
    assert lines(evaluate(ranges, stats, manifest, None)) == [
        "blocked: features.x.min, split train: 2 of 4 values are NaN or infinite: out of range "
        "(a `nan:` check of x says how many may be)",
        "blocked: features.x.mean, split train: 2 of 4 values are NaN or infinite: out of range "
        "(a `nan:` check of x says how many may be)",
    ]
    named = Checks("job.yaml", (*ranges.checks, Check("warn", "nan", 0.25, "x")))
    assert lines(evaluate(named, stats, manifest, None)) == [
        "ok: features.x.min, split train: measured 15, must be at least 0",
        "ok: features.x.mean, split train: measured 15, must be within [10, 20]",
        "warning: features.x.nan, split train: measured 0.5, must be at most 0.25",
    ]


def test_without_a_previous_span_change_and_drift_pass_and_say_why() -> None:
    checks = Checks("job.yaml", (Check("block", "records.max_change", 0.1),
                                 Check("block", "drift", 0.1, "x")))
    stats = stats_of({"train": np.ones(3, np.float32)}, {"train": 3})
    results = evaluate(checks, stats, manifest_of({"train": 3}, 3, {}), None)
    assert [(r.passed, r.measured, r.note) for r in results] == [(True, None, NO_PREVIOUS)] * 2
    assert results[0].line() == f"ok: records.max_change, split train: {NO_PREVIOUS}"


def test_a_shifted_feature_drifts_and_a_grown_split_changes() -> None:
    checks = Checks("job.yaml", (Check("block", "records.max_change", 0.1),
                                 Check("warn", "drift", 0.1, "x")))
    before = stats_of({"train": np.arange(100, dtype=np.float32)}, {"train": 100})
    after = stats_of({"train": np.arange(100, 250, dtype=np.float32)}, {"train": 150})
    results = evaluate(checks, after, manifest_of({"train": 150}, 150, {}), before, "prev")
    assert [(r.level, r.passed, r.measured) for r in results][0] == ("block", False, 0.5)
    drifted = results[1]
    assert drifted.level == "warn" and drifted.passed is False and drifted.measured > 0.1
    assert drifted.to_json()["check"] == "features.x.drift"
