"""The bytes a sorted run or a chunk of one is when it crosses the runner's shuffle (`engine`):
compressed, checksummed, self-delimiting.

Every byte through Dataflow Shuffle is billed and every byte through the local runner is held
in its memory, so runs and chunks travel compressed: zstd at level 1 (pyarrow's Codec, no new
dependency), chosen by measurement against levels 2-3 and lz4 (benchmarks/README.md, "The
engine's shuffled bytes"). The record index (keys, ids, record lengths) is one zstd stream;
record lengths, not offsets, travel (small numbers; the offsets are their running sum). The
framed records are zstd streams of SEGMENT records each, so that cutting a packed run into
per-shard chunks (`cut`) passes every segment that falls wholly inside a shard through as
it is and recompresses only the segments a shard boundary cuts.

A shuffle that hands back damaged bytes must not become a wrong shard: the header and the
segment table carry their own CRC32C, the index and every segment the CRC32C of their
uncompressed bytes (a passed-through segment keeps the one computed when its run was packed),
and every size is checked against the bytes received, so a flipped or missing byte is an
error naming what the caller says the bytes were (a shard, a run), never a record. Layout,
little-endian:

    b"TFRS" | n:u64 | payload:u64 | index_z:u64 | m:u64 | index_crc32c:u32
    | m x (records:u32 | raw:u64 | z:u64 | crc32c:u32) | header_crc32c:u32
    | zstd(keys:u64[n] | ids:u64[n] | lengths:u64[n]) | m x zstd(segment of framed records)

(the header's CRC32C covers the fields and the table and is checked first: a damaged size
never reaches the decompressor, which would trust it for its allocation). The same arrays
always give the same bytes (zstd is deterministic at a given level and library version).
Beam-free: transforms/coders.py wraps this in Beam coders.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import google_crc32c
import numpy as np
import pyarrow as pa

from etl.base.errors import StorageError

MAGIC = b"TFRS"
FIELDS = struct.Struct("<4sQQQQI")
ENTRY = struct.Struct("<IQQI")
CRC = struct.Struct("<I")
HEADER = FIELDS  # the fixed part; the table and the header CRC follow it
CODEC = "zstd"
LEVEL = 1
SEGMENT = 1024  # records per compressed segment of a packed run
_INDEX_WIDTH = 24  # bytes of index per record: key, id, length

Segment = tuple[int, int, bytes | memoryview, int]  # records, raw bytes, compressed, crc32c


def _codec() -> pa.Codec:
    return pa.Codec(CODEC, LEVEL)


def _buffer(data: bytes | memoryview | pa.Buffer) -> pa.Buffer:
    return data if isinstance(data, pa.Buffer) else pa.py_buffer(data)


def _segment(codec: pa.Codec, records: int, raw: pa.Buffer) -> Segment:
    return (records, raw.size, codec.compress(raw, asbytes=True) if raw.size else b"",
            google_crc32c.value(raw))


def _assemble(codec: pa.Codec, keys: np.ndarray, ids: np.ndarray, lengths: np.ndarray,
              segments: list[Segment]) -> bytes:
    n = len(keys)
    index = np.concatenate([np.asarray(keys, "<u8"), np.asarray(ids, "<u8"),
                            np.asarray(lengths, "<u8")])
    index_z = codec.compress(index, asbytes=True) if n else b""
    size = sum(s[1] for s in segments)
    head = b"".join([FIELDS.pack(MAGIC, n, size, len(index_z), len(segments),
                                 google_crc32c.value(index)),
                     *(ENTRY.pack(r, raw, len(z), crc) for r, raw, z, crc in segments)])
    return b"".join([head, CRC.pack(google_crc32c.value(head)), index_z,
                     *(z for _, _, z, _ in segments)])


def pack(keys: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
         payload: bytes | memoryview | pa.Buffer) -> bytes:
    """keys, ids (uint64), offsets (len(keys) + 1, offsets[0] == 0) into payload -> bytes."""
    n = len(keys)
    offsets = np.asarray(offsets, "<i8")
    body = _buffer(payload)
    size = int(offsets[-1]) if len(offsets) else 0
    if body.size != size:
        raise ValueError(f"payload of {body.size} bytes, offsets say {size}")
    codec = _codec()
    starts = offsets[: n : SEGMENT].tolist() + [size]
    segments = [_segment(codec, min(SEGMENT, n - i * SEGMENT), body.slice(lo, hi - lo))
                for i, (lo, hi) in enumerate(zip(starts, starts[1:], strict=False))]
    return _assemble(codec, keys, ids, np.diff(offsets), segments)


@dataclass(frozen=True)
class Packed:
    """Packed bytes opened: the index unpacked and checked, the segments still compressed."""

    keys: np.ndarray  # uint64
    ids: np.ndarray  # uint64
    offsets: np.ndarray  # int64, len(keys) + 1, from 0
    table: list[tuple[int, int, int, int]]  # records, raw, compressed bytes, crc32c
    segments: list[memoryview]  # each segment's compressed bytes
    where: str

    def segment(self, j: int) -> pa.Buffer:
        """Segment j decompressed and checked."""
        records, raw, _, crc = self.table[j]
        try:
            out = (_codec().decompress(self.segments[j], decompressed_size=raw) if raw
                   else pa.py_buffer(b""))
        except (OSError, ValueError, OverflowError, pa.ArrowException) as exc:
            raise damaged(self.where, f"{CODEC}: {exc}") from None
        if out.size != raw or google_crc32c.value(out) != crc:
            raise damaged(self.where, f"segment {j}: CRC32C mismatch")
        return out

    def payload(self) -> pa.Buffer:
        parts = [self.segment(j) for j in range(len(self.table))]
        if len(parts) == 1:
            return parts[0]
        return pa.py_buffer(b"".join(parts)) if parts else pa.py_buffer(b"")


def damaged(where: str, why: str) -> StorageError:
    return StorageError(f"{where}: the shuffle delivered damaged data ({why}); "
                        "the run was stopped before writing it")


def count(data: bytes) -> int:
    """The number of records in packed `data` (its header only)."""
    if len(data) < FIELDS.size:
        return 0
    return FIELDS.unpack_from(data)[1]


def open_packed(data: bytes | memoryview, where: str) -> Packed:
    """The index of packed `data`, checked; a StorageError naming `where` (e.g. "shard train
    3") if the bytes are not exactly what `pack` or `cut` wrote."""
    if len(data) < FIELDS.size + CRC.size:
        raise damaged(where, f"{len(data)} bytes, shorter than a header")
    view = memoryview(data)
    magic, n, size, index_z, m, index_crc = FIELDS.unpack_from(view)
    table_end = FIELDS.size + ENTRY.size * m if m <= len(data) else len(data) + 1
    if table_end + CRC.size > len(data):
        raise damaged(where, f"{len(data)} bytes, shorter than its header says")
    (head_crc,) = CRC.unpack_from(view, table_end)
    if google_crc32c.value(bytes(view[:table_end])) != head_crc:
        raise damaged(where, "header CRC32C mismatch")
    if magic != MAGIC:
        raise damaged(where, "not a packed chunk")
    table = [ENTRY.unpack_from(view, FIELDS.size + ENTRY.size * j) for j in range(m)]
    at = table_end + CRC.size
    total = at + index_z + sum(t[2] for t in table)
    if len(data) != total:
        raise damaged(where, f"{len(data)} bytes, the header says {total}")
    if sum(t[0] for t in table) != n or sum(t[1] for t in table) != size:
        raise damaged(where, "the segment table differs from the header")
    try:
        index = (_codec().decompress(view[at : at + index_z],
                                     decompressed_size=_INDEX_WIDTH * n) if n
                 else pa.py_buffer(b""))
    except (OSError, ValueError, OverflowError, pa.ArrowException) as exc:
        raise damaged(where, f"{CODEC}: {exc}") from None
    if index.size != _INDEX_WIDTH * n or google_crc32c.value(index) != index_crc:
        raise damaged(where, "index CRC32C mismatch")
    keys = np.frombuffer(index, "<u8", n, 0)
    ids = np.frombuffer(index, "<u8", n, 8 * n)
    offsets = np.zeros(n + 1, "<i8")
    np.cumsum(np.frombuffer(index, "<u8", n, 16 * n), dtype=np.int64, out=offsets[1:])
    if int(offsets[-1]) != size:
        raise damaged(where, "record lengths differ from the payload size")
    bounds = np.cumsum([0] + [t[0] for t in table])
    if any(int(offsets[b] - offsets[a]) != t[1]
           for a, b, t in zip(bounds, bounds[1:], table, strict=False)):
        raise damaged(where, "segment sizes differ from the record lengths")
    offsets.flags.writeable = False
    segments, at = [], at + index_z
    for _, _, z, _ in table:
        segments.append(view[at : at + z])
        at += z
    return Packed(keys, ids, offsets, table, segments, where)


def unpack(data: bytes | memoryview, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                            pa.Buffer]:
    """`pack`'s arrays back (read-only), or a StorageError naming `where`."""
    packed = open_packed(data, where)
    return packed.keys, packed.ids, packed.offsets, packed.payload()


def cut(packed: Packed, a: int, b: int) -> bytes:
    """Records [a, b) of `packed`, packed: the segments wholly inside pass through with their
    CRC32C; the (at most two) that [a, b) cuts are decompressed, checked and recompressed."""
    codec = _codec()
    offsets = packed.offsets
    segments: list[Segment] = []
    s = 0
    for j, (records, raw, _, crc) in enumerate(packed.table):
        lo, hi = max(a, s), min(b, s + records)
        if lo < hi:
            if lo == s and hi == s + records:
                segments.append((records, raw, packed.segments[j], crc))
            else:
                whole = packed.segment(j)
                base = int(offsets[s])
                piece = whole.slice(int(offsets[lo]) - base, int(offsets[hi] - offsets[lo]))
                segments.append(_segment(codec, hi - lo, piece))
        s += records
    return _assemble(codec, packed.keys[a:b], packed.ids[a:b], np.diff(offsets[a : b + 1]),
                     segments)
