"""The statistics a run gathers in its own conversion pass (stats.json, issue 23 point 2) are
the report's statistics from reading the output again: every field equal, exact ones and
sketches alike, for Examples fed from the encoder's columns (several input files, several
read tasks per file, a train/test split: the accumulators are merged across tasks) and for
SequenceExamples and already-serialized records (fed through the TensorFlow-free decoder).
Gathering is on with `stats: true`, with `checks:` and for `run --report`; off otherwise.

And `report OUT` of such an output reads no shard: it is built from stats.json (the page's
numbers are the re-read's numbers), while an output whose stats.json no longer matches its
manifest is read again.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from cli.run import run_job
from etl.contract.schema import load_schema
from etl.job.config import load_job
from etl.output.manifest import load_manifest
from etl.stats import document as report
from etl.stats.dataset import describe_features, load_stats

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

BEAM = ["--runner=FnApiRunner"]

EXAMPLE_SCHEMA = """\
name: mixed
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float32, shape: [], allow_nan: true}
  wide: {dtype: float32, shape: []}
  small: {dtype: uint8, shape: []}
  word: {dtype: string, shape: []}
  label: {dtype: int64, shape: [], vocabulary: [cat, dog, eel]}
  opt: {dtype: int64, shape: [], default: -1}
  tags: {dtype: int64, shape: [-1]}
  vec: {dtype: float32, shape: [3], encoding: raw}
"""


def _example_rows(part: int, n: int) -> list[dict[str, Any]]:
    out = []
    for k in range(n):
        i = part * n + k
        row: dict[str, Any] = {
            "id": i,
            "x": float("nan") if i % 97 == 0 else (i % 50) * 0.25,
            "wide": (i * 7919 % 100003) / 7.0,  # thousands of distinct values: the sketches
            "small": i % 256,
            "word": f"w{i % 40}",
            "label": ("cat", "dog", "eel")[i % 3 if i % 5 else 0],
            "tags": list(range(i % 4)),
            "vec": [i * 0.5, -i, i % 7],
        }
        if i % 6:
            row["opt"] = i % 11
        out.append(row)
    return out


def _assert_same(gathered: Any, reread: Any, where: str = "") -> None:
    """Equal; floats to 1e-12 relative (a sum, mean or second moment merged from parts in
    another order than one pass adds them differs in the last bits), NaN equal to NaN."""
    if isinstance(gathered, dict):
        assert isinstance(reread, dict) and gathered.keys() == reread.keys(), where
        for k in gathered:
            _assert_same(gathered[k], reread[k], f"{where}.{k}")
    elif isinstance(gathered, list):
        assert isinstance(reread, list) and len(gathered) == len(reread), where
        for i, (a, b) in enumerate(zip(gathered, reread, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(gathered, float) and math.isnan(gathered):
        assert isinstance(reread, float) and math.isnan(reread), where
    elif isinstance(gathered, float) and not gathered.is_integer():
        assert math.isclose(gathered, reread, rel_tol=1e-12), f"{where}: {gathered!r} != {reread!r}"
    else:
        assert gathered == reread, f"{where}: {gathered!r} != {reread!r}"


def _compare_with_a_reread(out: str) -> dict[str, Any]:
    manifest = load_manifest(out)
    assert "stats.json" in manifest["files"]
    schema = load_schema(str(Path(out) / "schema.yaml"))
    gathered = load_stats(out)
    assert gathered is not None
    reread = json.loads(json.dumps(describe_features(schema, report._read_all(out, manifest, schema)),
                                   default=lambda o: o.item()))
    _assert_same(gathered.doc["features"], reread)
    assert gathered.doc["splits"] == {s: {"num_records": info["num_records"]}
                                      for s, info in manifest["splits"].items()}
    return gathered.doc


@pytest.fixture(scope="module")
def example_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("example")
    (folder / "schema.yaml").write_text(EXAMPLE_SCHEMA)
    for part in range(3):
        (folder / f"part-{part}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _example_rows(part, 4000)))
    (folder / "job.yaml").write_text(
        "schema: schema.yaml\nsource: {format: jsonl, paths: ['part-*.jsonl']}\n"
        "split: {train: 0.8, test: 0.2}\nsplit_bytes: 64KiB\n"
        "output: out\nshuffle: {seed: 3}\nshards: 3\nstats: true\n")
    return run_job(load_job(str(folder / "job.yaml")), BEAM).output


def test_example_statistics_equal_a_reread(example_output: str) -> None:
    doc = _compare_with_a_reread(example_output)
    train = doc["features"]["label"]["splits"]["train"]
    test = doc["features"]["label"]["splits"]["test"]
    assert train["records"] + test["records"] == 12000  # every record, once
    # the numbers are the data's: 12000 records, NaN in every 97th, `opt` absent in every 6th
    x = doc["features"]["x"]["splits"]
    assert sum(s["nan_or_inf"] for s in x.values()) == len(range(0, 12000, 97))
    # `opt` absent in every 6th row: the encoder wrote its default, -1, into those records
    opt = doc["features"]["opt"]["splits"]
    assert sum(dict(map(tuple, s["value_counts"]))[-1] for s in opt.values()) == 2000
    assert not doc["features"]["wide"]["splits"]["train"]["value_counts_exact"]  # a sketch


def test_report_is_built_from_the_run_statistics_without_reading(example_output: str,
                                                                 monkeypatch) -> None:
    from_stats, _ = report.build(example_output)

    def no_reading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("report read the shards although stats.json describes them")

    monkeypatch.setattr(report, "_read_all", no_reading)
    again, _ = report.build(example_output)
    assert json.dumps(again["features"], sort_keys=True) == json.dumps(
        from_stats["features"], sort_keys=True)


def test_a_stats_file_that_no_longer_matches_is_not_used(example_output: str, tmp_path: Path,
                                                        monkeypatch) -> None:
    import shutil  # noqa: PLC0415

    copy = tmp_path / "copy"
    shutil.copytree(example_output, copy)
    stats = copy / "stats.json"
    doc = json.loads(stats.read_text())
    doc["features"]["x"]["splits"]["train"]["max"] = 1e9
    stats.write_text(json.dumps(doc))
    assert load_stats(str(copy)) is None  # its sha256 is not the manifest's
    calls = []
    real = report._read_all
    monkeypatch.setattr(report, "_read_all", lambda *a: calls.append(a) or real(*a))
    built, _ = report.build(str(copy))
    assert len(calls) == 1
    assert built["features"]["x"]["splits"]["train"]["max"] != 1e9


def test_sequence_example_statistics_equal_a_reread(tmp_path: Path) -> None:
    (tmp_path / "schema.yaml").write_text(
        "name: seq\nkind: sequence_example\n"
        "context:\n  id: {dtype: int64, shape: []}\n  name: {dtype: string, shape: []}\n"
        "sequence:\n  tokens: {dtype: int64, shape: []}\n"
        "  frames: {dtype: float32, shape: [2]}\n")
    rows = [{"id": i, "name": f"n{i % 9}", "tokens": [(i * j) % 13 for j in range(i % 7)],
             "frames": [[i * 0.5, j] for j in range(i % 7)]} for i in range(3000)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "job.yaml").write_text(
        "schema: schema.yaml\nsource: {format: jsonl, paths: [data.jsonl]}\n"
        "split: {train: 0.5, test: 0.5}\nsplit_bytes: 32KiB\n"
        "output: out\nshuffle: {seed: 1}\nshards: 2\nstats: true\n")
    out = run_job(load_job(str(tmp_path / "job.yaml")), BEAM).output
    doc = _compare_with_a_reread(out)
    tokens = doc["features"]["tokens"]["splits"]
    assert sum(s["records"] for s in tokens.values()) == 3000


def test_already_serialized_records_statistics_equal_a_reread(example_output: str,
                                                              tmp_path: Path) -> None:
    """A TFRecord source (records that arrive serialized) of the Example output above."""
    (tmp_path / "job.yaml").write_text(
        f"schema: {example_output}/schema.yaml\n"
        f"source: {{format: tfrecord, paths: ['{example_output}/train-*.tfrecord']}}\n"
        "output: out\nshuffle: {seed: 5}\nshards: 2\nstats: true\n")
    out = run_job(load_job(str(tmp_path / "job.yaml")), BEAM).output
    doc = _compare_with_a_reread(out)
    before = json.loads((Path(example_output) / "stats.json").read_text())
    # the same records, so the same exact numbers as the first run's train split
    for name in ("id", "x", "label", "opt"):
        mine = doc["features"][name]["splits"]["train"]
        theirs = before["features"][name]["splits"]["train"]
        for key in ("records", "missing", "min", "max", "sum", "zeros", "nan_or_inf"):
            assert mine.get(key) == theirs.get(key), (name, key)


def test_statistics_are_gathered_only_when_asked_for(tmp_path: Path) -> None:
    """Off by default (it costs conversion time: benchmarks/README.md); `checks:` turns it
    on; `run --report` turns it on for that run; `stats: false` with checks is refused."""
    from etl.base.errors import ConfigError  # noqa: PLC0415
    from tests.helpers import cli  # noqa: PLC0415

    (tmp_path / "schema.yaml").write_text(EXAMPLE_SCHEMA)
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in _example_rows(0, 300)))
    base = "schema: schema.yaml\nsource: {format: jsonl, paths: [data.jsonl]}\nshards: 1\n"
    for name, extra, gathered in [("plain", "", False), ("asked", "stats: true\n", True),
                                  ("checks", "checks: {block: {records: {min: 1}}}\n", True)]:
        (tmp_path / f"{name}.yaml").write_text(base + f"output: {name}\n" + extra)
        run_job(load_job(str(tmp_path / f"{name}.yaml")), BEAM)
        assert (tmp_path / name / "stats.json").exists() == gathered, name
        assert ("stats.json" in load_manifest(str(tmp_path / name))["files"]) == gathered
    proc = cli("run", str(tmp_path / "plain.yaml"), "--output", str(tmp_path / "reported"),
               "--report")
    assert proc.returncode == 0, proc.stderr
    assert load_stats(str(tmp_path / "reported")) is not None
    (tmp_path / "bad.yaml").write_text(base + "output: bad\nstats: false\n"
                                       "checks: {block: {records: {min: 1}}}\n")
    with pytest.raises(ConfigError, match="stats: false with checks:"):
        load_job(str(tmp_path / "bad.yaml"))
    (tmp_path / "bad.yaml").write_text(base + "output: bad\nstats: yes please\n")
    with pytest.raises(ConfigError, match="stats must be true or false, got 'yes please'"):
        load_job(str(tmp_path / "bad.yaml"))
