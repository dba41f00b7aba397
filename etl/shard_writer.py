"""Stage 2 of the shuffle: build one output shard from its key range in every spill."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from etl import fs

from etl.planning import ShardPlan
from etl.spill import read_range
from etl.tfrecord import COMPRESSIONS, Compressor, frame_all

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


def write_shard(plan: ShardPlan, staging_dir: str, compression: str) -> ShardResult:
    """Read, sort and trim this shard's records, write them framed (and compressed)."""
    slices = [read_range(p, plan.key_lo, plan.key_hi) for p in plan.spills]
    slices = [s for s in slices if len(s.keys)]
    name = shard_name(plan.split, plan.index, plan.num_shards, compression)
    if slices:
        keys = np.concatenate([s.keys for s in slices])
        ids = np.concatenate([s.ids for s in slices])
        bases = np.cumsum([0] + [len(s.payload) for s in slices[:-1]], dtype=np.uint64)
        offsets = np.concatenate(
            [s.offsets[:-1] + b for s, b in zip(slices, bases, strict=True)]
            + [np.array([sum(len(s.payload) for s in slices)], np.uint64)]
        ).astype(np.int64)
        payload = b"".join(s.payload for s in slices)
        order = np.lexsort((ids, keys))[plan.skip : plan.skip + plan.take]
        if len(order) != plan.take:
            raise RuntimeError(f"shard {name}: planned {plan.take} records, found {len(order)}")
        starts, stops = offsets[order], offsets[order + 1]
    else:
        payload = b""
        starts = stops = np.zeros(0, np.int64)
        order = starts
    sha = hashlib.sha256()
    size = 0
    comp = Compressor(compression)
    with fs.open_write(fs.join(staging_dir, name)) as fh:
        for c in range(0, len(order), _CHUNK_RECORDS):
            chunk = frame_all(payload[a:b] for a, b in zip(starts[c : c + _CHUNK_RECORDS].tolist(),
                                                             stops[c : c + _CHUNK_RECORDS].tolist(),
                                                             strict=True))
            data = comp.compress(chunk)
            sha.update(data)
            size += len(data)
            fh.write(data)
        tail = comp.flush()
        sha.update(tail)
        size += len(tail)
        fh.write(tail)
    return ShardResult(plan.split, plan.index, plan.num_shards, name, len(order), size,
                       sha.hexdigest())
