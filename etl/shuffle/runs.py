"""Sorted runs: one block's records of one split, framed as TFRecords and sorted by (key, id).

Both strategies start from a run: `files` writes it to a spill file, `engine` cuts it into one
chunk per shard it overlaps. A shard is then the key-ordered concatenation of its ranges of
every run, so the only per-record work of a shard is Arrow's C-level `take`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from etl.formats.proto_wire import binary_column, data_of, offsets_of
from etl.formats.tfrecord import frame_records
from etl.shuffle.planning import RunKeys, run_keys
from etl.storage import fs


def sort_block(keys: np.ndarray, ids: np.ndarray, *, runs: int = 0) -> np.ndarray:
    """Order of records by (key, id). Keys of one file never tie (they are a bijection of
    the position), so a plain sort is exact there; ids break ties otherwise. `runs`: the keys
    are that many sorted runs laid end to end (a merge's blocks). NumPy's stable sort
    (timsort) finds a few runs and merges them faster than its default sort sorts from
    scratch; beyond TIMSORT_RUNS the default sort (AVX-512 where the CPU has it) is faster
    (benchmarks/README.md, "The merge's sort by run count")."""
    order = np.argsort(keys, kind="stable" if 0 < runs <= TIMSORT_RUNS else None)
    sorted_keys = keys[order]
    if len(keys) > 1 and (sorted_keys[1:] == sorted_keys[:-1]).any():
        return np.lexsort((ids, keys))
    return order


TIMSORT_RUNS = 8


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

    def stats(self, shuffled: bool) -> RunKeys:
        return run_keys(self.split, self.keys, int(self.offsets[-1]), shuffled)

    def key_range(self, key_lo: int, key_hi: int) -> tuple[int, int]:
        return key_range(self.keys, key_lo, key_hi)


def sorted_run(split: str, keys: np.ndarray, ids: np.ndarray,
               records: pa.LargeBinaryArray | list[bytes]) -> SortedRun:
    order = sort_block(keys, ids)
    framed = frame_records(binary_column(records), order)
    offsets = offsets_of(framed)
    return SortedRun(split, keys[order], ids[order], offsets - offsets[0], data_of(framed))


def key_range(keys: np.ndarray, key_lo: int, key_hi: int) -> tuple[int, int]:
    """[a, b): the positions of key_lo <= key < key_hi in sorted `keys` (key_hi may be 2**64)."""
    a = int(np.searchsorted(keys, np.uint64(key_lo), side="left"))
    b = (len(keys) if key_hi >= 1 << 64
         else int(np.searchsorted(keys, np.uint64(key_hi), side="left")))
    return a, max(a, b)


# A run on disk (a spill file, or one section of a shard's scratch file), little-endian:
#     b"TFRSPIL1" | n:u64 | keys:u64[n] | ids:u64[n] | offsets:u64[n+1] | payload
MAGIC = b"TFRSPIL1"
HEADER = struct.Struct("<8sQ")


def write_section(fh: BinaryIO, keys: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
                  payload: bytes | pa.Buffer) -> int:
    """Append one run in the spill layout to `fh` (offsets from 0); returns its byte size."""
    parts = [HEADER.pack(MAGIC, len(keys)), np.asarray(keys, "<u8").tobytes(),
             np.asarray(ids, "<u8").tobytes(), np.asarray(offsets, "<u8").tobytes(), payload]
    for part in parts:
        fh.write(part)
    return sum(len(p) if isinstance(p, bytes) else p.size for p in parts)


class RunSlice:
    """Records [a, b) of one sorted run, read in pieces: what the shard merge consumes
    (etl.shuffle.merge). `index(lo, hi)` gives keys, ids and payload offsets (relative to
    record lo) of records lo..hi-1 of the slice; `payload_into(lo, hi, out)` reads their
    framed bytes into `out` (the shard writer lays every slice's piece into one buffer)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def index(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def payload_into(self, lo: int, hi: int, out: np.ndarray) -> None:
        """The framed bytes of records lo..hi-1 into `out` (uint8, exactly their size)."""
        raise NotImplementedError


@dataclass
class MemorySlice(RunSlice):
    """A slice of a run held in memory (arrays over the whole run, offsets from 0)."""

    keys: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray
    data: bytes | pa.Buffer
    a: int = 0
    b: int = -1

    def __post_init__(self) -> None:
        if self.b < 0:
            self.b = len(self.keys)

    def __len__(self) -> int:
        return self.b - self.a

    def index(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi = lo + self.a, hi + self.a
        return (self.keys[lo:hi], self.ids[lo:hi],
                self.offsets[lo : hi + 1].astype(np.int64) - int(self.offsets[lo]))

    def payload_into(self, lo: int, hi: int, out: np.ndarray) -> None:
        start, end = int(self.offsets[lo + self.a]), int(self.offsets[hi + self.a])
        out[:] = np.frombuffer(self.data, np.uint8, end - start, start)


class OpenFiles:
    """One read handle per file for the slices of one shard, closed together: a shard reads
    each of its files many times (a block of index, then pieces of payload), and an open is
    a request on an object store."""

    def __init__(self) -> None:
        self._handles: dict[str, BinaryIO] = {}

    def get(self, path: str) -> BinaryIO:
        if path not in self._handles:
            self._handles[path] = fs.open_read(path)
        return self._handles[path]

    def __enter__(self) -> OpenFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        handles, self._handles = self._handles, {}
        for fh in handles.values():
            fh.close()


@dataclass
class FileSlice(RunSlice):
    """A slice of a run stored in the spill layout at byte `base` of `path`; nothing is read
    until asked, and then only the records asked for (through `files` when set)."""

    path: str
    base: int
    n: int  # records of the whole run
    a: int
    b: int
    files: OpenFiles | None = None

    def __len__(self) -> int:
        return self.b - self.a

    @contextmanager
    def _open(self) -> Iterator[BinaryIO]:
        if self.files is not None:
            yield self.files.get(self.path)
            return
        with fs.open_read(self.path) as fh:
            yield fh

    def index(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi, n, at = lo + self.a, hi + self.a, self.n, self.base + HEADER.size
        with self._open() as fh:
            fh.seek(at + 8 * lo)
            keys = np.frombuffer(fh.read(8 * (hi - lo)), "<u8")
            fh.seek(at + 8 * n + 8 * lo)
            ids = np.frombuffer(fh.read(8 * (hi - lo)), "<u8")
            fh.seek(at + 16 * n + 8 * lo)
            offsets = np.frombuffer(fh.read(8 * (hi - lo + 1)), "<u8").astype(np.int64)
        if len(keys) != hi - lo or len(ids) != hi - lo or len(offsets) != hi - lo + 1:
            raise OSError(f"{self.path}: spill section at byte {self.base} is truncated")
        return keys, ids, offsets - offsets[0]

    def _payload_at(self, fh: BinaryIO, lo: int, hi: int) -> int:
        """Seek `fh` to record lo's payload; returns the payload's size up to record hi."""
        n, at = self.n, self.base + HEADER.size
        fh.seek(at + 16 * n + 8 * (lo + self.a))
        start = np.frombuffer(fh.read(8), "<u8")
        fh.seek(at + 16 * n + 8 * (hi + self.a))
        end = np.frombuffer(fh.read(8), "<u8")
        if len(start) != 1 or len(end) != 1:
            raise OSError(f"{self.path}: spill section at byte {self.base} is truncated")
        fh.seek(at + 24 * n + 8 + int(start[0]))
        return int(end[0]) - int(start[0])

    def payload_into(self, lo: int, hi: int, out: np.ndarray) -> None:
        with self._open() as fh:
            size = self._payload_at(fh, lo, hi)
            got = 0
            if size == len(out):
                readinto = getattr(fh, "readinto", None)
                if readinto is None:  # a handle without readinto: read, then copy
                    data = fh.read(size)
                    got = len(data)
                    out[:got] = np.frombuffer(data, np.uint8)
                else:  # a stream may hand over less than asked: read until full or the end
                    view = memoryview(out)
                    while got < size and (step := readinto(view[got:]) or 0):
                        got += step
        if got != size or size != len(out):
            raise OSError(f"{self.path}: spill section at byte {self.base} is truncated")


def read_slice(path: str, key_lo: int, key_hi: int, base: int = 0) -> FileSlice:
    """The records with key_lo <= key < key_hi (key_hi may be 2**64) of the run stored at
    `base` of `path`: one read of its keys (one block's run) to find them."""
    with fs.open_read(path) as fh:
        fh.seek(base)
        head = fh.read(HEADER.size)
        if len(head) != HEADER.size or head[:8] != MAGIC:
            raise OSError(f"{path}: not a spill file")
        _, n = HEADER.unpack(head)
        at = base + HEADER.size
        a = _lower_bound(fh, path, at, n, key_lo)
        b = n if key_hi >= 1 << 64 else _lower_bound(fh, path, at, n, key_hi)
    return FileSlice(path, base, n, a, max(a, b))


# keys read around where a boundary is expected: a run's keys are uniform 64-bit hashes
# (etl.shuffle.keys), so in a run of 65k the boundary is ~128 keys from n * key / 2**64
_WINDOW = 2048


def _lower_bound(fh: BinaryIO, path: str, at: int, n: int, key: int) -> int:
    """Where `key` goes among the n sorted keys at byte `at` (the first position whose key is
    not below it). Reads the keys around the expected place; all n only when the answer is
    not provably inside them. Every shard asks this of every run: reading all keys each time
    read the spills' keys once per shard (16 shards of 10M records: 1.3 GB)."""
    guess = min(n, (n * key) >> 64)
    for lo, hi in ((max(0, guess - _WINDOW), min(n, guess + _WINDOW)), (0, n)):
        fh.seek(at + 8 * lo)
        keys = np.frombuffer(fh.read(8 * (hi - lo)), "<u8")
        if len(keys) != hi - lo:
            raise OSError(f"{path}: spill section at byte {at - HEADER.size} is truncated")
        i = int(np.searchsorted(keys, np.uint64(key), side="left"))
        if (i or not lo) and (i < len(keys) or hi == n):  # not cut off at either side
            return lo + i
    raise AssertionError("unreachable: the whole run decides")
