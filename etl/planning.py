"""Shard planning: pure functions from spill metadata to per-shard read plans.

Shards are exact rank ranges of the key order: shard i gets ranks [i*N/n, (i+1)*N/n), so
shard sizes differ by at most one record (a fixed key-range cut is only balanced to
~sqrt(N/n), about ±3% at 100k records in 16 shards). To locate a rank range without
holding keys, the planner uses counts per key interval (the summed 4096-range histograms
when shuffling, each spill's key span in input order); the shard reads the covering key
range and trims to its exact ranks after sorting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from etl.spill import HIST_BITS, SpillMeta


@dataclass(frozen=True)
class ShardPlan:
    split: str
    index: int
    num_shards: int
    key_lo: int
    key_hi: int  # exclusive; may be 2**64
    skip: int  # records to drop from the start of the sorted key range
    take: int  # records in this shard
    spills: tuple[str, ...]


def key_intervals(metas: list[SpillMeta], shuffled: bool) -> tuple[np.ndarray, list[int], list[int]]:
    """(counts, lo, hi) of non-overlapping key intervals, in key order."""
    if shuffled:
        hist = np.zeros(1 << HIST_BITS, np.int64)
        for m in metas:
            if m.count:
                hist += np.frombuffer(m.histogram, np.uint32)
        width = 1 << (64 - HIST_BITS)
        return hist, [b * width for b in range(len(hist))], [(b + 1) * width for b in range(len(hist))]
    spans = sorted((m.key_min, m.key_max, m.count) for m in metas if m.count)
    return (np.array([c for _, _, c in spans], np.int64), [lo for lo, _, _ in spans],
            [hi + 1 for _, hi, _ in spans])


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


def plan_split(split: str, metas: list[SpillMeta], num_shards: int, shuffled: bool) -> list[ShardPlan]:
    counts, lows, highs = key_intervals(metas, shuffled)
    ends = np.cumsum(counts)
    starts = ends - counts
    total = int(ends[-1]) if len(ends) else 0
    spills = tuple(sorted(m.path for m in metas if m.count))
    plans = []
    for i in range(num_shards):
        r0, r1 = i * total // num_shards, (i + 1) * total // num_shards
        if r1 <= r0:
            plans.append(ShardPlan(split, i, num_shards, 0, 0, 0, 0, ()))
            continue
        j0 = int(np.searchsorted(ends, r0, side="right"))
        j1 = int(np.searchsorted(ends, r1 - 1, side="right"))
        plans.append(ShardPlan(split, i, num_shards, lows[j0], highs[j1], r0 - int(starts[j0]),
                               r1 - r0, spills))
    return plans
