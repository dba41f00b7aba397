"""TFRecord framing: pure byte logic, no Beam, no TensorFlow.

Each record is: uint64 length, uint32 masked crc32c(length), data, uint32 masked crc32c(data),
little-endian; mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (TF record_writer.cc).
google-crc32c's C implementation checksums at several GB/s.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import google_crc32c
import numpy as np
import pyarrow as pa

from etl.errors import VerifyError

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
COMPRESSIONS = {"none": "", "gzip": ".gz", "zlib": ".zz"}


def masked_crc(data: bytes | memoryview) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    header = _U64.pack(len(record))
    return header + _U32.pack(masked_crc(header)) + record + _U32.pack(masked_crc(record))


def frame_all(records: Iterable[bytes]) -> bytes:
    """Frame many records; header CRCs are cached per length (fixed-size records share one)."""
    header_cache: dict[int, bytes] = {}
    parts: list[bytes] = []
    append = parts.append
    pack32 = _U32.pack
    for record in records:
        n = len(record)
        head = header_cache.get(n)
        if head is None:
            h = _U64.pack(n)
            head = header_cache[n] = h + pack32(masked_crc(h))
        append(head)
        append(record)
        append(pack32(masked_crc(record)))
    return b"".join(parts)


def frame_records(records: pa.LargeBinaryArray) -> pa.LargeBinaryArray:
    """Frame a whole column of serialized records: element i becomes record i's framing.

    Headers are built once per distinct length and placed with NumPy; the data CRCs are one
    C-level `map` over the records (≈0.25 µs/record, the only per-record step); the framed
    column is one element-wise concatenation in C++.
    """
    from etl.wire import binary, join, lengths  # noqa: PLC0415

    n = len(records)
    sizes = lengths(records)
    crcs = np.fromiter(map(google_crc32c.value, records.to_pylist()), np.uint32, n)
    heads = np.empty((n, 12), np.uint8)
    heads[:, :8] = sizes.astype("<u8").view(np.uint8).reshape(n, 8)
    heads[:, 8:] = _length_crcs(sizes).view(np.uint8).reshape(n, 4)
    tails = _mask(crcs).astype("<u4")
    return join([binary(heads, np.arange(n + 1, dtype=np.int64) * 12), records,
                 binary(tails, np.arange(n + 1, dtype=np.int64) * 4)])


def _length_crcs(sizes: np.ndarray) -> np.ndarray:
    """Masked CRC of each record's 8-byte length header, computed once per distinct length."""
    if not len(sizes):
        return np.zeros(0, "<u4")
    lo = int(sizes.min())
    span = np.bincount(sizes - lo)
    table = np.zeros(len(span), "<u4")
    for k in np.flatnonzero(span).tolist():
        table[k] = masked_crc(_U64.pack(k + lo))
    return table[sizes - lo]


def _mask(crcs: np.ndarray) -> np.ndarray:
    c = crcs.astype(np.uint32)
    with np.errstate(over="ignore"):
        return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)


class Compressor:
    """Whole-file GZIP/ZLIB as TFRecordDataset(compression_type=...) expects; mtime 0 in the
    gzip header, so the same records give the same bytes on every run."""

    def __init__(self, compression: str, level: int = 6):
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
        wbits = {"gzip": 31, "zlib": 15}.get(compression)
        self._z = zlib.compressobj(level, zlib.DEFLATED, wbits) if wbits else None

    def compress(self, data: bytes) -> bytes:
        return self._z.compress(data) if self._z else data

    def flush(self) -> bytes:
        return self._z.flush() if self._z else b""


def decompressing_reader(fh: BinaryIO, compression: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """Yield decompressed chunks of a whole file."""
    wbits = {"gzip": 31, "zlib": 15}.get(compression)
    z = zlib.decompressobj(wbits) if wbits else None
    while True:
        data = fh.read(chunk)
        if not data:
            break
        yield z.decompress(data) if z else data
    if z:
        tail = z.flush()
        if tail:
            yield tail
        if not z.eof:
            raise VerifyError("compressed stream is truncated")


def iter_records(
    chunks: Iterable[bytes], name: str = "<stream>", check_crc: bool = True
) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, data) for each record; raise VerifyError naming file and offset."""
    buf = bytearray()
    offset = 0  # offset (in the uncompressed stream) of buf[0]
    pos = 0
    it = iter(chunks)
    exhausted = False

    def need(k: int) -> bool:
        nonlocal exhausted, buf, pos, offset
        while len(buf) - pos < k and not exhausted:
            try:
                nxt = next(it)
            except StopIteration:
                exhausted = True
                break
            if pos > (1 << 22):
                del buf[:pos]
                offset += pos
                pos = 0
            buf += nxt
        return len(buf) - pos >= k

    while True:
        if not need(1):
            return
        start = offset + pos
        if not need(12):
            raise VerifyError(f"{name}: truncated record header at offset {start}")
        (length,) = _U64.unpack_from(buf, pos)
        (hcrc,) = _U32.unpack_from(buf, pos + 8)
        if check_crc and masked_crc(bytes(buf[pos : pos + 8])) != hcrc:
            raise VerifyError(f"{name}: corrupted record header (length CRC mismatch) at offset {start}")
        if not need(12 + length + 4):
            raise VerifyError(f"{name}: truncated record at offset {start} "
                              f"(needs {length} data bytes)")
        data = bytes(buf[pos + 12 : pos + 12 + length])
        (dcrc,) = _U32.unpack_from(buf, pos + 12 + length)
        if check_crc and masked_crc(data) != dcrc:
            raise VerifyError(f"{name}: corrupted record data (CRC mismatch) at offset {start}")
        pos += 12 + length + 4
        yield start, data


def read_file(path: str, compression: str = "none", check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """All records of one TFRecord file (local or any FileSystems path)."""
    from etl.sources.base import open_file  # noqa: PLC0415

    with open_file(path) as fh:
        yield from iter_records(decompressing_reader(fh, compression), path, check_crc)


def compression_of(path: str) -> str:
    if path.endswith(".gz"):
        return "gzip"
    if path.endswith(".zz") or path.endswith(".zlib"):
        return "zlib"
    return "none"
