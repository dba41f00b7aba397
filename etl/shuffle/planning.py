"""Shard planning from the merged key counts of every sorted run, in memory independent of the
number of blocks. (Key counts, not statistics: those are the dataset's, etl.stats.)

Shards are exact rank ranges of the (key, id) order: shard i of a split holding N records gets
ranks [i*N//n, (i+1)*N//n), so shard sizes differ by at most one record (a fixed key-range cut
is only balanced to ~sqrt(N/n), about ±3% at 100k records in 16 shards). To locate a rank
range without holding keys, the planner uses record counts per key interval; a shard takes
every record of the covering key range and trims to its exact ranks after sorting.

Each sorted run (one block's records of one split) contributes a `RunKeys`; `ShuffleKeys`
merges them as they arrive (the engine's CombineFn calls `add`/`merge`), in bounded memory:
- shuffled keys: a fixed histogram of 2**16 key ranges per split (uint64 counts, 512 KiB);
- input order (keys = record ids): disjoint (lo, hi, count) intervals per split, at most
  `MAX_INTERVALS`; adjacent intervals are coalesced (into runs of about equal counts) when
  there are more. Coarser intervals only widen the key range a shard reads, never its records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

HIST_BITS = 16  # 65,536 key ranges per split
MAX_INTERVALS = 1 << 16  # per split, input order
_NO_BUCKETS = np.zeros(0, np.uint16)


@dataclass(frozen=True)
class ShardPlan:
    """One output shard: every record with key_lo <= key < key_hi, sorted by (key, id),
    minus the first `skip`, the next `take`."""

    split: str
    index: int
    num_shards: int
    key_lo: int
    key_hi: int  # exclusive; may be 2**64
    skip: int
    take: int


@dataclass(frozen=True)
class RunKeys:
    """What planning needs to know of one sorted run: a few hundred bytes (input order) or
    one (bucket, count) pair per occupied key range (shuffled)."""

    split: str
    count: int
    num_bytes: int  # framed bytes
    key_lo: int  # smallest key
    key_hi: int  # largest key + 1
    buckets: np.ndarray = field(default_factory=lambda: _NO_BUCKETS)  # uint16, sorted, unique
    bucket_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def run_keys(split: str, sorted_keys: np.ndarray, num_bytes: int, shuffled: bool) -> RunKeys:
    """Statistics of one run whose keys are sorted."""
    if not len(sorted_keys):
        return RunKeys(split, 0, 0, 0, 0)
    buckets, counts = _NO_BUCKETS, np.zeros(0, np.int64)
    if shuffled:
        top = (sorted_keys >> np.uint64(64 - HIST_BITS)).astype(np.uint16)
        cuts = np.flatnonzero(np.diff(top)) + 1  # sorted keys: buckets come in runs
        starts = np.concatenate([[0], cuts])
        buckets = top[starts]
        counts = np.diff(np.concatenate([starts, [len(top)]])).astype(np.int64)
    return RunKeys(split, len(sorted_keys), num_bytes, int(sorted_keys[0]),
                      int(sorted_keys[-1]) + 1, buckets, counts)


class SplitKeys:
    """The merged key counts of one split."""

    def __init__(self, shuffled: bool, max_intervals: int = MAX_INTERVALS):
        self.shuffled = shuffled
        self.max_intervals = max_intervals
        self.count = 0
        self.num_bytes = 0
        self.hist = np.zeros(1 << HIST_BITS, np.uint64) if shuffled else None
        # input order: merged intervals, plus not yet merged ones (merged in batches)
        self.lo = np.zeros(0, np.uint64)
        self.hi = np.zeros(0, np.uint64)
        self.cnt = np.zeros(0, np.int64)
        self._pending: list[tuple[int, int, int]] = []

    def add(self, s: RunKeys) -> None:
        if not s.count:
            return
        self.count += s.count
        self.num_bytes += s.num_bytes
        if self.hist is not None:
            self.hist[s.buckets.astype(np.int64)] += s.bucket_counts.astype(np.uint64)
        else:
            self._pending.append((s.key_lo, s.key_hi, s.count))
            if len(self._pending) >= self.max_intervals:
                self.compact()

    def merge(self, other: SplitKeys) -> None:
        self.count += other.count
        self.num_bytes += other.num_bytes
        if self.hist is not None and other.hist is not None:
            self.hist += other.hist
        else:
            other.compact()
            self._pending += zip(other.lo.tolist(), other.hi.tolist(), other.cnt.tolist(),
                                 strict=True)
            self.compact()

    def compact(self) -> None:
        """Merge pending intervals in; coalesce overlapping ones and, over the cap, runs of
        adjacent ones of about equal total count."""
        if not self._pending:
            return
        lo = np.concatenate([self.lo, np.array([p[0] for p in self._pending], np.uint64)])
        hi = np.concatenate([self.hi, np.array([p[1] for p in self._pending], np.uint64)])
        cnt = np.concatenate([self.cnt, np.array([p[2] for p in self._pending], np.int64)])
        self._pending = []
        order = np.argsort(lo, kind="stable")
        lo, hi, cnt = lo[order], hi[order], cnt[order]
        new = np.ones(len(lo), bool)
        new[1:] = lo[1:] >= np.maximum.accumulate(hi)[:-1]  # an overlap joins the previous one
        if len(lo) > self.max_intervals:
            before = np.cumsum(cnt) - cnt
            group = (before.astype(np.float64) * self.max_intervals / max(1, int(cnt.sum())))
            group = group.astype(np.int64)
            new[1:] &= group[1:] != group[:-1]
        starts = np.flatnonzero(new)
        self.lo = lo[starts]
        self.hi = np.maximum.reduceat(hi, starts)
        self.cnt = np.add.reduceat(cnt, starts)

    def counts(self) -> np.ndarray:
        """Record counts of disjoint key intervals in key order (`bounds` gives their keys)."""
        if self.hist is not None:
            return self.hist.astype(np.int64)
        self.compact()
        return self.cnt

    def bounds(self, first: int, last: int) -> tuple[int, int]:
        """The keys from interval `first`'s lowest to interval `last`'s highest (exclusive;
        may be 2**64): asked for a shard's two ends only, not built for all 65,536."""
        if self.hist is not None:
            width = 1 << (64 - HIST_BITS)
            return first * width, (last + 1) * width
        return int(self.lo[first]), int(self.hi[last])

    @property
    def nbytes(self) -> int:
        """Memory held, without the not yet merged intervals (at most max_intervals)."""
        own = self.lo.nbytes + self.hi.nbytes + self.cnt.nbytes
        return own + (self.hist.nbytes if self.hist is not None else 0)


class ShuffleKeys:
    """Merged key counts of every split: the accumulator of the planning combiner."""

    def __init__(self, shuffled: bool, max_intervals: int = MAX_INTERVALS):
        self.shuffled = shuffled
        self.max_intervals = max_intervals
        self.splits: dict[str, SplitKeys] = {}

    def _split(self, name: str) -> SplitKeys:
        if name not in self.splits:
            self.splits[name] = SplitKeys(self.shuffled, self.max_intervals)
        return self.splits[name]

    def add(self, s: RunKeys) -> ShuffleKeys:
        self._split(s.split).add(s)
        return self

    def merge(self, other: ShuffleKeys) -> ShuffleKeys:
        for name, theirs in other.splits.items():
            self._split(name).merge(theirs)
        return self

    def compact(self) -> ShuffleKeys:
        for mine in self.splits.values():
            mine.compact()
        return self

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.splits.values())


def num_shards_for(total_bytes: int, shards: int | None, shard_size: int | None,
                   max_shard_bytes: int) -> tuple[int, str]:
    """Shard count from `shards` or `shard_size`, raised if shards would exceed the budget."""
    n = shards if shards else max(1, math.ceil(total_bytes / max(1, shard_size or max_shard_bytes)))
    note = ""
    if total_bytes / n > max_shard_bytes:
        needed = math.ceil(total_bytes / max_shard_bytes)
        note = (f"{n} shards would hold {total_bytes / n / 1e6:.0f} MB each, over the "
                f"{max_shard_bytes / 1e6:.0f} MB max_shard_bytes; using {needed} shards")
        n = needed
    return n, note


def plan_split(split: str, stats: SplitKeys | None, num_shards: int) -> list[ShardPlan]:
    """Every shard of one split: its covering key range and the ranks to keep of it."""
    if stats is None or not stats.count:
        return [ShardPlan(split, i, num_shards, 0, 0, 0, 0) for i in range(num_shards)]
    counts = stats.counts()
    ends = np.cumsum(counts)
    starts = ends - counts
    total = int(ends[-1])
    plans = []
    for i in range(num_shards):
        r0, r1 = i * total // num_shards, (i + 1) * total // num_shards
        if r1 <= r0:
            plans.append(ShardPlan(split, i, num_shards, 0, 0, 0, 0))
            continue
        j0 = int(np.searchsorted(ends, r0, side="right"))
        j1 = int(np.searchsorted(ends, r1 - 1, side="right"))
        key_lo, key_hi = stats.bounds(j0, j1)
        plans.append(ShardPlan(split, i, num_shards, key_lo, key_hi, r0 - int(starts[j0]),
                               r1 - r0))
    return plans


@dataclass(frozen=True)
class ShardingPlan:
    """Every split's shards, and notes for the user (a raised shard count)."""

    shards: dict[str, list[ShardPlan]]
    notes: list[str]


def make_plan(stats: ShuffleKeys, splits: tuple[str, ...], shards: int | None,
              shard_size: int | None, max_shard_bytes: int) -> ShardingPlan:
    out: dict[str, list[ShardPlan]] = {}
    notes: list[str] = []
    for split in splits:
        mine = stats.splits.get(split)
        n, note = num_shards_for(mine.num_bytes if mine else 0, shards, shard_size,
                                 max_shard_bytes)
        if note:
            notes.append(f"split {split}: {note}")
        out[split] = plan_split(split, mine, n)
    return ShardingPlan(out, notes)
