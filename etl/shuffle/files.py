"""The `files` strategy: each sorted run goes to a spill file; each shard reads its key range
of every spill (blocks × shards reads: fine on a local disk, the local runner's default).

Stage 1 writes one spill per (block, split) under the job's temp location, in the layout of
etl.shuffle.runs.write_section; only small `SpillRef`s travel through Beam. Stage 2 finds,
for one output shard, the key range it owns in every spill (a binary search on the key
column) and merges them (etl.shuffle.merge), reading keys and payload in pieces, so a worker
holds a piece of a shard, not the shard.

When stage 2 runs in the process that wrote the spills (the local runner's in-memory and
multi-threaded modes), a `HeldSpills` store keeps records in that memory: fixed-size records
placed at their output position (etl.shuffle.placement), and, when the job sets a byte budget
(`spill_in_memory`), runs held instead of spilled (paths "held:..."): never written or read
back. No run is held by default: a spill written into the page cache in pieces of at most
1 MiB (etl.storage.fs) costs less than the new memory a held run takes, which the allocator
cannot reuse for the next blocks (benchmarks/README.md, "Cold memory").
The store belongs to one run (the Beam layer shares it between its DoFns with
`apache_beam.utils.shared.Shared`, keyed per run); there is no process-wide store. Beyond
the budget runs go to disk, so memory stays bounded by the budget plus a few blocks and one
shard's chunk.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from etl.formats.shards import ShardFormat
from etl.shuffle import placement
from etl.shuffle.placement import Placement
from etl.shuffle.planning import RunKeys, ShardPlan
from etl.shuffle.runs import MemorySlice, RunSlice, SortedRun, read_slice, write_section
from etl.shuffle.shard_writer import ShardResult, write_placed, write_shard
from etl.storage import fs

NAME = "files"
HOLDS_SPILLS = True  # runs may stay in the memory of the process (HeldSpills), not on disk
RUNNER_SHUFFLE = False  # runs travel as spill files, not through the runner's shuffle
HELD_PREFIX = "held:"  # a run held in the memory of the process that wrote it


@dataclass(frozen=True)
class SpillRef:
    """One spill (or held run): where it is and its statistics for the planner."""

    path: str
    stats: RunKeys


class HeldSpills:
    """One run's records kept in its process's memory: the placement of fixed-size records,
    and runs held within a byte budget (`limit`, 0: none); thread-safe, since the local
    runner writes spills from several worker threads at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._runs: dict[str, SortedRun] = {}
        self._used = 0
        self._planning = threading.Lock()
        self._planned = False
        self.placement: Placement | None = None  # etl.shuffle.placement, when it applies

    def plan_placement(self, plan: Callable[[], Placement | None]) -> None:
        """This run's placement, planned once, by the first run to be emitted (every input's
        count must be known: `plan` returns None when one is not)."""
        with self._planning:
            if not self._planned:
                self.placement = plan()
                self._planned = True

    def hold(self, path: str, run: SortedRun) -> bool:
        """Keep `run` under `path` if the budget has room; False: write it to disk."""
        with self._lock:
            if self._used + run.nbytes > self.limit:
                return False
            self._used += run.nbytes
            self._runs[path] = run
            return True

    def get(self, path: str) -> SortedRun:
        with self._lock:
            run = self._runs.get(path)
        if run is None:
            raise OSError(f"{path}: this spill was held in the memory of another process (or "
                          "its job ended); held spills need stage 2 in the same process, as on "
                          "the local runner in in_memory or multi_threading mode. Set "
                          "spill_in_memory: 0 to always spill to disk.")
        return run

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def release(self) -> None:
        """Drop every held run and placed record (the job ended)."""
        with self._lock:
            self._runs.clear()
            self._used = 0
        if self.placement is not None:
            self.placement.release()


def write_spill(path: str, run: SortedRun, shuffled: bool,
                held: HeldSpills | None = None) -> SpillRef:
    """Write one sorted run (or hold it in `held`, within its budget)."""
    stats = run.stats(shuffled)
    if held is not None and held.placement is not None and held.placement.place(run):
        return SpillRef(placement.PREFIX + run.split, stats)
    if held is not None and held.limit > 0 and held.hold(HELD_PREFIX + path, run):
        return SpillRef(HELD_PREFIX + path, stats)
    with fs.open_write(path, durable=False) as fh:
        write_section(fh, run.keys, run.ids, run.offsets, run.payload)
    return SpillRef(path, stats)


def read_index(path: str, key_lo: int, key_hi: int, held: HeldSpills | None = None) -> RunSlice:
    """The records with key_lo <= key < key_hi (key_hi may be 2**64) of one spill file (or a
    held run), read lazily by the shard merge."""
    if path.startswith(HELD_PREFIX):
        if held is None:
            raise OSError(f"{path}: this spill was held in the memory of another process")
        run = held.get(path)
        a, b = run.key_range(key_lo, key_hi)
        return MemorySlice(run.keys, run.ids, run.offsets, run.payload, a, b)
    return read_slice(path, key_lo, key_hi)


def spills_for(plan: ShardPlan, refs: list[SpillRef]) -> tuple[str, ...]:
    """The spills of the plan's split whose keys overlap its key range, in path order."""
    if not plan.take:
        return ()
    # a split's placed runs share one path (its placement): a set
    return tuple(sorted({r.path for r in refs if r.stats.split == plan.split and r.stats.count
                         and r.stats.key_lo < plan.key_hi and r.stats.key_hi > plan.key_lo}))


def write_files_shard(plan: ShardPlan, spills: tuple[str, ...], staging_dir: str,
                      fmt: ShardFormat, held: HeldSpills | None = None) -> ShardResult:
    """One shard from its key range of every overlapping spill. Placed records (all on one
    path per split): a slice of the placement's buffer, written as it is when every record of
    the split was placed, else one more run to merge."""
    slices: list[RunSlice] = []
    for path in spills:
        if not path.startswith(placement.PREFIX):
            slices.append(read_index(path, plan.key_lo, plan.key_hi, held))
            continue
        if held is None or held.placement is None:
            raise OSError(f"{path}: these records were placed in the memory of another process")
        split = held.placement.split(plan.split)
        if len(spills) == 1 and split.complete():
            frames, ids = split.rows(plan.key_lo, plan.skip, plan.take)
            return write_placed(plan, frames, ids, split.frame, staging_dir, fmt)
        slices.append(split.slice(plan.key_lo, plan.key_hi))
    return write_shard(plan, slices, staging_dir, fmt)
