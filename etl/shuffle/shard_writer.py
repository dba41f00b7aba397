"""Build one output shard from its key range of every sorted run (both strategies).

Runs are already framed and sorted, so a shard is their merge (etl.shuffle.merge): the only
per-record work is NumPy's sort of keys and Arrow's C-level `take`, one call per piece of
about 16 MB. Both strategies hand this the same slices (every record of the shard's key range
of every run), so they write the same bytes."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from etl.base import signals
from etl.base.pause import pause
from etl.formats import array_record
from etl.formats.proto_wire import binary, data_of
from etl.formats.record_index import FRAME_OVERHEAD, index_lines, index_name
from etl.formats.shards import ARRAY_RECORD, ShardFormat
from etl.formats.tfrecord import Compressor
from etl.shuffle.keys import ID_POSITION_BITS
from etl.shuffle.merge import merged_batches
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import FileSlice, OpenFiles, RunSlice
from etl.storage import fs

CHUNK_BYTES = 16 << 20
ATTEMPT_SUFFIX = ".attempt"  # a shard being written: <shard name>.<attempt id>.attempt


@dataclass(frozen=True)
class IndexFile:
    """The index file written beside a TFRecord shard (etl.formats.record_index)."""

    name: str
    num_bytes: int
    sha256: str


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
    name = fmt.shard_name(plan.split, plan.index, plan.num_shards)
    found = 0
    per_input: Counter[int] = Counter()
    final = fs.join(staging_dir, name)
    sink_type = _ArrayRecordSink if fmt.kind == ARRAY_RECORD else _TFRecordSink
    with shared_handles(slices), sink_type.open(final, fmt) as sink:
        for src, local, ids, sizes in merged_batches(slices, plan.skip, plan.take):
            signals.check_cancelled(f"writing {name}")
            found += len(src)
            files, counts = np.unique(ids >> np.uint64(ID_POSITION_BITS), return_counts=True)
            per_input.update(dict(zip(files.tolist(), counts.tolist(), strict=True)))
            for piece in _pieces(sizes):
                sink.write(_gather(slices, src[piece], local[piece], sizes[piece]), sizes[piece])
            pause("write:shard")  # tests: a shard's attempt (and scratch) file half written
        if found != plan.take:
            raise RuntimeError(f"shard {name}: planned {plan.take} records, found {found}")
        sink.finish()
    return ShardResult(plan.split, plan.index, plan.num_shards, name, found, sink.num_bytes,
                       sink.sha256, {str(f): c for f, c in sorted(per_input.items())},
                       sink.index_file)


class _TFRecordSink:
    """A TFRecord shard (whole-file compressed when asked) and, with `fmt.index`, its index
    file, both written as attempt files that appear together or not at all."""

    def __init__(self, shard: BinaryIO, fmt: ShardFormat, index: BinaryIO | None,
                 index_name: str):
        self._fh, self._index_fh, self._index_name = shard, index, index_name
        self._comp = Compressor(fmt.compression)
        self._sha, self._index_sha = hashlib.sha256(), hashlib.sha256()
        self.num_bytes = self._index_bytes = self._frames_end = 0
        self.sha256 = ""
        self.index_file: IndexFile | None = None

    @classmethod
    @contextmanager
    def open(cls, final: str, fmt: ShardFormat) -> Iterator[_TFRecordSink]:
        with ExitStack() as stack:
            shard = stack.enter_context(attempt_file(final))
            index = stack.enter_context(attempt_file(index_name(final))) if fmt.index else None
            yield cls(shard, fmt, index, fs.basename(index_name(final)))

    def write(self, framed: pa.Buffer, frame_sizes: np.ndarray) -> None:
        self._put(self._comp.compress(framed))
        if self._index_fh is not None:
            lines, self._frames_end = index_lines(frame_sizes - FRAME_OVERHEAD, self._frames_end)
            self._index_sha.update(lines)
            self._index_bytes += len(lines)
            self._index_fh.write(lines)

    def _put(self, data: bytes) -> None:
        self._sha.update(data)
        self.num_bytes += len(data)
        self._fh.write(data)

    def finish(self) -> None:
        self._put(self._comp.flush())
        self.sha256 = self._sha.hexdigest()
        if self._index_fh is not None:
            self.index_file = IndexFile(self._index_name, self._index_bytes,
                                        self._index_sha.hexdigest())


class _ArrayRecordSink:
    """An ArrayRecord shard: the payloads written to a local scratch file, then copied to
    the attempt file (etl.formats.array_record says why)."""

    def __init__(self, writer: array_record.Writer):
        self._writer = writer
        self.num_bytes = 0
        self.sha256 = ""
        self.index_file: IndexFile | None = None
        self._out: BinaryIO | None = None

    @classmethod
    @contextmanager
    def open(cls, final: str, fmt: ShardFormat) -> Iterator[_ArrayRecordSink]:
        with array_record.scratch_file(fs.basename(final), run_dir_of(final)) as local, \
                attempt_file(final) as out:
            sink = cls(array_record.Writer(local))
            sink._out = out
            try:
                yield sink
            finally:
                sink._writer.close()

    def write(self, framed: pa.Buffer, frame_sizes: np.ndarray) -> None:
        self._writer.write_framed(framed, frame_sizes)

    def finish(self) -> None:
        self._writer.close()
        assert self._out is not None
        self.num_bytes, self.sha256 = array_record.copy_out(self._writer.path, self._out)


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
    (Grouped by one stable sort: a mask per slice cost pieces x slices.)"""
    by_slice = np.argsort(source, kind="stable")
    present, first = np.unique(source[by_slice], return_index=True)
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
    return data_of(binary(grouped, offsets).take(pa.array(position)))
