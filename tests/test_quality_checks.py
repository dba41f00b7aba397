"""Quality checks (`checks:` in the job file, etl.quality): each kind of check passes on data
built to meet its threshold exactly and fails when the threshold is moved by a small margin,
and the failing line shows the exact value of the data; bad `checks:` blocks are refused with
exit 2 naming file:line.

The data: two real conversions (run_job) of a JSONL file of 100 records plus 2 whose label is
not in the vocabulary (rejected as not_in_vocabulary, max_bad_fraction allows them). Output A:
x = 0, 0.5, ..., 48.5 and two NaN; tags empty in every 10th record; labels a, b, c in turn.
Output B adds 10 records labelled "a" (the drift and the change of the record count).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.run import run_job
from etl.job.checks import parse_checks
from etl.job.config import load_job
from etl.output.manifest import load_manifest
from etl.quality.evaluate import Result, evaluate
from etl.quality.stats import published_stats
from tests.helpers import cli

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

BEAM = ["--runner=FnApiRunner"]
SCHEMA = """\
name: checked
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float32, shape: [], allow_nan: true}
  tags: {dtype: int64, shape: [-1]}
  label: {dtype: int64, shape: [], vocabulary: [a, b, c]}
"""
LABELS = "abc"


def rows(extra_a: int = 0) -> list[dict[str, Any]]:
    out = []
    for i in range(100):
        x = float("nan") if i >= 98 else i * 0.5
        out.append({"id": i, "x": x, "tags": [] if i % 10 == 0 else [i % 3],
                    "label": LABELS[i % 3]})
    out += [{"id": 100 + i, "x": 1.0, "tags": [1], "label": "a"} for i in range(extra_a)]
    out += [{"id": 900 + i, "x": 1.0, "tags": [1], "label": "zzz"} for i in range(2)]
    return out


def convert(folder: Path, data: list[dict[str, Any]]) -> str:
    folder.mkdir(parents=True)
    (folder / "schema.yaml").write_text(SCHEMA)
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    (folder / "job.yaml").write_text(
        "schema: schema.yaml\nsources: {train: {format: jsonl, paths: [data.jsonl]}}\n"
        "output: out\nshuffle: {seed: 1}\nshards: 2\nmax_bad_fraction: 0.05\n")
    return run_job(load_job(str(folder / "job.yaml")), BEAM).output


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("checks")
    a = convert(base / "a", rows())
    b = convert(base / "b", rows(extra_a=10))
    return {"a": published_stats(a), "b": published_stats(b), "manifest_a": load_manifest(a),
            "manifest_b": load_manifest(b), "a_path": a}


def run(outputs: dict[str, Any], block: dict[str, Any], against: bool = False) -> list[Result]:
    """The block checks on output A, or on B against A."""
    checks = parse_checks({"block": block}, "job.yaml")
    assert checks is not None
    if against:
        return evaluate(checks, outputs["b"], outputs["manifest_b"], outputs["a"],
                        outputs["a_path"])
    return evaluate(checks, outputs["a"], outputs["manifest_a"], None)


def failed(results: list[Result]) -> list[str]:
    return [r.line() for r in results if not r.passed]


# (check as in the job file, threshold that passes exactly, one that fails by a small margin,
#  the failing line: the measured value is the data's)
CASES = [
    ({"records": {"min": 100}}, {"records": {"min": 101}},
     "blocked: records.min, split train: measured 100, must be at least 101"),
    ({"records": {"max": 100}}, {"records": {"max": 99}},
     "blocked: records.max, split train: measured 100, must be at most 99"),
    ({"rejected": {"max_fraction": 0.0197}}, {"rejected": {"max_fraction": 0.0196}},
     f"blocked: rejected.max_fraction: measured {2 / 102!r}, must be at most 0.0196"),
    ({"rejected": {"not_in_vocabulary": 0.0197, "wrong_type": 0.0}},
     {"rejected": {"not_in_vocabulary": 0.0196}},
     f"blocked: rejected.not_in_vocabulary: measured {2 / 102!r}, must be at most 0.0196"),
    ({"features": {"x": {"min": 0, "nan": 0.02}}}, {"features": {"x": {"min": 0.5, "nan": 0.02}}},
     "blocked: features.x.min, split train: measured 0, must be at least 0.5"),
    ({"features": {"x": {"max": 48.5, "nan": 0.02}}},
     {"features": {"x": {"max": 48.4, "nan": 0.02}}},
     "blocked: features.x.max, split train: measured 48.5, must be at most 48.4"),
    ({"features": {"tags": {"missing": 0.1}}}, {"features": {"tags": {"missing": 0.09}}},
     "blocked: features.tags.missing, split train: measured 0.1, must be at most 0.09"),
    ({"features": {"x": {"nan": 0.02}}}, {"features": {"x": {"nan": 0.019}}},
     "blocked: features.x.nan, split train: measured 0.02, must be at most 0.019"),
    ({"features": {"x": {"mean": [24.25, 30], "nan": 0.02}}},
     {"features": {"x": {"mean": [24.26, 30], "nan": 0.02}}},
     "blocked: features.x.mean, split train: measured 24.25, must be within [24.26, 30]"),
    ({"features": {"label": {"distinct": {"min": 3}}}},
     {"features": {"label": {"distinct": {"min": 4}}}},
     "blocked: features.label.distinct.min, split train: measured 3, must be at least 4"),
    ({"features": {"label": {"distinct": {"max": 3}}}},
     {"features": {"label": {"distinct": {"max": 2}}}},
     "blocked: features.label.distinct.max, split train: measured 3, must be at most 2"),
]


@pytest.mark.parametrize(("passing", "failing", "line"), CASES,
                         ids=[json.dumps(c[1]) for c in CASES])
def test_each_check_passes_at_its_threshold_and_fails_past_it(
        outputs: dict[str, Any], passing: dict[str, Any], failing: dict[str, Any],
        line: str) -> None:
    passed = run(outputs, passing)
    assert passed and all(r.passed for r in passed)
    assert failed(run(outputs, failing)) == [line]


def test_nan_is_out_of_range_for_min_max_mean_unless_a_nan_check_names_it(
        outputs: dict[str, Any]) -> None:
    """x has 2 NaN among 100 values (allow_nan: true): min, max and mean fail on them
    whatever their bounds; a `nan:` check of x at either level names them, and min/max/mean
    then measure the 98 finite values."""
    bounds = {"min": -1000, "max": 1000, "mean": [-1000, 1000]}
    note = ("2 of 100 values are NaN or infinite: out of range (a `nan:` check of x says how "
            "many may be)")
    assert failed(run(outputs, {"features": {"x": bounds}})) == [
        f"blocked: features.x.{kind}, split train: {note}" for kind in ("min", "max", "mean")]
    assert all(r.passed for r in run(outputs, {"features": {"x": {**bounds, "nan": 0.02}}}))
    checks = parse_checks({"block": {"features": {"x": bounds}},
                           "warn": {"features": {"x": {"nan": 0.0}}}}, "job.yaml")
    assert checks is not None
    assert failed(evaluate(checks, outputs["a"], outputs["manifest_a"], None)) == [
        "warning: features.x.nan, split train: measured 0.02, must be at most 0"]


def test_record_count_change_against_the_previous_span(outputs: dict[str, Any]) -> None:
    """110 records after 100: a change of exactly 0.1."""
    assert all(r.passed for r in run(outputs, {"records": {"max_change": 0.1}}, against=True))
    assert failed(run(outputs, {"records": {"max_change": 0.099}}, against=True)) == [
        "blocked: records.max_change, split train: measured 0.1, must be at most 0.099"]


def test_drift_of_a_label_against_the_previous_span(outputs: dict[str, Any]) -> None:
    """L-infinity of the label shares: a 34/100 -> 44/110 (b, c: 33/100 -> 33/110)."""
    linf = round(max(abs(44 / 110 - 34 / 100), abs(33 / 110 - 33 / 100)), 6)
    assert all(r.passed for r in run(outputs, {"features": {"label": {"drift": linf}}},
                                     against=True))
    assert failed(run(outputs, {"features": {"label": {"drift": 0.05}}}, against=True)) == [
        f"blocked: features.label.drift, split train: measured {linf!r}, must be at most 0.05"]


def test_a_default_drift_covers_every_feature_and_the_first_span_passes(
        outputs: dict[str, Any]) -> None:
    results = run(outputs, {"drift": 0.0})  # nothing published before: nothing to compare
    assert [(r.check, r.passed, r.note) for r in results] == [
        (f"features.{name}.drift", True, "no previous span to compare with")
        for name in ("id", "x", "tags", "label")]
    against = run(outputs, {"drift": 0.5, "features": {"label": {"drift": 0.05}}}, against=True)
    assert sorted((r.check, r.passed) for r in against) == [
        ("features.id.drift", True), ("features.label.drift", False),
        ("features.tags.drift", True), ("features.x.drift", True)]


# ---- bad checks: blocks: exit 2 naming file:line -------------------------------------------
JOB_HEAD = ("schema: schema.yaml\nsources: {train: {format: jsonl, paths: [data.jsonl]}}\n"
            "output: out\n")


@pytest.mark.parametrize(("checks", "message"), [
    ("checks:\n  block:\n    features:\n      x: {median: 3}\n",
     "job.yaml:7: unknown check 'median' in checks.block.features.x; allowed: min, max, "
     "missing, nan, mean, drift, distinct"),
    ("checks:\n  warn:\n    records:\n      min: lots\n",
     "job.yaml:7: checks.warn.records.min must be a whole number, got 'lots'"),
    ("checks:\n  block:\n    features:\n      x:\n        mean: 12\n",
     "job.yaml:8: checks.block.features.x.mean must be [low, high] (two finite numbers, "
     "low <= high), "
     "got 12"),
    ("checks:\n  block:\n    features:\n      label: {drift: 0.1}\n      y: {min: 0}\n",
     "job.yaml:8: checks.block.features.y: no feature 'y' in the schema SCHEMA (its features: "
     "id, x, tags, label)"),
    ("checks:\n  stop:\n    records: {min: 1}\n",
     "job.yaml:5: unknown check 'stop' in checks; allowed: block, warn"),
])
def test_bad_checks_are_refused_with_file_and_line(tmp_path: Path, checks: str,
                                                   message: str) -> None:
    (tmp_path / "schema.yaml").write_text(SCHEMA)
    (tmp_path / "data.jsonl").write_text('{"id": 1, "x": 1, "tags": [], "label": "a"}\n')
    job = tmp_path / "job.yaml"
    job.write_text(JOB_HEAD + checks)
    proc = cli("run", str(job))
    expected = message.replace("job.yaml", str(job)).replace("SCHEMA",
                                                             str(tmp_path / "schema.yaml"))
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [f"error: {expected}"])
