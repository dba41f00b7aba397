"""Sorted runs: one block's records of one split, framed as TFRecords and sorted by (key, id).

Both strategies start from a run: `files` writes it to a spill file, `engine` cuts it into one
chunk per shard it overlaps. A shard is then the key-ordered concatenation of its ranges of
every run, so the only per-record work of a shard is Arrow's C-level `take`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl import fs
from etl.shuffle.planning import BlockStats, block_stats
from etl.tfrecord import frame_records
from etl.wire import binary_column, data_of, offsets_of


def sort_block(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Order of records by (key, id). Keys of one file never tie (they are a bijection of
    the position), so a plain sort is exact there; ids break ties otherwise."""
    order = np.argsort(keys)
    sorted_keys = keys[order]
    if len(keys) > 1 and (sorted_keys[1:] == sorted_keys[:-1]).any():
        return np.lexsort((ids, keys))
    return order


@dataclass(frozen=True)
class SortedRun:
    """One block's records of one split, sorted, framed; what a spill file holds, as arrays."""

    split: str
    keys: np.ndarray  # uint64, sorted
    ids: np.ndarray  # uint64
    offsets: np.ndarray  # int64, len(keys) + 1, into payload, from 0
    payload: pa.Buffer | bytes

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.ids.nbytes + self.offsets.nbytes + len(self.payload)

    def stats(self, shuffled: bool) -> BlockStats:
        return block_stats(self.split, self.keys, int(self.offsets[-1]), shuffled)

    def key_range(self, key_lo: int, key_hi: int) -> tuple[int, int]:
        return key_range(self.keys, key_lo, key_hi)


def sorted_run(split: str, keys: np.ndarray, ids: np.ndarray,
               records: pa.LargeBinaryArray | list[bytes]) -> SortedRun:
    order = sort_block(keys, ids)
    framed = frame_records(binary_column(records).take(pa.array(order)))
    offsets = offsets_of(framed)
    return SortedRun(split, keys[order], ids[order], offsets - offsets[0], data_of(framed))


def key_range(keys: np.ndarray, key_lo: int, key_hi: int) -> tuple[int, int]:
    """[a, b): the positions of key_lo <= key < key_hi in sorted `keys` (key_hi may be 2**64)."""
    a = int(np.searchsorted(keys, np.uint64(key_lo), side="left"))
    b = (len(keys) if key_hi >= 1 << 64
         else int(np.searchsorted(keys, np.uint64(key_hi), side="left")))
    return a, max(a, b)


@dataclass
class RangeIndex:
    """The keys, ids and payload offsets of one run's records in a shard's key range; the
    payload is in memory (`data`) or read from `path` when needed."""

    path: str
    keys: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray  # offsets of each record's framing in the file (or data), len(keys)+1
    data: pa.Buffer | bytes | None = None

    def payload(self, lo: int, hi: int) -> bytes | pa.Buffer:
        """The framed records lo..hi-1 of this range, read in one go."""
        a, b = int(self.offsets[lo]), int(self.offsets[hi])
        if self.data is not None:
            return self.data[a:b]
        with fs.open_read(self.path) as fh:
            fh.seek(a)
            return fh.read(b - a)
