"""Spill files: one block's records, framed as TFRecords and sorted by key, with a key index.

Stage 1 of the shuffle writes one spill per (block, split) under the job's temp location;
only small `SpillMeta` values travel through Beam. Stage 2 reads, for one output shard,
the keys, ids and offsets of the key range it owns in every spill (a binary search on the
key column), then the payload in ranged reads of about one chunk, so a worker holds a chunk
of a shard, not the shard. Layout (little-endian):

    b"TFRSPIL1" | n:u64 | keys:u64[n] | ids:u64[n] | offsets:u64[n+1] | payload

The payload holds records already in TFRecord framing (length, CRCs), so building a shard
is only a gather of byte ranges; the framing work happens in stage 1, in parallel per file.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl import fs
from etl.tfrecord import frame_records
from etl.wire import binary_column, data_of, offsets_of

_MAGIC = b"TFRSPIL1"
_HEADER = struct.Struct("<8sQ")
HIST_BITS = 12  # key histogram buckets per spill: 4096 ranges of the 64-bit key space


@dataclass(frozen=True)
class SpillMeta:
    """What the planner needs to know about one spill file."""

    split: str
    path: str
    count: int
    num_bytes: int
    key_min: int
    key_max: int
    histogram: bytes  # uint32[2**HIST_BITS] counts of keys per range; b"" when not shuffling
    data: bytes = b""  # the spill itself, when spilling to memory (path is then "mem:...")


def sort_block(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Order of records by (key, id). Keys of one file never tie (they are a bijection of
    the position), so a plain sort is exact there; ids break ties otherwise."""
    order = np.argsort(keys)
    sorted_keys = keys[order]
    if len(keys) > 1 and (sorted_keys[1:] == sorted_keys[:-1]).any():
        return np.lexsort((ids, keys))
    return order


def write_spill(path: str, split: str, keys: np.ndarray, ids: np.ndarray,
                records: pa.LargeBinaryArray | list[bytes], histogram: bool) -> SpillMeta:
    """Sort one block's records by key and write them; returns the planner's metadata."""
    order = sort_block(keys, ids)
    keys = keys[order]
    ids = ids[order]
    framed = frame_records(binary_column(records).take(pa.array(order)))
    payload = data_of(framed)
    offsets = offsets_of(framed)
    offsets = offsets - offsets[0]
    parts = [_HEADER.pack(_MAGIC, len(keys)), keys.astype("<u8").tobytes(),
             ids.astype("<u8").tobytes(), offsets.astype("<u8").tobytes(), payload]
    in_memory = path.startswith("mem:")
    if not in_memory:
        with fs.open_write(path, durable=False) as fh:
            for part in parts:
                fh.write(part)
    hist = b""
    if histogram:
        hist = np.bincount((keys >> np.uint64(64 - HIST_BITS)).astype(np.int64),
                           minlength=1 << HIST_BITS).astype(np.uint32).tobytes()
    return SpillMeta(split=split, path=path, count=len(keys), num_bytes=int(offsets[-1]),
                     key_min=int(keys[0]) if len(keys) else 0,
                     key_max=int(keys[-1]) if len(keys) else 0, histogram=hist,
                     data=b"".join(map(bytes, parts)) if in_memory else b"")


@dataclass
class RangeIndex:
    """The keys, ids and payload offsets of one spill's records in a key range."""

    path: str
    keys: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray  # absolute file offsets of each record's framing, len(keys)+1
    data: bytes = b""  # the spill itself, when in memory

    def payload(self, lo: int, hi: int) -> bytes:
        """The framed records lo..hi-1 of this range, read in one go."""
        a, b = int(self.offsets[lo]), int(self.offsets[hi])
        if self.data:
            return self.data[a:b]
        with fs.open_read(self.path) as fh:
            fh.seek(a)
            return fh.read(b - a)


def read_index(path: str, key_lo: int, key_hi: int, data: bytes = b"") -> RangeIndex:
    """Keys, ids and offsets of the records with key_lo <= key < key_hi (key_hi may be 2**64)
    of one spill file (or of `data`, an in-memory spill); no payload is read yet."""
    with (io.BytesIO(data) if data else fs.open_read(path)) as fh:
        magic, n = _HEADER.unpack(fh.read(_HEADER.size))
        if magic != _MAGIC:
            raise OSError(f"{path}: not a spill file")
        keys = np.frombuffer(fh.read(8 * n), "<u8")
        a = int(np.searchsorted(keys, np.uint64(key_lo), side="left"))
        b = n if key_hi >= 1 << 64 else int(np.searchsorted(keys, np.uint64(key_hi), side="left"))
        b = max(a, b)
        fh.seek(_HEADER.size + 8 * n + 8 * a)
        ids = np.frombuffer(fh.read(8 * (b - a)), "<u8")
        fh.seek(_HEADER.size + 16 * n + 8 * a)
        offsets = np.frombuffer(fh.read(8 * (b - a + 1)), "<u8").astype(np.int64)
    payload_at = _HEADER.size + 24 * n + 8
    return RangeIndex(path, keys[a:b].copy(), ids.copy(), offsets + payload_at, data)
