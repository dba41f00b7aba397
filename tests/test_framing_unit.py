"""etl.formats.tfrecord.frame_records: a whole column framed at once (the data CRCs computed in
slices of CRC_SLICE records) gives exactly the bytes of framing each record on its own, on
every side of a slice boundary, for empty records and for a column that is itself a slice;
and the framing's CRC32C (fastcrc's) gives google-crc32c's values at every length a record
or a header has, so frames match those of a writer built on google-crc32c."""

from __future__ import annotations

import struct

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest

from etl.formats.proto_wire import data_of
from etl.formats.tfrecord import CRC_SLICE, crc32c, frame_all, frame_records, read_file


def _records(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 300, n)
    sizes[::97] = 0  # empty records too
    return [rng.bytes(int(k)) for k in sizes]


@pytest.mark.parametrize("n", [0, 1, CRC_SLICE - 1, CRC_SLICE, CRC_SLICE + 1, 3 * CRC_SLICE + 5])
def test_a_column_frames_exactly_as_each_record_alone(n: int) -> None:
    records = _records(n, seed=n)
    framed = frame_records(pa.array(records, pa.large_binary()))
    assert len(framed) == n
    assert framed.to_pylist() == [frame_all([r]) for r in records]
    assert data_of(framed).to_pybytes() == frame_all(records)


def test_a_sliced_column_frames_its_own_records(tmp_path) -> None:
    records = _records(2 * CRC_SLICE + 10, seed=7)
    column = pa.array(records, pa.large_binary()).slice(CRC_SLICE - 3, CRC_SLICE + 6)
    framed = data_of(frame_records(column)).to_pybytes()
    assert framed == frame_all(records[CRC_SLICE - 3 : 2 * CRC_SLICE + 3])
    path = tmp_path / "x.tfrecord"
    path.write_bytes(framed)  # and the reader takes it back, every CRC checked
    assert [r for _, r in read_file(str(path))] == records[CRC_SLICE - 3 : 2 * CRC_SLICE + 3]


def _reference_frame(record: bytes) -> bytes:
    """A record framed by TF's record_writer.cc rules, with google-crc32c's CRC."""
    def masked(data: bytes) -> int:
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    header = struct.pack("<Q", len(record))
    return (header + struct.pack("<I", masked(header)) + record
            + struct.pack("<I", masked(record)))


def test_the_framing_crc_is_crc32c_at_every_length() -> None:
    rng = np.random.default_rng(11)
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720's polynomial)
    assert crc32c(b"") == 0
    for n in [*range(0, 300), 1023, 4096, 65_537, 1 << 20]:
        data = rng.bytes(n)
        assert crc32c(data) == google_crc32c.value(data), n
    records = [rng.bytes(n) for n in range(0, 300)] + [rng.bytes(70_000)]
    framed = frame_records(pa.array(records, pa.large_binary()))
    assert framed.to_pylist() == [_reference_frame(r) for r in records]
