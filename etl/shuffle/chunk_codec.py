"""The bytes a sorted run or a chunk of one is when it crosses the runner's shuffle (`engine`):
compressed, checksummed, self-delimiting.

Every byte through Dataflow Shuffle is billed and every byte through the local runner is held
in its memory, so a chunk travels compressed: zstd at level 1 (pyarrow's Codec, no new
dependency), chosen by measurement against levels 2-3 and lz4 (benchmarks/README.md, "The
engine's shuffled bytes"). The record index (keys, ids, record lengths) and the framed
records are compressed as two streams: the index is numbers, the records are mostly
protobuf, and each compresses better alone. Record lengths, not offsets, travel: they are
small numbers that compress to almost nothing, and the offsets are their running sum.

A shuffle that hands back damaged bytes must not become a wrong shard: the header carries
the CRC32C of the uncompressed index and records, and every size is checked against the
bytes received, so a flipped or missing byte is an error (naming what the caller says the
bytes were: a shard, a run) and never a record. Layout, little-endian:

    b"TFRC" | n:u64 | payload:u64 | index_z:u64 | payload_z:u64 | crc32c:u32
    | header_crc32c:u32 | zstd(keys:u64[n] | ids:u64[n] | lengths:u64[n]) | zstd(payload)

(the header's own CRC32C, of the 40 bytes before it, is checked first: a damaged size never
reaches the decompressor, which would trust it for its allocation).

The same arrays always give the same bytes (zstd is deterministic at a given level and
library version). Beam-free: transforms/coders.py wraps this in Beam coders.
"""

from __future__ import annotations

import struct

import google_crc32c
import numpy as np
import pyarrow as pa

from etl.base.errors import StorageError

MAGIC = b"TFRC"
FIELDS = struct.Struct("<4sQQQQI")
HEADER = struct.Struct("<4sQQQQII")
CODEC = "zstd"
LEVEL = 1
_INDEX_WIDTH = 24  # bytes of index per record: key, id, length


def _codec() -> pa.Codec:
    return pa.Codec(CODEC, LEVEL)


def _buffer(data: bytes | memoryview | pa.Buffer) -> pa.Buffer:
    return data if isinstance(data, pa.Buffer) else pa.py_buffer(data)


def pack(keys: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
         payload: bytes | memoryview | pa.Buffer) -> bytes:
    """keys, ids (uint64), offsets (len(keys) + 1, offsets[0] == 0) into payload -> bytes."""
    n = len(keys)
    lengths = np.diff(np.asarray(offsets, "<i8")).astype("<u8")
    index = np.concatenate([np.asarray(keys, "<u8"), np.asarray(ids, "<u8"), lengths])
    body = _buffer(payload)
    size = int(offsets[-1]) if len(offsets) else 0
    if body.size != size:
        raise ValueError(f"payload of {body.size} bytes, offsets say {size}")
    crc = google_crc32c.extend(google_crc32c.value(index), body)
    codec = _codec()
    index_z = codec.compress(index, asbytes=True) if n else b""
    payload_z = codec.compress(body, asbytes=True) if size else b""
    fields = FIELDS.pack(MAGIC, n, size, len(index_z), len(payload_z), crc)
    return b"".join([fields, struct.pack("<I", google_crc32c.value(fields)), index_z, payload_z])


def count(data: bytes) -> int:
    """The number of records in packed `data` (its header only)."""
    if len(data) < HEADER.size:
        return 0
    return HEADER.unpack_from(data)[1]


def unpack(data: bytes | memoryview, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                            pa.Buffer]:
    """`pack`'s arrays back (read-only, over buffers of their own), or a StorageError naming
    `where` (e.g. "shard train 3") if the bytes are not exactly what `pack` wrote."""
    def damaged(why: str) -> StorageError:
        return StorageError(f"{where}: the shuffle delivered damaged data ({why}); "
                            "the run was stopped before writing it")

    if len(data) < HEADER.size:
        raise damaged(f"{len(data)} bytes, shorter than a header")
    magic, n, size, index_z, payload_z, crc, header_crc = HEADER.unpack_from(data)
    if google_crc32c.value(bytes(data[: FIELDS.size])) != header_crc:
        raise damaged("header CRC32C mismatch")
    if magic != MAGIC:
        raise damaged("not a packed chunk")
    if len(data) != HEADER.size + index_z + payload_z:
        raise damaged(f"{len(data)} bytes, the header says {HEADER.size + index_z + payload_z}")
    view = memoryview(data)
    codec = _codec()
    try:
        index = (codec.decompress(view[HEADER.size : HEADER.size + index_z],
                                  decompressed_size=_INDEX_WIDTH * n) if n else pa.py_buffer(b""))
        body = (codec.decompress(view[HEADER.size + index_z :], decompressed_size=size)
                if size else pa.py_buffer(b""))
    except (OSError, ValueError, OverflowError, pa.ArrowException) as exc:
        raise damaged(f"{CODEC}: {exc}") from None
    if index.size != _INDEX_WIDTH * n or body.size != size:
        raise damaged("sizes differ from the header")
    if google_crc32c.extend(google_crc32c.value(index), body) != crc:
        raise damaged("CRC32C mismatch")
    keys = np.frombuffer(index, "<u8", n, 0)
    ids = np.frombuffer(index, "<u8", n, 8 * n)
    offsets = np.zeros(n + 1, "<i8")
    np.cumsum(np.frombuffer(index, "<u8", n, 16 * n), dtype=np.int64, out=offsets[1:])
    if int(offsets[-1]) != size:
        raise damaged("record lengths differ from the payload size")
    offsets.flags.writeable = False
    return keys, ids, offsets, body
