"""Build one output shard from its key range of every sorted run (both strategies).

Runs are already framed and sorted, so a shard is their merge (etl.shuffle.merge): the only
per-record work is NumPy's sort of keys and Arrow's C-level `take`, one call per piece of
about 16 MB. Both strategies hand this the same slices (every record of the shard's key range
of every run), so they write the same bytes."""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from etl.base import signals
from etl.formats.proto_wire import BINARY, binary, data_of
from etl.formats.tfrecord import COMPRESSIONS, Compressor
from etl.shuffle.keys import ID_POSITION_BITS
from etl.shuffle.merge import merged_batches
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import FileSlice, OpenFiles, RunSlice
from etl.storage import fs

CHUNK_BYTES = 16 << 20
ATTEMPT_SUFFIX = ".attempt"  # a shard being written: <shard name>.<attempt id>.attempt


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


def write_shard(plan: ShardPlan, slices: list[RunSlice], staging_dir: str,
                compression: str) -> ShardResult:
    """Merge this shard's slice of every run (etl.shuffle.merge), keep its planned ranks, and
    write it framed (and compressed). Memory: the merge's blocks plus one piece of about
    CHUNK_BYTES of payload, whatever the shard's size.

    The shard is written to a file of its own attempt and renamed into place at the end, so
    a retried or duplicated attempt (Dataflow retries a failed bundle, may run a straggler's
    twice) leaves exactly one file with the same bytes; a failed attempt removes its file."""
    slices = [s for s in slices if len(s)]
    name = shard_name(plan.split, plan.index, plan.num_shards, compression)
    sha = hashlib.sha256()
    size = found = 0
    per_input: Counter[int] = Counter()
    comp = Compressor(compression)
    final = fs.join(staging_dir, name)
    with shared_handles(slices), attempt_file(final) as fh:
        for src, local, ids, sizes in merged_batches(slices, plan.skip, plan.take):
            signals.check_cancelled(f"writing {name}")
            found += len(src)
            files, counts = np.unique(ids >> np.uint64(ID_POSITION_BITS), return_counts=True)
            per_input.update(dict(zip(files.tolist(), counts.tolist(), strict=True)))
            for piece in _pieces(sizes):
                data = comp.compress(_gather(slices, src[piece], local[piece], sizes[piece]))
                sha.update(data)
                size += len(data)
                fh.write(data)
        if found != plan.take:
            raise RuntimeError(f"shard {name}: planned {plan.take} records, found {found}")
        tail = comp.flush()
        sha.update(tail)
        size += len(tail)
        fh.write(tail)
    return ShardResult(plan.split, plan.index, plan.num_shards, name, found, size,
                       sha.hexdigest(), {str(f): c for f, c in sorted(per_input.items())})


@contextmanager
def shared_handles(slices: list[RunSlice]) -> Iterator[None]:
    """The file slices read through one handle per file while the shard is written."""
    on_files = [s for s in slices if isinstance(s, FileSlice)]
    with OpenFiles() as files:
        for s in on_files:
            s.files = files
        try:
            yield
        finally:
            for s in on_files:
                s.files = None


@contextmanager
def attempt_file(final: str) -> Iterator[BinaryIO]:
    """A write handle whose bytes appear at `final` only once it is complete. Local: a file
    named for this attempt, renamed over `final` (atomic; a concurrent duplicate renames the
    same bytes); removed if the attempt fails. Object stores: the object itself, which a
    failed upload never creates and a second upload replaces whole."""
    if fs.is_remote(final):
        with fs.open_write(final, bypass_cache=True) as fh:
            yield fh
        return
    part = f"{final}.{uuid.uuid4().hex[:12]}{ATTEMPT_SUFFIX}"
    try:
        with fs.open_write(part, bypass_cache=True) as fh:
            yield fh
        fs.rename(part, final)
    except BaseException:
        with suppress(OSError):
            fs.delete([part])
        raise


def _pieces(sizes: np.ndarray) -> list[slice]:
    """Consecutive pieces of a batch of about CHUNK_BYTES of payload each."""
    if not len(sizes):
        return []
    piece = np.cumsum(sizes) // CHUNK_BYTES
    cuts = [0, *(np.flatnonzero(np.diff(piece)) + 1).tolist(), len(sizes)]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _gather(slices: list[RunSlice], source: np.ndarray, local: np.ndarray,
            sizes: np.ndarray) -> pa.Buffer:
    """The framed records (source slice, index in it), in the given order. In a piece of
    the merged order, each slice's records are one contiguous run: one read each."""
    columns = []
    position = np.zeros(len(source), np.int64)
    base = 0
    for s in np.unique(source).tolist():
        mine = source == s
        lo, hi = int(local[mine].min()), int(local[mine].max()) + 1
        offsets = np.concatenate([[0], np.cumsum(sizes[mine])])
        columns.append(binary(slices[s].payload(lo, hi), offsets))
        position[mine] = base + local[mine] - lo
        base += hi - lo
    picked = pa.chunked_array(columns, BINARY).take(pa.array(position)).combine_chunks()
    return data_of(picked)
