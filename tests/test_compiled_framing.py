"""etl.formats.compiled_framing: the framing loop compiled at run time gives exactly the bytes
of TF's rules with google-crc32c's CRC, record by record, in the order it is given; it is the
path a big column takes on this machine (an x86-64 CPU with SSE 4.2), so a lost llvmlite or
a failed compile cannot slow the data path down unnoticed; and an order that points outside
the column, or a null record, is refused before any byte is read."""

from __future__ import annotations

import platform

import numpy as np
import pyarrow as pa
import pytest

from etl.formats import compiled_framing
from etl.formats.proto_wire import data_of
from etl.formats.tfrecord import COMPILED_FROM, frame_records, read_file
from tests.test_framing_unit import _reference_frame

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _column(sizes: list[int], seed: int) -> pa.LargeBinaryArray:
    rng = np.random.default_rng(seed)
    return pa.array([rng.bytes(k) for k in sizes], pa.large_binary())


def _sizes(n: int, seed: int) -> list[int]:
    """Every length 0..299 (each tail a CRC's word loop leaves), then random ones and a few big."""
    rng = np.random.default_rng(seed)
    sizes = [*range(300), *rng.integers(0, 400, n - 305).tolist(), 70_000, 1 << 20, 8, 7, 0]
    return [int(k) for k in sizes]


@pytest.mark.skipif(not X86, reason="the compiled loop uses x86-64's SSE 4.2 crc32")
def test_this_machine_frames_big_columns_with_the_compiled_loop() -> None:
    assert compiled_framing.framer() is not None


@pytest.mark.skipif(not X86, reason="the compiled loop uses x86-64's SSE 4.2 crc32")
@pytest.mark.parametrize("ordered", [False, True])
def test_the_compiled_loop_frames_as_tf_does(ordered: bool) -> None:
    column = _column(_sizes(COMPILED_FROM + 7, seed=3), seed=4)
    records = column.to_pylist()
    order = np.random.default_rng(5).permutation(len(records)) if ordered else None
    framed = frame_records(column, order)
    expected_order = order.tolist() if ordered else range(len(records))
    assert framed.to_pylist() == [_reference_frame(records[k]) for k in expected_order]
    assert framed.equals(frame_records(column, order, compiled=False))


@pytest.mark.skipif(not X86, reason="the compiled loop uses x86-64's SSE 4.2 crc32")
def test_a_sliced_column_and_a_partial_order(tmp_path) -> None:
    column = _column(_sizes(3 * COMPILED_FROM, seed=8), seed=9)
    part = column.slice(1001, 2 * COMPILED_FROM)  # offsets not from 0 into the data buffer
    records = part.to_pylist()
    order = np.random.default_rng(10).permutation(len(part))[: COMPILED_FROM + 1]  # a subset
    framed = frame_records(part, order)
    assert len(framed) == len(order)
    assert framed.equals(frame_records(part, order, compiled=False))
    path = tmp_path / "x.tfrecord"
    path.write_bytes(data_of(framed).to_pybytes())  # the reader takes it back, every CRC checked
    assert [r for _, r in read_file(str(path))] == [records[k] for k in order.tolist()]


def test_empty_records_only_and_short_columns() -> None:
    # a column of empty records has no data to read; a short one is framed the fastcrc way
    empty = pa.array([b""] * COMPILED_FROM, pa.large_binary())
    assert data_of(frame_records(empty)).to_pybytes() == _reference_frame(b"") * COMPILED_FROM
    short = _column([5, 0, 300], seed=1)
    assert frame_records(short).to_pylist() == [_reference_frame(r) for r in short.to_pylist()]


def test_an_order_outside_the_column_is_refused() -> None:
    column = _column([3] * COMPILED_FROM, seed=2)
    for bad in (COMPILED_FROM, -1):
        order = np.arange(COMPILED_FROM)
        order[17] = bad
        with pytest.raises(IndexError, match=f"outside 0..{COMPILED_FROM - 1}"):
            frame_records(column, order)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_null_record_is_refused(compiled: bool) -> None:
    column = pa.array([b"ab", None, b"c"] * COMPILED_FROM, pa.large_binary())
    with pytest.raises(ValueError, match=f"{COMPILED_FROM} null records"):
        frame_records(column, compiled=compiled)


@pytest.mark.skipif(not X86, reason="the compiled loop uses x86-64's SSE 4.2 crc32")
def test_the_take_loop_copies_as_arrow_takes() -> None:
    column = _column(_sizes(5000, seed=12), seed=13)
    offsets = np.frombuffer(column.buffers()[1], np.int64)
    data = np.frombuffer(column.buffers()[2], np.uint8)
    order = np.random.default_rng(14).permutation(len(column))
    out = np.empty(int(offsets[-1]), np.uint8)
    take = compiled_framing.taker()
    assert take is not None
    take(data.ctypes.data, offsets, order, out)
    assert out.tobytes() == data_of(column.take(pa.array(order))).to_pybytes()
