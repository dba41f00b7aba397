"""Records written straight to their place in the output, for inputs whose record count and
frame size are known before they are read (the `files` strategy, in one process).

A global shuffle cannot finish a shard before the last record is read, so stage 1 spills every
run and stage 2 merges each shard out of every spill once the read is over. When every input
file of a split states its record count up front (an IDX header) and every framed record has
the same size (MNIST-shaped images with small labels), each record's place is known before it
is read: its rank in the (key, id) order, computed here from the keys of all the split's
records (etl.shuffle.keys, as stage 1 computes them), times the frame size. Stage 1 then
copies each run's frames into one buffer per split at their ranks, no spill is written, and a
shard is one contiguous slice of that buffer, written as it is (the shard writer's sink:
framing kept, compression, index, sha256). What is written is the same bytes as the merge
writes (tests/test_placement.py; benchmarks/README.md has the figures).

The place of a record never depends on whether another record could be placed, so nothing
here is a second source of truth: when a split's records are not all placed (a record
rejected, a frame of another size, a file shorter than its header says, a retried bundle's
lost work), its placed records become one sorted run (`slice`), merged with the spills of the
rest by the usual shard writer. Only a split whose every record was placed takes the direct
path (`rows`).

Memory: one buffer holding the split's whole output, 24 bytes a record of keys, ids and ranks,
and about 40 more while they are computed; placement applies only when that fits `limit`
(planned at the first run, whose frame size it takes for every record's); beyond it, the runs
spill as usual.
"""

from __future__ import annotations

import mmap
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.shuffle import keys as shuffle_keys
from etl.shuffle.runs import MemorySlice, SortedRun, key_range, sort_block

PREFIX = "placed:"  # a SpillRef path: this run's records were placed in its split's buffer
DEFAULT_LIMIT = 1 << 30  # the most a run may hold in placed records (all splits together)
PER_RECORD = 64  # bytes a record besides its frame: keys, ids, ranks, and the planning's peak
_POSITION_MASK = np.uint64((1 << shuffle_keys.ID_POSITION_BITS) - 1)
_COMPACT_ROWS = 1 << 16  # rows moved at a time when a split is compacted


@dataclass(frozen=True)
class InputFile:
    """One input file as placement needs it: how its records are keyed, and how many."""

    split: str | None  # None: the job's fractions assign each record's split
    identity: str
    ordinal: int
    count: int


class SplitPlacement:
    """One split's records in (key, id) order: their keys, ids, and where each file's
    positions go; the buffer, made at the first run (its frame size decides its size)."""

    def __init__(self, split: str, sorted_keys: np.ndarray, sorted_ids: np.ndarray,
                 ranks: dict[int, np.ndarray]) -> None:
        self.split = split
        self.keys = sorted_keys
        self.ids = sorted_ids
        self.ranks = ranks  # file ordinal -> rank of each of its positions (-1: another split)
        self.frame = 0
        self.placed = np.zeros(len(sorted_keys), bool)
        self.refused = False  # a run of another frame size came: never complete
        self._memory: mmap.mmap | None = None
        self._buffer: np.ndarray | None = None
        self._compacted: SortedRun | None = None
        self._compacting = threading.Lock()  # stage 2's threads: one compaction

    @property
    def count(self) -> int:
        return len(self.keys)

    def open(self, frame: int) -> None:
        self.frame = frame
        # private anonymous pages (mmap's default, shared, is shmem: slower to fault in), no
        # page cache, never written back; unmapped whole by release()
        self._memory = mmap.mmap(-1, max(1, self.count * frame),
                                 flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._buffer = np.frombuffer(self._memory, np.uint8, self.count * frame).reshape(
            self.count, frame)

    def place(self, run: SortedRun) -> bool:
        """Copy the run's frames to their ranks; False (nothing copied) when a frame is not of
        this split's size or a record is not one of this split's (the caller spills it)."""
        if self.refused:  # the split can no longer be complete: placing only costs a copy
            return False
        sizes = np.diff(run.offsets)
        if self._buffer is None or not len(sizes) or (sizes != self.frame).any():
            self.refused = True
            return False
        at = self._ranks_of(run.ids)
        if at is None:
            self.refused = True
            return False
        frames = np.frombuffer(run.payload, np.uint8, len(at) * self.frame).reshape(
            len(at), self.frame)
        self._buffer[at] = frames  # NumPy copies without the GIL
        self.placed[at] = True
        return True

    def _ranks_of(self, ids: np.ndarray) -> np.ndarray | None:
        ordinals = ids >> np.uint64(shuffle_keys.ID_POSITION_BITS)
        positions = (ids & _POSITION_MASK).astype(np.int64)
        at = np.empty(len(ids), np.int64)
        for ordinal in np.unique(ordinals).tolist():
            ranks = self.ranks.get(int(ordinal))
            mine = ordinals == ordinal
            if ranks is None or int(positions[mine].max()) >= len(ranks):
                return None
            at[mine] = ranks[positions[mine]]
        if len(at) and int(at.min()) < 0:  # a record of another split
            return None
        return at

    def complete(self) -> bool:
        """Every record of the split placed, and nothing refused: shards are slices."""
        return self._buffer is not None and not self.refused and bool(self.placed.all())

    def rows(self, key_lo: int, skip: int, take: int) -> tuple[memoryview, np.ndarray]:
        """A complete split's shard: the frames of ranks [first + skip, + take), where first is
        the rank of the shard's lowest key; and their ids (per-input counts)."""
        assert self._memory is not None and self.complete()
        start = int(np.searchsorted(self.keys, np.uint64(key_lo), side="left")) + skip
        if start + take > self.count:
            raise RuntimeError(f"placed split {self.split}: a shard asks for ranks up to "
                               f"{start + take}, the split holds {self.count}")
        view = memoryview(self._memory)[start * self.frame:(start + take) * self.frame]
        return view, self.ids[start:start + take]

    def slice(self, key_lo: int, key_hi: int) -> MemorySlice:
        """The placed records with key_lo <= key < key_hi, as a slice of one sorted run: what
        the merge reads when the split is not complete. The first call compacts the placed
        frames to the front of the buffer, in place (stage 1 is over by then)."""
        with self._compacting:
            if self._compacted is None:
                self._compacted = self._compact()
            run = self._compacted
        a, b = key_range(run.keys, key_lo, key_hi)
        return MemorySlice(run.keys, run.ids, run.offsets, run.payload, a, b)

    def _compact(self) -> SortedRun:
        """Rows `which` (ascending) moved to rows 0.. in chunks: a chunk's sources lie at or
        after its own rows and before none of the rows still to move, so nothing is read after
        it was overwritten, and no second buffer of the split's size is needed."""
        which = np.flatnonzero(self.placed)
        payload = pa.py_buffer(b"")
        if self._buffer is not None and self._memory is not None:
            for lo in range(0, len(which), _COMPACT_ROWS):
                hi = min(len(which), lo + _COMPACT_ROWS)
                self._buffer[lo:hi] = self._buffer[which[lo:hi]]  # gathered first, then stored
            payload = pa.py_buffer(memoryview(self._memory)[:len(which) * self.frame])
        return SortedRun(self.split, self.keys[which], self.ids[which],
                         np.arange(len(which) + 1, dtype=np.int64) * self.frame, payload)

    def release(self) -> mmap.mmap | None:
        """Drop the buffer; its memory, for the caller to unmap."""
        self._buffer = None
        self._compacted = None
        memory, self._memory = self._memory, None
        return memory


class Placement:
    """One run's placed records, per split; thread-safe, since stage 1 places from several
    threads and stage 2 reads from several. Planned at the first run from every input file's
    count (`plan`), or None when placement cannot apply."""

    def __init__(self, splits: dict[str, SplitPlacement], frame: int) -> None:
        self.splits = splits
        self._lock = threading.Lock()
        self._open = True
        for split in splits.values():
            split.open(frame)

    @classmethod
    def plan(cls, files: list[InputFile], seed: int | None, fractions: dict[str, float],
             frame: int, limit: int = DEFAULT_LIMIT) -> Placement | None:
        """Every record's rank in its split, from the counts and keys of all input files, and
        the buffers for records of `frame` bytes (the first run's). None when there is no
        input or the records would not fit `limit`."""
        total = sum(f.count for f in files)
        if not total or frame <= 0 or total * (frame + PER_RECORD) > limit:
            return None
        splits = {name: SplitPlacement(name, *order)
                  for name, order in split_orders(files, seed, fractions).items()}
        return cls(splits, frame)

    def place(self, run: SortedRun) -> bool:
        """Place one run's records; False: the caller spills the run instead."""
        split = self.splits.get(run.split)
        if split is None or not len(run.keys) or not self._open:
            return False
        return split.place(run)

    def split(self, name: str) -> SplitPlacement:
        return self.splits[name]

    def release(self) -> None:
        """Drop every split's buffer. Unmapping 500 MB takes ~0.1 s, without the GIL: done on
        a thread of its own, so the run's clean-up and exit go on meanwhile (a process that
        exits first frees it anyway)."""
        with self._lock:
            memories = [m for s in self.splits.values() if (m := s.release()) is not None]
            self._open = False
        if memories:
            threading.Thread(target=_unmap, args=(memories,), name="etl-unmap-placed",
                             daemon=True).start()


def split_orders(files: list[InputFile], seed: int | None, fractions: dict[str, float],
                 ) -> dict[str, tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]]:
    """Per split, its records in (key, id) order: their keys, their ids, and each file's
    rank of every position (-1: a record of another split). The keys and split assignment
    are stage 1's (etl.shuffle.keys), with fractions and in input order too."""
    parts: dict[str, list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = {}
    for f in files:
        positions = np.arange(f.count, dtype=np.int64)
        hashed = shuffle_keys.shuffle_keys(seed or 0, f.identity, positions)
        ids = shuffle_keys.record_ids(f.ordinal, positions)
        sort_keys = hashed if seed is not None else ids
        if fractions:
            which = shuffle_keys.assign_splits(hashed, list(fractions.values()))
            for i, name in enumerate(fractions):
                mine = np.flatnonzero(which == i)
                parts.setdefault(name, []).append((f.ordinal, mine, sort_keys[mine], ids[mine]))
        else:
            assert f.split is not None
            parts.setdefault(f.split, []).append((f.ordinal, positions, sort_keys, ids))
    counts = {f.ordinal: f.count for f in files}
    orders = {}
    for name, pieces in parts.items():
        all_keys = np.concatenate([p[2] for p in pieces])
        all_ids = np.concatenate([p[3] for p in pieces])
        order = sort_block(all_keys, all_ids)
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        ranks: dict[int, np.ndarray] = {}
        at = 0
        for ordinal, positions, _, _ in pieces:
            mine = ranks.setdefault(ordinal, np.full(counts[ordinal], -1, np.int64))
            mine[positions] = rank[at:at + len(positions)]
            at += len(positions)
        orders[name] = (all_keys[order], all_ids[order], ranks)
    return orders


def _unmap(memories: list[mmap.mmap]) -> None:
    for memory in memories:
        try:
            memory.close()
        except BufferError:  # a view of it still lives (a failed run's thread): freed with it
            pass
