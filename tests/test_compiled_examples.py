"""etl.formats.compiled_examples: the Example loop compiled for a block's feature layout writes
exactly proto_wire's bytes (which tests/test_proto_wire*.py hold to TensorFlow's parser) at
every varint boundary of a value, a blob's length, a name's length and a record's length;
for sliced and filtered columns; and it declines, leaving proto_wire to write, every layout it
does not write (a list of varying length, an int64 or bytes list, a null)."""

from __future__ import annotations

import platform

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from etl.formats import compiled_examples, proto_wire

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the compiled loops need x86-64 (etl.formats.jit)")

EDGES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**35, 2**56, 2**63 - 1,
         -1, -128, -(2**63)]


def _scalars(values: list, kind: pa.DataType) -> pa.Array:
    return pa.LargeListArray.from_arrays(pa.array(np.arange(len(values) + 1), pa.int64()),
                                         pa.array(values, kind))


def _fixed(values: np.ndarray, per_record: int) -> pa.Array:
    n = len(values) // per_record
    return pa.LargeListArray.from_arrays(pa.array(np.arange(n + 1) * per_record, pa.int64()),
                                         pa.array(values, pa.float32()))


def _columns(n: int, seed: int, name_len: int = 3) -> list[tuple[str, str, pa.Array]]:
    rng = np.random.default_rng(seed)
    ints = rng.choice(EDGES, n).tolist()
    blob_sizes = rng.choice([0, 1, 127, 128, 129, 300, 16383, 16384], n)
    blobs = [rng.bytes(int(k)) for k in blob_sizes]
    floats = rng.standard_normal(n * 40).astype(np.float32)
    floats[:8] = [np.nan, -0.0, np.inf, -np.inf, 1e-45, 3.4e38, 0.0, 1.0]
    return [("f" * name_len, "float", _fixed(floats[:n], 1)),
            ("i", "int64", _scalars(ints, pa.int64())),
            ("long_list", "float", _fixed(floats, 40)),  # 160 payload bytes: 2-byte varints
            ("b" * (name_len + 1), "bytes", _scalars(blobs, pa.large_binary())),
            ("s", "bytes", _scalars([b"x" * (k % 5) for k in range(n)], pa.binary()))]


@pytest.mark.parametrize("name_len", [1, 126, 127, 128, 300])
def test_the_loop_writes_proto_wire_bytes(name_len: int) -> None:
    columns = _columns(500, seed=name_len, name_len=name_len)
    ours = compiled_examples.serialize(columns)
    assert ours is not None
    expected = proto_wire.serialize_examples(columns)
    assert ours.equals(expected)
    first = tf.train.Example.FromString(ours[0].as_py())  # and TensorFlow reads it
    assert list(first.features.feature["i"].int64_list.value) == [columns[1][2][0][0].as_py()]


def test_one_feature_each_kind_alone() -> None:
    for column in _columns(300, seed=7):
        ours = compiled_examples.serialize([column])
        assert ours is not None and ours.equals(proto_wire.serialize_examples([column])), column[0]


def test_sliced_and_taken_columns() -> None:
    columns = _columns(400, seed=3)
    sliced = [(n, s, c.slice(37, 300)) for n, s, c in columns]
    taken = [(n, s, c.take(pa.array([5, 3, 3, 399, 0]))) for n, s, c in columns]
    for cols in (sliced, taken):
        ours = compiled_examples.serialize(cols)
        assert ours is not None and ours.equals(proto_wire.serialize_examples(cols))


def test_layouts_it_leaves_to_proto_wire() -> None:
    ragged = pa.array([[1.0], [2.0, 3.0]], pa.large_list(pa.float32()))
    int_list = pa.array([[1, 2], [3, 4]], pa.large_list(pa.int64()))
    blob_list = pa.array([[b"a", b"b"], [b"c", b"d"]], pa.large_list(pa.large_binary()))
    null_value = pa.array([[1.0], [None]], pa.large_list(pa.float32()))
    empty = pa.array([[], []], pa.large_list(pa.float32()))
    for name, storage, col in [("r", "float", ragged), ("l", "int64", int_list),
                               ("b", "bytes", blob_list), ("n", "float", null_value),
                               ("e", "float", empty)]:
        assert compiled_examples.serialize([(name, storage, col)]) is None, name
    assert compiled_examples.serialize([]) is None


def test_float64_values_are_written_as_proto_wire_rounds_them() -> None:
    values = pa.array([[0.1], [2.5e10], [-2.5]], pa.large_list(pa.float64()))
    ours = compiled_examples.serialize([("x", "float", values)])
    assert ours is not None and ours.equals(proto_wire.serialize_examples([("x", "float", values)]))


def test_the_encoder_takes_the_loop_for_a_big_block(monkeypatch) -> None:
    from pathlib import Path  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    from etl.contract.codec import Encoder  # noqa: PLC0415
    from etl.contract.schema import schema_from_dict  # noqa: PLC0415
    from etl.formats.jit import COMPILED_FROM  # noqa: PLC0415

    root = Path(__file__).resolve().parent.parent
    schema = schema_from_dict(yaml.safe_load((root / "schemas" / "bench_csv.yaml").read_text()))
    rng = np.random.default_rng(1)
    n = COMPILED_FROM
    columns = {f"f{k}": pa.array(rng.standard_normal(n).astype(np.float32)) for k in range(8)}
    columns |= {"i0": pa.array(rng.integers(0, 10**6, n)), "i1": pa.array(rng.integers(-999, 999, n)),
                "cat": pa.array(rng.choice(["alpha", "beta"], n).tolist(), pa.binary())}
    written = []
    loop = compiled_examples.serialize
    monkeypatch.setattr(compiled_examples, "serialize",
                        lambda cols: written.append(loop(cols)) or written[-1])
    ours = Encoder(schema).encode(columns).array
    assert written and written[0] is not None and ours.equals(written[0])
    monkeypatch.setattr(compiled_examples, "serialize", lambda cols: None)  # proto_wire's way
    assert Encoder(schema).encode(columns).array.equals(ours)
    assert len(ours) == n
