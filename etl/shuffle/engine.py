"""The `engine` strategy: sorted runs travel through the runner's own shuffle (Beam's
GroupByKey; on Dataflow, Dataflow Shuffle moves and spills them), one element per
(run × shard whose key range it overlaps), never one per record.

`partition` cuts a run into those chunks with the plan (a side input). The shard writer gets
every chunk grouped under its shard's key and reads them ONCE, as they stream out of the
group (a runner may page a large group in lazily and need not iterate it twice): each chunk
is appended to a scratch file on the worker's local disk, and the shard is then merged from
those sorted sections in bounded memory by the same code as the `files` strategy, so both
write the same bytes. No file of ours is written between the stages: the object-store
operations are one write per shard.

Runs and chunks cross the runner packed (etl.shuffle.chunk_codec: zstd, CRC32C): a run
arrives at `partition` as a PackedRun whose compressed segments are passed on to the chunks
that hold them whole, and the shard writer unpacks and checks every chunk, naming its shard
if the bytes were damaged on the way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.formats.shards import ShardFormat
from etl.shuffle import chunk_codec
from etl.shuffle.planning import RunKeys, ShardPlan, run_keys
from etl.shuffle.runs import FileSlice, RunSlice, SortedRun, key_range, write_section
from etl.shuffle.shard_writer import ShardResult, run_dir_of, write_shard
from etl.storage import fs, scratch

NAME = "engine"
HOLDS_SPILLS = False  # nothing of ours is written between the stages: nothing to hold
RUNNER_SHUFFLE = True  # runs cross the runner's shuffle, packed (etl.shuffle.chunk_codec)


@dataclass(frozen=True)
class Chunk:
    """A run's records in one shard's key range (sorted keys, ids, offsets from 0, payload),
    packed as they cross the shuffle (etl.shuffle.chunk_codec: compressed, checksummed):
    immutable, self-contained, and its bytes are its wire format (transforms/coders.py)."""

    data: bytes

    @staticmethod
    def of(keys: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
           payload: bytes | memoryview | pa.Buffer) -> Chunk:
        return Chunk(chunk_codec.pack(keys, ids, offsets, payload))

    def __len__(self) -> int:
        return chunk_codec.count(self.data)

    def unpack(self, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Buffer]:
        """keys, ids, offsets, payload; a StorageError naming `where` if the bytes are damaged."""
        return chunk_codec.unpack(self.data, where)


EMPTY = Chunk.of(np.zeros(0), np.zeros(0), np.zeros(1), b"")  # makes every shard's group exist


@dataclass(frozen=True)
class PackedRun:
    """A sorted run as it comes out of the runner (transforms/coders.py): `data` its packed
    bytes, `packed` their index unpacked and checked; its records stay compressed, in
    segments `partition` passes on whole to the chunk that holds them."""

    split: str
    data: bytes | memoryview
    packed: chunk_codec.Packed

    @property
    def keys(self) -> np.ndarray:
        return self.packed.keys

    def stats(self, shuffled: bool) -> RunKeys:
        return run_keys(self.split, self.keys, int(self.packed.offsets[-1]), shuffled)

    def key_range(self, key_lo: int, key_hi: int) -> tuple[int, int]:
        return key_range(self.keys, key_lo, key_hi)


def partition(run: SortedRun | PackedRun,
              plans: list[ShardPlan]) -> list[tuple[tuple[str, int], Chunk]]:
    """One (key, chunk) per shard of the run's split whose key range holds records of it. A
    packed run's chunks reuse its compressed segments (chunk_codec.cut)."""
    if not len(run.keys):
        return []
    live = [p for p in plans if p.take and p.key_lo < int(run.keys[-1]) + 1
            and p.key_hi > int(run.keys[0])]
    out = []
    for plan in live:
        a, b = run.key_range(plan.key_lo, plan.key_hi)
        if b <= a:
            continue
        if isinstance(run, PackedRun):
            out.append(((plan.split, plan.index), Chunk(chunk_codec.cut(run.packed, a, b))))
            continue
        lo, hi = int(run.offsets[a]), int(run.offsets[b])
        out.append(((plan.split, plan.index),
                    Chunk.of(run.keys[a:b], run.ids[a:b], run.offsets[a : b + 1] - lo,
                             memoryview(run.payload)[lo:hi])))
    return out


def write_engine_shard(plan: ShardPlan, chunks: Iterable[Chunk], staging_dir: str,
                       fmt: ShardFormat, scratch_dir: str | None = None) -> ShardResult:
    """One shard from every chunk grouped under its key, iterating `chunks` once: each is
    appended to a local scratch file (under `scratch_dir`, default the run's own directory
    when the staging is local, else the system temp directory under a name the next run's
    sweep knows: etl.storage.scratch), then the sections are merged. Peak memory: one chunk
    plus the merge's."""
    parent = scratch_dir if scratch_dir is not None else run_dir_of(fs.join(staging_dir, "x"))
    with scratch.scratch_dir("shard", parent) as tmp:
        path = fs.join(tmp, "chunks")
        slices: list[RunSlice] = []
        with fs.open_write(path, durable=False) as fh:
            at = 0
            where = f"shard {plan.split} {plan.index}"
            for chunk in chunks:  # every one checked: a damaged header may say "empty"
                keys, ids, offsets, payload = chunk.unpack(where)
                if len(keys):
                    slices.append(FileSlice(path, at, len(keys), 0, len(keys)))
                    at += write_section(fh, keys, ids, offsets, payload)
        return write_shard(plan, slices, staging_dir, fmt)
