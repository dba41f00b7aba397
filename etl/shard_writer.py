"""Stage 2 of the shuffle: build one output shard from its key range in every spill.

Spilled records are already framed, so a shard is their key-ordered concatenation: the
only per-record work is Arrow's C-level `take`, one call per chunk of 8192 records."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl import fs
from etl.planning import ShardPlan
from etl.spill import read_range
from etl.tfrecord import COMPRESSIONS, Compressor

_CHUNK_RECORDS = 8192


@dataclass(frozen=True)
class ShardResult:
    split: str
    index: int
    num_shards: int
    name: str
    num_records: int
    num_bytes: int
    sha256: str


def shard_name(split: str, index: int, num_shards: int, compression: str) -> str:
    return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord{COMPRESSIONS[compression]}"


def write_shard(plan: ShardPlan, staging_dir: str, compression: str,
                in_memory: dict[str, bytes] | None = None) -> ShardResult:
    """Read, sort and trim this shard's records, write them framed (and compressed).
    `in_memory` maps "mem:" spill names to their bytes (the in-memory path)."""
    memory = in_memory or {}
    parts = [read_range(p, plan.key_lo, plan.key_hi, memory.get(p, b"")) for p in plan.spills]
    parts = [s for s in parts if len(s.keys)]
    name = shard_name(plan.split, plan.index, plan.num_shards, compression)
    if parts:
        keys = np.concatenate([s.keys for s in parts])
        ids = np.concatenate([s.ids for s in parts])
        order = np.lexsort((ids, keys))[plan.skip : plan.skip + plan.take]
        if len(order) != plan.take:
            raise RuntimeError(f"shard {name}: planned {plan.take} records, found {len(order)}")
        # the spilled (framed) records as one Arrow column over the read buffers, no copy:
        # `take` gathers a chunk of them in C, with no Python object per record
        framed = pa.chunked_array([pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(s.keys),
            [None, pa.py_buffer(s.offsets.astype(np.int64)), pa.py_buffer(s.payload)])
            for s in parts], pa.large_binary())
    else:
        order = np.zeros(0, np.int64)
    sha = hashlib.sha256()
    size = 0
    comp = Compressor(compression)
    with fs.open_write(fs.join(staging_dir, name)) as fh:
        for c in range(0, len(order), _CHUNK_RECORDS):
            picked = framed.take(pa.array(order[c : c + _CHUNK_RECORDS])).combine_chunks()
            ends = np.frombuffer(picked.buffers()[1], np.int64, len(picked) + 1, picked.offset * 8)
            raw = memoryview(picked.buffers()[2])[int(ends[0]) : int(ends[-1])]
            data = comp.compress(raw)
            sha.update(data)
            size += len(data)
            fh.write(data)
        tail = comp.flush()
        sha.update(tail)
        size += len(tail)
        fh.write(tail)
    return ShardResult(plan.split, plan.index, plan.num_shards, name, len(order), size,
                       sha.hexdigest())
