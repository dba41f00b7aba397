"""TFDS reads our output as its own (issue 30 point 1): real CLI runs carry dataset_info.json,
features.json and the labels files; `tfds.builder_from_directory(OUT)` decodes every record to
the values `make_dataset` gives, its split info equals the manifest, an ArrayRecord output
works with `as_data_source()`, a feature TFDS cannot express is named in one line, and `verify`
fails in one line when the metadata is damaged or missing."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow_datasets as tfds  # a test dependency (pyproject's `test` extra)

from etl.output.manifest import load_manifest
from etl.read.dataset import load_records
from etl.read.random_access import open_records
from tests.helpers import as_python, cli

ROWS = 23  # divides by nothing: shards of unequal length

RICH = """\
name: rich
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float32, shape: [3]}
  small: {dtype: int32, shape: []}
  flag: {dtype: bool, shape: []}
  name: {dtype: bytes, shape: []}
  words: {dtype: bytes, shape: [-1], required: false}
  tags: {dtype: int64, shape: [-1], required: false}
  pairs: {dtype: float32, shape: [-1, 2], required: false}
  half: {dtype: float16, shape: [2], encoding: raw}
  img: {dtype: uint8, shape: [4, 5, 3], encoding: png}
  gray: {dtype: uint8, shape: [3, 2, 1], encoding: png}
  color: {dtype: int64, shape: [], vocabulary: [red, green, blue]}
  opt: {dtype: int64, shape: [2], default: 7}
  word: {dtype: bytes, shape: [], default: none}
  when: {dtype: date}
  sp: {dtype: float32, shape: [-1], representation: sparse, required: false}
"""

SEQ = """\
name: seq
kind: sequence_example
context:
  id: {dtype: int64, shape: []}
  title: {dtype: bytes, shape: []}
sequence:
  tok: {dtype: int64, shape: []}
"""


def rich_rows(n: int = ROWS) -> list[dict[str, Any]]:
    rng = np.random.default_rng(3)
    colors = ["red", "green", "blue"]
    return [{
        "id": i * 3_000_000_000,
        "x": [i * 0.5, -i, 1.25],
        "small": i - 10,
        "flag": i % 2 == 0,
        "name": f"rec-{i}",
        "words": [f"w{j}" for j in range(i % 3)],
        "tags": list(range(i % 4)),
        "pairs": [[i, -j] for j in range(i % 3)],
        "half": [i / 4, -1.5],
        "img": rng.integers(0, 256, (4, 5, 3)).tolist(),
        "gray": rng.integers(0, 256, (3, 2, 1)).tolist(),
        "color": colors[i % 3],
        "opt": None if i % 3 == 0 else [i, i + 1],
        "word": None if i % 4 == 0 else f"w{i}",
        "when": f"2020-01-{1 + i:02d}",
        "sp": [float(i)] * (i % 3),
    } for i in range(n)]


def run(folder: Path, schema: str, rows: list[dict[str, Any]], **job: Any) -> str:
    """Our CLI on a small jsonl job; returns the output directory."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(schema)
    (folder / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "s.yaml", "source": {"format": "jsonl", "paths": ["d.jsonl"]},
        "split": {"train": 0.7, "test": 0.3}, "output": "out", "shards": 3,
        "shuffle": {"seed": 5}, "compression": "none", **job}))
    done = cli("run", str(folder / "job.yaml"), "--runner=FnApiRunner")
    assert done.returncode == 0, done.stderr[-3000:]
    (folder / "run.log").write_text(done.stdout + done.stderr)
    return str(folder / "out")


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run(tmp_path_factory.mktemp("rich"), RICH, rich_rows())


def ours(out: str, split: str) -> dict[str, list[Any]]:
    return {k: as_python(v) for k, v in load_records(out, split).items()}


def theirs(out: str, split: str) -> dict[str, list[Any]]:
    builder = tfds.builder_from_directory(out)
    got: dict[str, list[Any]] = {}
    for record in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
        for name, value in record.items():
            got.setdefault(name, []).append(as_python(value))
    return got


@pytest.mark.slow
def test_every_record_equals_make_dataset(rich):
    features = json.loads(Path(rich, "features.json").read_text())["featuresDict"]["features"]
    assert sorted(features) == sorted(ours(rich, "train"))
    for split in ("train", "test"):
        want, got = ours(rich, split), theirs(rich, split)
        assert len(got["id"]) == load_manifest(rich)["splits"][split]["num_records"]
        for name in features:
            assert got[name] == want[name], (split, name)


@pytest.mark.slow
def test_feature_kinds_and_labels(rich):
    info = tfds.builder_from_directory(rich).info
    f = info.features
    assert isinstance(f["img"], tfds.features.Image) and f["img"].shape == (4, 5, 3)
    assert isinstance(f["gray"], tfds.features.Image) and f["gray"].shape == (3, 2, 1)
    assert isinstance(f["name"], tfds.features.Text)
    assert isinstance(f["color"], tfds.features.ClassLabel)
    assert f["color"].names == ["red", "green", "blue"]
    assert f["color"].int2str(2) == "blue"
    assert f["pairs"].shape == (None, 2) and f["pairs"].dtype == np.float32
    assert f["half"].shape == (2,) and f["half"].dtype == np.float16


@pytest.mark.slow
def test_split_info_equals_the_manifest(rich):
    info = tfds.builder_from_directory(rich).info
    manifest = load_manifest(rich)
    assert sorted(info.splits) == sorted(manifest["splits"])
    for split, entry in manifest["splits"].items():
        assert info.splits[split].num_examples == entry["num_records"]
        assert info.splits[split].shard_lengths == [s["num_records"] for s in entry["shards"]]
        assert info.splits[split].num_bytes == entry["num_bytes"]
        assert [os.path.basename(p) for p in info.splits[split].filepaths] == [
            s["path"] for s in entry["shards"]]
    assert info.file_format.value == "tfrecord"


@pytest.mark.slow
def test_an_example_output_names_nothing(rich):
    assert [n for n in load_manifest(rich)["notes"] if "TFDS" in n] == []


@pytest.mark.slow
def test_metadata_is_listed_and_verify_catches_damage(rich, tmp_path):
    manifest = load_manifest(rich)
    for name in ("dataset_info.json", "features.json", "color.labels.txt"):
        assert name in manifest["files"], name
    assert cli("verify", rich).returncode == 0
    damaged = str(tmp_path / "damaged")
    shutil.copytree(rich, damaged)
    info = Path(damaged, "dataset_info.json")
    text = info.read_text()
    assert '"name": "rich"' in text
    info.write_text(text.replace('"name": "rich"', '"name": "rick"'))  # same size
    done = cli("verify", damaged)
    line = done.stderr.strip().splitlines()
    assert done.returncode == 3 and len(line) == 1, done.stderr
    assert re.fullmatch(f"error: {re.escape(str(info))}: sha256 [0-9a-f]{{64}} does not match "
                        "the manifest", line[0]), line
    info.unlink()
    done = cli("verify", damaged)
    assert (done.returncode, done.stderr.strip().splitlines()) == (
        3, [f"error: {info}: missing file listed in the manifest"])


@pytest.mark.slow
def test_sequence_example_context_reads_sequence_named(tmp_path):
    rows = [{"id": i, "title": f"t{i}", "tok": list(range(i % 4))} for i in range(ROWS)]
    out = run(tmp_path, SEQ, rows)
    line = ("TFDS cannot express feature(s) ['tok']: left out of features.json "
            "(the other features read with tfds.builder_from_directory)")
    assert [n for n in load_manifest(out)["notes"] if "TFDS" in n] == [line]
    said = [x for x in (tmp_path / "run.log").read_text().splitlines() if "TFDS" in x]
    assert len(said) == 1 and said[0].endswith(line), said
    for split in ("train", "test"):
        want, got = ours(out, split), theirs(out, split)
        assert sorted(got) == ["id", "title"]
        assert got["id"] == want["id"] and got["title"] == want["title"]


@pytest.mark.slow
def test_array_record_as_data_source(tmp_path):
    out = run(tmp_path, RICH, rich_rows(), format="array_record")
    builder = tfds.builder_from_directory(out)
    assert builder.info.file_format.value == "array_record"
    for split in ("train", "test"):
        source = builder.as_data_source(split=split)
        records = open_records(out, split)  # tf.data cannot read ArrayRecord: our own reader
        assert len(source) == len(records) == load_manifest(out)["splits"][split]["num_records"]
        for i in range(len(source)):
            got, want = source[i], records[i]
            assert sorted(got) == sorted(want)
            for name in want:
                assert as_python(got[name]) == as_python(want[name]), (split, i, name)


@pytest.mark.slow
def test_a_compressed_output_has_no_metadata_and_says_why(tmp_path):
    out = run(tmp_path, SEQ, [{"id": i, "title": "t", "tok": [i]} for i in range(ROWS)],
              compression="gzip")
    manifest = load_manifest(out)
    assert not [n for n in manifest["files"] if n.endswith(".json") or n.endswith(".txt")]
    assert not Path(out, "dataset_info.json").exists()
    assert [n for n in manifest["notes"] if "TFDS" in n] == [
        "no TFDS metadata: TFDS cannot read gzip-compressed TFRecord shards (write them "
        "uncompressed for tfds.builder_from_directory)"]


def test_images_of_any_size_and_jpeg_map_to_tfds_image():
    """Variable-size images need encoded files as input (no jsonl here): the mapping alone,
    read back by TFDS's own JSON loader."""
    from etl.contract.schema import schema_from_dict  # noqa: PLC0415
    from etl.output.tfds_info import feature_entry  # noqa: PLC0415

    schema = schema_from_dict({"name": "im", "kind": "example", "features": {
        "any": {"dtype": "uint8", "shape": [None, None, 3], "encoding": "jpeg"},
        "deep": {"dtype": "uint16", "shape": [4, 4, 1], "encoding": "png"}}})
    any_, deep = (tfds.features.FeatureConnector.from_json(feature_entry(f))
                  for f in schema.features)
    assert isinstance(any_, tfds.features.Image) and any_.shape == (None, None, 3)
    assert any_.encoding_format == "jpeg" and any_.dtype == np.uint8
    assert isinstance(deep, tfds.features.Image) and deep.shape == (4, 4, 1)
    assert deep.encoding_format == "png" and deep.dtype == np.uint16


@pytest.mark.slow
def test_a_gs_output_carries_the_metadata_tfds_reads(rich, tmp_path, gcs_emulator, gcs_bucket):
    """Published to gs:// (the emulator): the TFDS files are among the objects, byte for byte
    the local run's, and TFDS reads the published objects to the same records. TFDS cannot
    open gs:// on the emulator itself: TensorFlow's GCS file system has its endpoint built in
    (https://www.googleapis.com, tsl/platform/cloud/gcs_file_system.cc, no override), so the
    objects are read from a copy."""
    from etl.output.manifest import dataset_dir  # noqa: PLC0415

    out = f"{gcs_bucket}/tfds/out"
    run(tmp_path / "job", RICH, rich_rows(), output=out)
    version = dataset_dir(out)
    copy = tmp_path / "copy"
    for url in gcs_emulator.list(version + "/"):
        target = copy / url[len(version) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gcs_emulator.download(url))
    for name in ("dataset_info.json", "features.json", "color.labels.txt"):
        assert (copy / name).read_bytes() == (Path(rich) / name).read_bytes()
    for split in ("train", "test"):
        assert theirs(str(copy), split) == ours(rich, split)
