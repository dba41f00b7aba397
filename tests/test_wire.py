"""Golden checks of the hand-written wire format against TensorFlow's own protos."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.formats import proto_wire
from etl.formats.proto_wire import varints


def _feature(values, kind):
    if kind == "int64":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if kind == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


# names in sorted order: protobuf's deterministic serialisation sorts map keys, ours keeps
# schema order, so the bytes must then be identical.
SCHEMA = {"name": "w", "kind": "example", "features": {
    "a_int": {"dtype": "int64", "shape": [-1]},
    "b_float": {"dtype": "float32", "shape": [-1]},
    "c_bytes": {"dtype": "bytes", "shape": [-1]},
}}


@pytest.mark.parametrize("seed", range(3))
def test_example_bytes_equal_protobuf_deterministic_serialisation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    ints = [rng.integers(-(2**63), 2**63 - 1, rng.integers(0, 5)).tolist() for _ in range(n)]
    ints[0] = [0, 1, 127, 128, 300, -1, 2**63 - 1, -(2**63)]
    floats = [rng.standard_normal(rng.integers(0, 4)).astype(np.float32).tolist() for _ in range(n)]
    blobs = [[bytes(rng.integers(0, 256, rng.integers(0, 300), dtype=np.uint8))
              for _ in range(rng.integers(0, 3))] for _ in range(n)]
    out = Encoder(schema_from_dict(SCHEMA)).encode(
        {"a_int": ints, "b_float": floats, "c_bytes": blobs})
    assert not out.bad
    for i, got in enumerate(out.records):
        want = tf.train.Example(features=tf.train.Features(feature={
            "a_int": _feature(ints[i], "int64"), "b_float": _feature(floats[i], "float"),
            "c_bytes": _feature(blobs[i], "bytes")}))
        assert got == want.SerializeToString(deterministic=True), i


def test_sequence_example_bytes_equal_protobuf() -> None:
    schema = schema_from_dict({"name": "s", "kind": "sequence_example",
                               "context": {"id": {"dtype": "int64", "shape": []}},
                               "sequence": {"tok": {"dtype": "int64", "shape": []},
                                            "vec": {"dtype": "float32", "shape": [2]}}})
    tok = [[1, 2, 300], [], [7]]
    vec = [[[0.5, 1.0], [2.0, 3.0], [4.0, 5.0]], [], [[1.5, -1.0]]]
    out = Encoder(schema).encode({"id": [10, 11, 12], "tok": tok, "vec": vec})
    assert not out.bad
    for i, got in enumerate(out.records):
        want = tf.train.SequenceExample(
            context=tf.train.Features(feature={"id": _feature([10 + i], "int64")}),
            feature_lists=tf.train.FeatureLists(feature_list={
                "tok": tf.train.FeatureList(feature=[_feature([t], "int64") for t in tok[i]]),
                "vec": tf.train.FeatureList(feature=[_feature(v, "float") for v in vec[i]]),
            }))
        assert got == want.SerializeToString(deterministic=True), i


def test_encoding_is_identical_across_calls() -> None:
    schema = schema_from_dict(SCHEMA)
    cols = {"a_int": [[1, 2]] * 50, "b_float": [[0.5]] * 50, "c_bytes": [[b"x"]] * 50}
    assert Encoder(schema).encode(cols).records == Encoder(schema).encode(cols).records


def test_idx_image_block_bytes_equal_protobuf() -> None:
    """An IDX reader's block (n, 28, 28) uint8 pixels and uint8 labels, under the benchmark's
    image schema (raw bytes + int64): every record is exactly TensorFlow's Example."""
    schema = schema_from_dict({"name": "i", "kind": "example", "features": {
        "image": {"dtype": "uint8", "shape": [28, 28, 1], "encoding": "raw"},
        "label": {"dtype": "int64", "shape": []}}})
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (50, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 50, dtype=np.uint8)
    labels[3] = 255  # a two-byte varint
    out = Encoder(schema).encode({"image": pixels, "label": labels})
    assert not out.bad
    assert len(out.records) == 50
    for i, got in enumerate(out.records):
        want = tf.train.Example(features=tf.train.Features(feature={
            "image": _feature([pixels[i].tobytes()], "bytes"),
            "label": _feature([int(labels[i])], "int64")}))
        assert got == want.SerializeToString(deterministic=True), i


@pytest.mark.parametrize("empty", [False, True], ids=["same_length", "all_empty"])
def test_records_of_one_length_equal_protobuf(empty: bool) -> None:
    """Every record the same length: each header is the same bytes for all records (written
    once as a template row or a scalar, never as n copies); with only empty lists a record
    is headers alone."""
    schema = schema_from_dict({"name": "c", "kind": "example", "features": {
        "b": {"dtype": "bytes", "shape": [-1]},
        "e": {"dtype": "int64", "shape": [-1], "required": False},
        "v": {"dtype": "float32", "shape": [-1]}}})
    rng = np.random.default_rng(3)
    n = 40
    blobs = [[] if empty else [bytes(rng.integers(0, 256, 3, dtype=np.uint8))] for _ in range(n)]
    vecs = [[] if empty else rng.standard_normal(2).astype(np.float32).tolist() for _ in range(n)]
    out = Encoder(schema).encode({"b": blobs, "e": [[] for _ in range(n)], "v": vecs})
    assert not out.bad
    assert len({len(r) for r in out.records}) == 1
    for i, got in enumerate(out.records):
        want = tf.train.Example(features=tf.train.Features(feature={
            "b": _feature(blobs[i], "bytes"), "e": _feature([], "int64"),
            "v": _feature(vecs[i], "float")}))
        assert got == want.SerializeToString(deterministic=True), i


@pytest.mark.parametrize("blobs", [[[b"a"], [b""], [b"xyz"]],  # one value per record
                                   [[b"a"], [], [b"b", b"c"]],  # as many values as records
                                   [[], [], []]],
                         ids=["one_each", "same_count_not_one_each", "none"])
def test_bytes_lists_grouped_or_not_equal_protobuf(blobs) -> None:
    schema = schema_from_dict({"name": "b", "kind": "example", "features": {
        "b": {"dtype": "bytes", "shape": [-1], "required": False},
        "n": {"dtype": "int64", "shape": [-1], "required": False}}})
    ints = [[len(v)] * len(v) for v in blobs]
    out = Encoder(schema).encode({"b": blobs, "n": ints})
    assert not out.bad
    for i, got in enumerate(out.records):
        want = tf.train.Example(features=tf.train.Features(feature={
            "b": _feature(blobs[i], "bytes"), "n": _feature(ints[i], "int64")}))
        assert got == want.SerializeToString(deterministic=True), i


@pytest.mark.parametrize("values", [
    np.arange(-1000, 1000).repeat(3),  # small range: gathered from a per-value table
    np.full(5000, -7),  # one value
    np.random.default_rng(1).integers(-2**63, 2**63 - 1, 5000),  # full range: the matrix
    np.array([0, 127, 128, -1, 2**63 - 1, -2**63]),  # shorter than the table's threshold
])
def test_varints_match_protobuf(values):
    """Every varint path gives protobuf's bytes (an int64 packed list's payload)."""
    want = tf.train.Int64List(value=values.tolist()).SerializeToString()
    got = b"".join(varints(values).to_pylist())
    assert want[0] == 0x0A  # packed field 1, then its length varint, then the payload
    assert want.endswith(got) and len(want) - len(got) <= 1 + 10


def test_scalar_features_headers_made_with_their_values_equal_protobuf() -> None:
    """Scalar int64 and bytes features have their headers made with the value (in the
    varint table, or per blob length) or beside it (the varint matrix), also where a
    header's own length varint grows with the value's length (a 118-character name: 127
    bytes for a 1-byte varint, 128 for a 2-byte one). All must be protobuf's bytes, from
    Arrow columns with and without nulls."""
    long_name = "d" + "x" * 117
    schema = schema_from_dict({"name": "s", "kind": "example", "features": {
        "a_small": {"dtype": "int64", "shape": []},
        "b_wide": {"dtype": "int64", "shape": []},
        "c_bytes": {"dtype": "bytes", "shape": []},
        long_name: {"dtype": "int64", "shape": [], "default": 5},
    }})
    rng = np.random.default_rng(11)
    n = 3000  # >= 1024: the small range goes through the per-value table
    small = rng.integers(-50, 300, n)
    wide = rng.integers(-(2**63), 2**63 - 1, n)
    blobs = [bytes(rng.integers(0, 256, k, dtype=np.uint8)) for k in rng.integers(0, 200, n)]
    grows = rng.integers(0, 300, n).tolist()  # 1- and 2-byte varints
    grows[7] = None  # a null: the default, 5
    out = Encoder(schema).encode({"a_small": pa.array(small), "b_wide": pa.array(wide),
                                  "c_bytes": pa.array(blobs, pa.binary()),
                                  long_name: pa.array(grows, pa.int64())})
    assert not out.bad
    assert len(out.records) == n
    for i, got in enumerate(out.records):
        want = tf.train.Example(features=tf.train.Features(feature={
            "a_small": _feature([int(small[i])], "int64"),
            "b_wide": _feature([int(wide[i])], "int64"),
            "c_bytes": _feature([blobs[i]], "bytes"),
            long_name: _feature([5 if grows[i] is None else grows[i]], "int64")}))
        assert got == want.SerializeToString(deterministic=True), i


@pytest.mark.parametrize("band", [1, 1000, 512 << 10], ids=["row_by_row", "uneven_bands", "default"])
def test_side_by_side_blocks_filled_in_bands_equal_protobuf(band: int, monkeypatch) -> None:
    """The fixed-width block is filled a band of rows at a time (proto_wire.SIDE_BY_SIDE_BAND):
    mostly headers (scalar floats under one template row) and mostly values (an image under
    its header columns), with bands of one row, bands that do not divide the rows, and one
    band, all give TensorFlow's bytes."""
    monkeypatch.setattr(proto_wire, "SIDE_BY_SIDE_BAND", band)
    schema = schema_from_dict({"name": "b", "kind": "example", "features": {
        **{f"f{i}": {"dtype": "float32", "shape": []} for i in range(4)},
        "image": {"dtype": "uint8", "shape": [28, 28], "encoding": "raw"},
        "label": {"dtype": "int64", "shape": []}}})
    rng = np.random.default_rng(5)
    n = 301
    floats = rng.standard_normal((4, n)).astype(np.float32)
    pixels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    headers_only = Encoder(schema_from_dict({"name": "h", "kind": "example", "features": {
        f"f{i}": {"dtype": "float32", "shape": []} for i in range(4)}}))
    for encoder, columns in ((headers_only, {f"f{i}": floats[i] for i in range(4)}),
                             (Encoder(schema), {**{f"f{i}": floats[i] for i in range(4)},
                                                "image": pixels, "label": labels})):
        out = encoder.encode(columns)
        assert not out.bad and len(out.records) == n
        for i, got in enumerate(out.records):
            feature = {f"f{k}": _feature([float(floats[k][i])], "float") for k in range(4)}
            if "image" in columns:
                feature |= {"image": _feature([pixels[i].tobytes()], "bytes"),
                            "label": _feature([int(labels[i])], "int64")}
            want = tf.train.Example(features=tf.train.Features(feature=feature))
            assert got == want.SerializeToString(deterministic=True), (band, i)
