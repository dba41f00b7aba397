"""The `engine` strategy: sorted runs travel through the runner's own shuffle (Beam's
GroupByKey; on Dataflow, Dataflow Shuffle moves and spills them), one element per
(run × shard whose key range it overlaps), never one per record.

`partition` cuts a run into those chunks with the plan (a side input); the shard writer
gets its plan and every chunk under the key (split, shard index) and writes them with the
same code as the `files` strategy, so both give the same bytes. No file of our own is
written between the stages: the object-store operations are one write per shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import RangeIndex, SortedRun
from etl.shuffle.shard_writer import ShardResult, write_shard

NAME = "engine"


@dataclass(frozen=True)
class Chunk:
    """A run's records in one shard's key range: sorted keys, ids, offsets from 0, payload."""

    keys: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray
    payload: bytes

    def range_index(self, name: str) -> RangeIndex:
        return RangeIndex(name, self.keys, self.ids, self.offsets, self.payload)


def partition(run: SortedRun, plans: list[ShardPlan]) -> list[tuple[tuple[str, int], Chunk]]:
    """One (key, chunk) per shard of the run's split whose key range holds records of it."""
    if not len(run.keys):
        return []
    live = [p for p in plans if p.take and p.key_lo < int(run.keys[-1]) + 1
            and p.key_hi > int(run.keys[0])]
    out = []
    for plan in live:
        a, b = run.key_range(plan.key_lo, plan.key_hi)
        if b <= a:
            continue
        lo, hi = int(run.offsets[a]), int(run.offsets[b])
        out.append(((plan.split, plan.index),
                    Chunk(run.keys[a:b], run.ids[a:b], run.offsets[a : b + 1] - lo,
                          bytes(memoryview(run.payload)[lo:hi]))))
    return out


def write_engine_shard(plan: ShardPlan, chunks: list[Chunk], staging_dir: str,
                       compression: str) -> ShardResult:
    """One shard from every chunk grouped under its key."""
    return write_shard(plan, [c.range_index(f"chunk {i}") for i, c in enumerate(chunks)],
                       staging_dir, compression)
