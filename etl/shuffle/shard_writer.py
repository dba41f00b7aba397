"""Build one output shard from its key range of every sorted run (both strategies).

Runs are already framed and sorted, so a shard is their merge (etl.shuffle.merge): the only
per-record work is NumPy's sort of keys and Arrow's C-level `take`, one call per piece of
about 16 MB. Both strategies hand this the same slices (every record of the shard's key range
of every run), so they write the same bytes."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from etl.base import signals
from etl.base.pause import pause
from etl.formats import compiled_framing
from etl.formats.proto_wire import binary, data_of
from etl.formats.shard_adapter import IndexFile
from etl.formats.shards import ShardFormat
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
    index_file: IndexFile | None = None  # NAME.index, when the job writes index files


def shard_name(split: str, index: int, num_shards: int, fmt: ShardFormat | str) -> str:
    """`fmt`: the shard format, or a compression name for a TFRecord shard."""
    if isinstance(fmt, str):
        fmt = ShardFormat(compression=fmt)
    return fmt.shard_name(split, index, num_shards)


def write_shard(plan: ShardPlan, slices: list[RunSlice], staging_dir: str,
                fmt: ShardFormat) -> ShardResult:
    """Merge this shard's slice of every run (etl.shuffle.merge), keep its planned ranks, and
    write it framed (and compressed), with its index file when `fmt.index`, or as an
    ArrayRecord file. Memory: the merge's blocks plus one piece of about CHUNK_BYTES of
    payload, whatever the shard's size.

    The shard (and its index) is written to a file of its own attempt and renamed into place
    at the end, so a retried or duplicated attempt (Dataflow retries a failed bundle, may run
    a straggler's twice) leaves exactly one file with the same bytes; a failed attempt
    removes its file. The index is computed from the record sizes while the shard is
    written: no second pass over the shard."""
    slices = [s for s in slices if len(s)]
    name, opened = _sink(plan, staging_dir, fmt)
    found = 0
    per_input: Counter[int] = Counter()
    with shared_handles(slices), opened as sink:
        for src, local, ids, sizes in merged_batches(slices, plan.skip, plan.take):
            signals.check_cancelled(f"writing {name}")
            found += len(src)
            _count_inputs(per_input, ids)
            for piece in _pieces(sizes):
                sink.write(_gather(slices, src[piece], local[piece], sizes[piece]), sizes[piece])
            pause("write:shard")  # tests: a shard's attempt (and scratch) file half written
        if found != plan.take:
            raise RuntimeError(f"shard {name}: planned {plan.take} records, found {found}")
        sink.finish()
    return _result(plan, name, found, sink, per_input)


def write_placed(plan: ShardPlan, frames: memoryview, ids: np.ndarray, frame: int,
                 staging_dir: str, fmt: ShardFormat) -> ShardResult:
    """A shard whose framed records are already in order and `frame` bytes each (placed as
    they were read: etl.shuffle.placement), written as they are, in pieces of about
    CHUNK_BYTES, through the same sink as `write_shard`."""
    name, opened = _sink(plan, staging_dir, fmt)
    if len(ids) != plan.take or len(frames) != plan.take * frame:
        raise RuntimeError(f"shard {name}: planned {plan.take} records, placed {len(ids)}")
    per_input: Counter[int] = Counter()
    step = max(1, CHUNK_BYTES // frame)
    with opened as sink:
        for a in range(0, plan.take, step):
            b = min(plan.take, a + step)
            signals.check_cancelled(f"writing {name}")
            _count_inputs(per_input, ids[a:b])
            sink.write(pa.py_buffer(frames[a * frame:b * frame]), np.full(b - a, frame, np.int64))
            pause("write:shard")
        sink.finish()
    return _result(plan, name, plan.take, sink, per_input)


def _sink(plan: ShardPlan, staging_dir: str, fmt: ShardFormat) -> tuple[str, Any]:
    """The shard's name and its format's writer (etl.formats), not yet opened."""
    name = fmt.shard_name(plan.split, plan.index, plan.num_shards)
    final = fs.join(staging_dir, name)
    return name, fmt.adapter.open_sink(final, fmt.compression, fmt.index, attempt_file,
                                       run_dir_of(final))


def _count_inputs(per_input: Counter[int], ids: np.ndarray) -> None:
    """Records per input file (the high bits of a record id)."""
    if not len(ids):
        return
    files = ids >> np.uint64(ID_POSITION_BITS)
    lo, hi = int(files.min()), int(files.max())
    if hi - lo < 1 << 16:  # one input file, or nearby ones (the common case): no sort
        counts = np.bincount((files - np.uint64(lo)).astype(np.int64))
        present = np.flatnonzero(counts)
        per_input.update(dict(zip((present + lo).tolist(), counts[present].tolist(), strict=True)))
        return
    uniq, counts = np.unique(files, return_counts=True)
    per_input.update(dict(zip(uniq.tolist(), counts.tolist(), strict=True)))


def _result(plan: ShardPlan, name: str, found: int, sink: Any,
            per_input: Counter[int]) -> ShardResult:
    return ShardResult(plan.split, plan.index, plan.num_shards, name, found, sink.num_bytes,
                       sink.sha256, {str(f): c for f, c in sorted(per_input.items())},
                       sink.index_file)


def run_dir_of(final: str) -> str | None:
    """The local run directory a shard staged at `final` (RUN_DIR/staging/NAME) belongs to,
    where its scratch goes; None for a remote staging place (scratch: the temp directory)."""
    if fs.local_path(final) is None:
        return None
    return os.path.dirname(os.path.dirname(os.path.abspath(final)))


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
    second upload replaces whole."""
    if not fs.renames(final):
        # an upload a signal stopped still completes on close (Beam's writer); the launcher
        # waits for this writer (etl.base.inflight) before its clean-up removes the object
        with fs.open_write(final, bypass_cache=True) as fh:
            yield fh
        return
    _staging_here(final)
    part = f"{final}.{uuid.uuid4().hex[:12]}{ATTEMPT_SUFFIX}"
    try:
        with fs.open_write(part, bypass_cache=True) as fh:
            yield fh
        fs.rename(part, final)
    except BaseException:
        with suppress(OSError):
            fs.delete([part])
        raise


def _staging_here(final: str) -> None:
    """Make the local staging folder of `final` if needed, never its parent (the run's
    directory): a worker that goes on after its run was stopped and cleaned up (a worker
    pool's process outlives its launcher's clean-up) fails here instead of making the run's
    directory again, unmarked, with a shard of tens of MB in it that no run would remove."""
    folder = os.path.dirname(final)
    try:
        os.mkdir(folder)
    except FileExistsError:
        return
    except FileNotFoundError as e:
        raise signals.Cancelled(f"not writing {os.path.basename(final)}: the run's directory "
                                f"{os.path.dirname(folder)} is gone (the run was stopped and "
                                "cleaned up)") from e


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
    the merged order, each slice's records are one contiguous run of it, in its order: one
    read each, straight into one buffer, then one Arrow `take` puts them in merged order.
    (Grouped by one stable sort: a mask per slice cost pieces x slices. The slice numbers are
    sorted as 8- or 16-bit integers, which NumPy's stable sort takes in one radix pass: an
    80k-record piece of 40 slices 0.31 ms, against 2.35 ms as int64.)"""
    by_slice = np.argsort(_narrow(source, len(slices)), kind="stable")
    grouped_source = source[by_slice]  # sorted: each slice's records are one run of it
    first = np.flatnonzero(grouped_source[1:] != grouped_source[:-1]) + 1
    first = np.concatenate([[0], first]) if len(source) else first
    present = grouped_source[first]
    bounds = [*first.tolist(), len(source)]
    offsets = np.zeros(len(source) + 1, np.int64)
    np.cumsum(sizes[by_slice], out=offsets[1:])
    grouped = np.empty(int(offsets[-1]), np.uint8)
    for s, a, b in zip(present.tolist(), bounds[:-1], bounds[1:], strict=True):
        lo, hi = int(local[by_slice[a]]), int(local[by_slice[b - 1]]) + 1
        if hi - lo != b - a:
            raise RuntimeError(f"merge: slice {s} is not contiguous in a piece of the shard")
        slices[s].payload_into(lo, hi, grouped[offsets[a]:offsets[b]])
    position = np.empty(len(source), np.int64)
    position[by_slice] = np.arange(len(source))
    take = compiled_framing.taker() if len(source) >= TAKE_COMPILED_FROM else None
    if take is None:
        return data_of(binary(grouped, offsets).take(pa.array(position)))
    out = np.empty(len(grouped), np.uint8)  # one compiled loop: each record copied once
    take(grouped.ctypes.data, offsets, position, out)
    return pa.py_buffer(out)


# records of a piece from which the compiled take is used (its loop is compiled with the framing
# loop, which stage 1 has usually compiled in this process already)
TAKE_COMPILED_FROM = 1024


def _narrow(source: np.ndarray, count: int) -> np.ndarray:
    """Slice numbers (0 <= x < count) in the narrowest unsigned type that holds them."""
    if count <= 1 << 8:
        return source.astype(np.uint8)
    if count <= 1 << 16:
        return source.astype(np.uint16)
    return source
