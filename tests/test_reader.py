"""make_dataset on a pipeline-style output directory, and the inspect/spec printers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from etl.base.errors import EtlError
from etl.contract.codec import Encoder
from etl.contract.schema import load_schema, schema_from_dict
from etl.read.dataset import DatasetError, load_records, make_dataset
from etl.tools.inspect_output import inspect, spec_text
from tests.handmade import SCHEMA, N, columns, make_output_dir, write_shard

ROOT = Path(__file__).resolve().parent.parent
def collect(ds: tf.data.Dataset) -> dict[str, Any]:
    """All batches -> per-feature lists of per-record values (python / numpy)."""
    out: dict[str, list[Any]] = {}
    for batch in ds:
        for name, value in batch.items():
            rows = value.to_list() if isinstance(value, tf.RaggedTensor) else list(value.numpy())
            out.setdefault(name, []).extend(rows)
    return out


def assert_same_records(got: dict[str, Any], cols: dict[str, Any]) -> None:
    """Exact equality as a multiset: records sorted by their (unique) label."""
    order = np.argsort(np.asarray(got["label"]))
    assert np.asarray(got["label"])[order].tolist() == list(cols["label"])
    np.testing.assert_array_equal(np.stack(got["x"])[order], cols["x"], strict=True)
    assert [got["name"][i] for i in order] == [s.encode() for s in cols["name"]]
    assert [got["r"][i] for i in order] == cols["r"]
    np.testing.assert_array_equal(np.stack(got["img"])[order], cols["img"], strict=True)


# ---- directory mode ----------------------------------------------------------------------------
@pytest.mark.parametrize("ext", ["", ".gz"], ids=["plain", "gzip"])
def test_directory_shuffled_reads_everything(tmp_path, ext):
    out = make_output_dir(tmp_path / "ds", ext=ext)
    ds = make_dataset(str(out), batch_size=7, shuffle_buffer=32, seed=3)
    got = collect(ds)
    assert len(got["label"]) == N
    assert got["label"] != sorted(got["label"])  # shuffled
    assert_same_records(got, columns())


def test_directory_batch_shapes(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    batches = list(make_dataset(out, batch_size=8, shuffle_buffer=16, seed=0))
    assert [int(b["label"].shape[0]) for b in batches] == [8] * 7 + [4]
    first = batches[0]
    assert first["label"].shape == (8,) and first["label"].dtype == tf.int64
    assert first["x"].shape == (8, 3) and first["x"].dtype == tf.float32
    assert first["name"].shape == (8,) and first["name"].dtype == tf.string
    assert isinstance(first["r"], tf.RaggedTensor) and first["r"].shape.as_list() == [8, None]
    assert first["img"].shape == (8, 2, 2, 1) and first["img"].dtype == tf.uint8

    ds = make_dataset(out, batch_size=8, shuffle_buffer=16, drop_remainder=True)
    assert ds.element_spec["x"].shape.as_list() == [8, 3]
    assert [int(b["label"].shape[0]) for b in ds] == [8] * 7


def test_directory_unshuffled_keeps_shard_order(tmp_path):
    out = make_output_dir(tmp_path / "ds", num_shards=3)
    got = collect(make_dataset(out, batch_size=16, shuffle_buffer=0))
    assert [int(v) for v in got["label"]] == list(range(N))


def test_same_seed_same_order_and_repeat(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    first = collect(make_dataset(out, batch_size=10, shuffle_buffer=20, seed=7))["label"]
    again = collect(make_dataset(out, batch_size=10, shuffle_buffer=20, seed=7))["label"]
    assert [int(v) for v in first] == [int(v) for v in again]
    twice = collect(make_dataset(out, batch_size=10, shuffle_buffer=20, seed=7, repeat=2))
    assert sorted(int(v) for v in twice["label"]) == sorted(list(range(N)) * 2)


def test_manifest_shard_list_is_preferred(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"] = manifest["splits"]["train"]["shards"][1:]
    (out / "manifest.json").write_text(json.dumps(manifest))
    got = collect(make_dataset(out, batch_size=64, shuffle_buffer=0))
    assert [int(v) for v in got["label"]] == list(range(N // 2, N))


def test_no_manifest_globs_shard_names(tmp_path):
    out = make_output_dir(tmp_path / "ds", splits=("train", "test"), manifest=False, ext=".gz")
    got = collect(make_dataset(out, split="test", batch_size=64, shuffle_buffer=0))
    assert [int(v) for v in got["label"]] == list(range(N))


def test_sequence_example_directory(tmp_path):
    schema = load_schema(ROOT / "schemas" / "sentences.yaml")
    tokens = [[int(t) for t in range(i % 4)] for i in range(20)]
    cols = {"id": list(range(20)), "length": [len(t) for t in tokens], "tokens": tokens}
    out = make_output_dir(tmp_path / "seq", schema=schema, cols=cols)
    got = collect(make_dataset(out, batch_size=6, shuffle_buffer=50, seed=1))
    by_id = {int(i): t for i, t in zip(got["id"], got["tokens"], strict=True)}
    assert by_id == dict(enumerate(tokens))
    assert [int(v) for v in got["length"]] == [len(by_id[int(i)]) for i in got["id"]]


def test_load_records(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    got = load_records(out)
    cols = columns()
    np.testing.assert_array_equal(got["label"], cols["label"], strict=False)
    np.testing.assert_array_equal(got["x"], cols["x"], strict=True)
    assert got["r"] == cols["r"]


# ---- errors ----------------------------------------------------------------------------------
def test_missing_split_in_manifest(tmp_path):
    out = make_output_dir(tmp_path / "ds", splits=("train", "eval"))
    with pytest.raises(DatasetError, match=r"split 'test' not in manifest.json; available "
                                           r"splits: \['eval', 'train'\]"):
        make_dataset(out, split="test")


def test_missing_split_without_manifest(tmp_path):
    out = make_output_dir(tmp_path / "ds", manifest=False)
    with pytest.raises(ValueError, match=r"no shards for split 'validation'.*splits present: "
                                         r"\['train'\]"):
        make_dataset(out, split="validation")


def test_directory_without_schema(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    (out / "schema.yaml").unlink()
    with pytest.raises(DatasetError, match="no schema.yaml"):
        make_dataset(out)
    # an explicit schema still works
    assert len(collect(make_dataset(out, schema=SCHEMA, shuffle_buffer=0))["label"]) == N


def test_files_need_a_schema(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    with pytest.raises(DatasetError, match="needs schema="):
        make_dataset(str(out / "train-*"))
    with pytest.raises(DatasetError, match="no TFRecord files match"):
        make_dataset(str(out / "nothing-*"), schema=SCHEMA)
    with pytest.raises(DatasetError, match="no such file"):
        make_dataset([str(out / "missing.tfrecord")], schema=SCHEMA)
    # a schema path works as well as a Schema
    got = collect(make_dataset(str(out / "train-*"), schema=out / "schema.yaml",
                               shuffle_buffer=0))
    assert [int(v) for v in got["label"]] == list(range(N))


def test_manifest_listing_a_missing_shard(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    (out / "train-00001-of-00002.tfrecord").unlink()
    with pytest.raises(DatasetError, match=r"missing, e.g. .*train-00001-of-00002"):
        make_dataset(out)


@pytest.mark.parametrize("shuffle_buffer", [0, 1000], ids=["in_order", "shuffled"])
def test_corrupt_shard_is_named(tmp_path, shuffle_buffer):
    out = make_output_dir(tmp_path / "ds")
    shard = out / "train-00001-of-00002.tfrecord"
    data = bytearray(shard.read_bytes())
    first_len = int.from_bytes(data[:8], "little")
    second = 16 + first_len  # byte offset of the shard's second record
    data[second + 20] ^= 0xFF  # a flipped byte inside the second record's data
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as err:
        for _ in make_dataset(out, batch_size=8, shuffle_buffer=shuffle_buffer):
            pass
    assert str(err.value) == (f"{shard}: corrupted record data (CRC mismatch) at offset {second}")
    assert isinstance(err.value.__cause__, tf.errors.DataLossError)


def test_truncated_gzip_shard_is_named(tmp_path):
    """TensorFlow reads a truncated gzip shard as a shorter one, silently (first assert):
    make_dataset compares the shard sizes with the manifest before reading."""
    out = make_output_dir(tmp_path / "ds", ext=".gz")
    shard = out / "train-00000-of-00002.tfrecord.gz"
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-40])
    raw = tf.data.TFRecordDataset(str(shard), compression_type="GZIP")
    assert 0 < sum(1 for _ in raw) < N // 2
    with pytest.raises(DatasetError) as err:
        make_dataset(out, shuffle_buffer=0)
    assert str(err.value) == (f"{shard}: shard is {size - 40} bytes, manifest.json lists {size}: "
                              "truncated or replaced (`verify` checks every shard)")


def test_unparsable_record_is_named(tmp_path):
    """A shard of another schema's records (framing intact): the shard and record are named."""
    out = make_output_dir(tmp_path / "ds", manifest=False)
    other = schema_from_dict({"name": "o", "kind": "example",
                              "features": {"label": {"dtype": "int64", "shape": []}}})
    good = Encoder(SCHEMA).encode(columns(3)).records
    foreign = Encoder(other).encode({"label": [7]}).records
    shard = out / "train-00001-of-00002.tfrecord"
    write_shard(shard, good[:2] + foreign + good[2:])
    with pytest.raises(DatasetError) as err:
        list(make_dataset(out, shuffle_buffer=0, batch_size=4))
    offset = sum(16 + len(r) for r in good[:2])
    assert str(err.value).startswith(
        f"{shard}: record 2 (byte {offset}) does not parse with the dataset's schema: ")
    assert "x" in str(err.value)  # TF's message names the missing feature


def test_make_dataset_is_still_a_tf_dataset(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    ds = make_dataset(out, shuffle_buffer=0, batch_size=7)
    assert isinstance(ds, tf.data.Dataset)
    assert [int(b["label"][0]) for b in ds.take(2)] == [0, 7]
    assert ds.element_spec["x"].shape.as_list() == [None, 3]


def test_errors_are_etl_errors(tmp_path):
    assert issubclass(DatasetError, EtlError) and issubclass(DatasetError, ValueError)


# ---- inspect and spec ------------------------------------------------------------------------
def test_inspect_decodes_with_schema_beside_data(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    blocks = list(inspect([str(out)], limit=3))
    text = "\n".join(blocks)
    assert blocks[0].startswith("# decoded with schema 'toy'")
    assert sum(b.startswith("-- record") for b in blocks) == 3
    assert "label: int64 [] = 1\n" in text
    assert "x: float32 [3] = [ 2. , 1. ,-2. ]" in text or "x: float32 [3] = [ 2.,  1., -2.]" in text
    assert "name: bytes [] = 'rec-2'" in text  # UTF-8 bytes shown as text
    assert "r: int32 [2] = [0, 1]" in text
    assert "img: uint8 [2, 2, 1]" in text
    # a single file finds the schema.yaml in its directory too
    one = "\n".join(inspect(str(out / "train-00001-of-00002.tfrecord"), limit=1))
    assert "label: int64 [] = 30" in one


def test_inspect_without_schema_prints_example_text(tmp_path):
    out = make_output_dir(tmp_path / "ds", ext=".gz")
    (out / "schema.yaml").unlink()
    blocks = list(inspect(out / "train-00000-of-00002.tfrecord.gz", limit=2))
    assert blocks[0].startswith("# no schema.yaml")
    assert blocks[1].endswith("(gzip)")
    text = "\n".join(blocks)
    assert text.count("tf.train.Example") == 2
    assert 'key: "label"' in text and "int64_list" in text and 'value: "rec-1"' in text
    # an explicit schema decodes them anyway
    text = "\n".join(inspect([out / "train-00000-of-00002.tfrecord.gz"], limit=1, schema=SCHEMA))
    assert "label: int64 [] = 0" in text


def test_inspect_raw_sequence_example(tmp_path):
    schema = load_schema(ROOT / "schemas" / "sentences.yaml")
    cols = {"id": [4], "length": [2], "tokens": [[17, 18]]}
    out = make_output_dir(tmp_path / "seq", schema=schema, cols=cols, num_shards=1)
    (out / "schema.yaml").unlink()
    text = "\n".join(inspect(str(out / "*.tfrecord"), limit=5))
    assert "tf.train.SequenceExample" in text
    assert "feature_lists" in text and 'key: "tokens"' in text and "value: 17" in text
    assert text.count("-- record") == 1


def test_inspect_errors(tmp_path):
    with pytest.raises(EtlError, match="no such file"):
        list(inspect(str(tmp_path / "nope.tfrecord")))
    with pytest.raises(EtlError, match="no \\*.tfrecord\\* files"):
        list(inspect(str(tmp_path)))


def test_spec_text():
    text = spec_text(ROOT / "schemas" / "sentences.yaml")
    assert "context_features = {" in text and "sequence_features = {" in text
    assert ("'tokens': FixedLenSequenceFeature(shape=[], dtype=tf.int64, allow_missing=True, "
            "default_value=None),  # -> RaggedTensor int64[batch, steps]") in text
    text = spec_text(str(ROOT / "schemas" / "mnist.yaml"))
    assert "features = {" in text
    assert ("'image': FixedLenFeature(shape=[], dtype=tf.string, default_value=None),  "
            "# -> Tensor uint8[batch, 28, 28, 1], decoded from raw") in text


@pytest.mark.slow
def test_import_etl_does_not_import_tensorflow():
    code = ("import sys, etl; assert 'tensorflow' not in sys.modules; "
            "etl.load_schema; etl.Schema; etl.Feature; etl.Encoder; "
            "assert 'tensorflow' not in sys.modules; print('ok')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    from etl import make_dataset as lazy

    assert lazy is make_dataset


def test_directory_in_a_list(tmp_path):
    out = make_output_dir(tmp_path / "ds")
    assert len(collect(make_dataset([out], shuffle_buffer=0))["label"]) == N
    with pytest.raises(DatasetError, match="is a directory"):
        make_dataset([out, out / "train-00000-of-00002.tfrecord"], schema=SCHEMA)
