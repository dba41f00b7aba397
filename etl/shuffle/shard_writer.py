"""Build one output shard from its key range of every sorted run (both strategies).

Runs are already framed, so a shard is their key-ordered concatenation: the only per-record
work is Arrow's C-level `take`, one call per chunk of about 16 MB. Both strategies hand this
the same ranges (every record of the shard's key range of every run), so they write the same
bytes: same sort, same trim, same chunks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from etl import fs
from etl.shuffle.keys import ID_POSITION_BITS
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import RangeIndex
from etl.tfrecord import COMPRESSIONS, Compressor
from etl.wire import BINARY, binary, data_of

CHUNK_BYTES = 16 << 20


@dataclass(frozen=True)
class ShardResult:
    split: str
    index: int
    num_shards: int
    name: str
    num_records: int
    num_bytes: int
    sha256: str
    # records written per input file, by the file's ordinal (the high bits of a record id):
    # what the driver checks `read = written + rejected` against, per input file
    per_input: dict[str, int] = field(default_factory=dict)


def shard_name(split: str, index: int, num_shards: int, compression: str) -> str:
    return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord{COMPRESSIONS[compression]}"


def write_shard(plan: ShardPlan, ranges: list[RangeIndex], staging_dir: str,
                compression: str) -> ShardResult:
    """Merge this shard's key range of every run, trim it to the planned ranks, and write it
    framed (and compressed). From spill files only keys and offsets are read for the whole
    range; payload bytes come in chunks of about CHUNK_BYTES, so a worker holds one chunk,
    not one shard (10M benchmark rows: 124 MB shards)."""
    ranges = [r for r in ranges if len(r.keys)]
    name = shard_name(plan.split, plan.index, plan.num_shards, compression)
    order = sizes = np.zeros(0, np.int64)
    ids = np.zeros(0, np.uint64)
    if ranges:
        keys = np.concatenate([r.keys for r in ranges])
        ids = np.concatenate([r.ids for r in ranges])
        source = np.repeat(np.arange(len(ranges)), [len(r.keys) for r in ranges])
        local = np.concatenate([np.arange(len(r.keys)) for r in ranges])
        sizes = np.concatenate([np.diff(r.offsets) for r in ranges])
        order = np.lexsort((ids, keys))[plan.skip : plan.skip + plan.take]
    if len(order) != plan.take:
        raise RuntimeError(f"shard {name}: planned {plan.take} records, found {len(order)}")
    sha = hashlib.sha256()
    size = 0
    comp = Compressor(compression)
    with fs.open_write(fs.join(staging_dir, name), bypass_cache=True) as fh:
        for chunk in _chunks(order, sizes[order]):
            data = comp.compress(_gather(ranges, source[chunk], local[chunk]))
            sha.update(data)
            size += len(data)
            fh.write(data)
        tail = comp.flush()
        sha.update(tail)
        size += len(tail)
        fh.write(tail)
    files, counts = np.unique(ids[order] >> np.uint64(ID_POSITION_BITS), return_counts=True)
    per_input = {str(int(f)): int(c) for f, c in zip(files, counts, strict=True)}
    return ShardResult(plan.split, plan.index, plan.num_shards, name, len(order), size,
                       sha.hexdigest(), per_input)


def _chunks(order: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """Consecutive pieces of `order` of about CHUNK_BYTES each."""
    if not len(order):
        return []
    piece = np.cumsum(sizes) // CHUNK_BYTES
    cuts = np.flatnonzero(np.diff(piece)) + 1
    return np.split(order, cuts)


def _gather(ranges: list[RangeIndex], source: np.ndarray, local: np.ndarray) -> pa.Buffer:
    """The framed records (source spill, index in its range), in the given order. In a piece
    of the merged key order, each spill's records are one contiguous run: one read each."""
    columns = []
    position = np.zeros(len(source), np.int64)
    base = 0
    for s in np.unique(source).tolist():
        mine = source == s
        lo, hi = int(local[mine].min()), int(local[mine].max()) + 1
        r = ranges[s]
        offsets = r.offsets[lo : hi + 1] - r.offsets[lo]
        columns.append(binary(r.payload(lo, hi), offsets))
        position[mine] = base + local[mine] - lo
        base += hi - lo
    picked = pa.chunked_array(columns, BINARY).take(pa.array(position)).combine_chunks()
    return data_of(picked)
