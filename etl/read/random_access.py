"""Random access to a published output without TensorFlow: `open_records(path, split)`.

What it gives: `len(records)`, `records[i]` (one record: feature name -> NumPy value shaped
by the schema), `records[a:b]`, `records[[i, j, ...]]` (a batch: one array [n, *shape] per
fixed-shape feature, a list of per-record arrays for ragged and sequence features; see
etl.read.decode), and `records.__getitems__(indices)` (a list of records from one batched
read: what `torch.utils.data.DataLoader` calls). That is Grain's `RandomAccessDataSource`
protocol and a PyTorch map-style `Dataset`.

How: the manifest lists the split's shards and, beside each TFRecord shard, its index file
(etl.formats.record_index: the byte offset and frame length of every record). The indexes
are read and checked when the output is opened (every entry where the previous frame ended,
the last ending at the shard's end, one line per record of the manifest's count, the file's
size and sha256 the manifest's), so a record costs one pread of the shard (local) or one
ranged GET (gs://), nearby records of a batch sharing a read (etl.storage.fs.RangedFile),
its framing CRCs, and its share of one C++ decode per batch. ArrayRecord outputs (`format:
array_record`) are read with ArrayRecordReader, which has random access by record number
built in, opened by their format's adapter (etl.formats.shards).

Never wrong data (issue 28; docs/reading.md "What open_records checks"): the manifest's
identity (one stat) is pinned on open and checked after the indexes are read and on the
first read of each shard in each process, so a republish raises `Republished` instead of
new records under old positions; a shard stays open once read (a descriptor, a gs://
generation), and is never memory-mapped, so a shard truncated while open is an error naming
it, not SIGBUS. ArrayRecord shards: their Riegeli signature, footer, record count and size
on open, chunk hashes on read, and an empty record (what ArrayRecordReader returns past the
end of a file truncated while open) costs a stat of its shard.

Pickling keeps what names the data (paths, the schema, the manifest's counts and its pinned
identity), never an open file: a worker process (Grain, PyTorch) reopens the shards and
re-reads the indexes on its first record. A forked worker opens its own handles too
(checked by process id).
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from etl.base.errors import EXIT_BAD_INPUT, EtlError, StorageError
from etl.contract.schema import Schema, load_schema
from etl.formats.array_record import riegeli_reason, signature_problem
from etl.formats.record_index import IndexFileError, check_index, parse_index
from etl.formats.shard_adapter import ShardAdapter
from etl.formats.shards import ADAPTER_FOR_FORMAT, DEFAULT_FORMAT
from etl.formats.tfrecord import unframe
from etl.output.layout import MANIFEST, SCHEMA_FILE
from etl.read.decode import RecordDecoder, check_decodable
from etl.read.splits import Piece, SplitError, host_part, plan, split_names
from etl.storage import fs


class RecordsError(EtlError, ValueError):
    """An output `open_records` cannot read at random, or a record that does not read; the
    message names the file."""

    exit_code = EXIT_BAD_INPUT


class Republished(RecordsError):
    """The output was published again after `open_records` opened it: its positions may name
    other records now. Open it again."""


@dataclass(frozen=True)
class _Shard:
    path: str
    num_records: int
    num_bytes: int | None
    index: str | None  # the index file (TFRecord shards)
    index_bytes: int | None = None  # its size and sha256 as the manifest lists them
    index_sha256: str | None = None


def open_records(path: str | os.PathLike[str], split: str = "train",
                 schema: Schema | str | os.PathLike[str] | None = None) -> Records:
    """Random access to one split of an output the pipeline wrote (local or gs://): TFRecord
    shards with index files, or ArrayRecord shards. `schema` overrides the output's own
    schema.yaml. Imports no TensorFlow.

    `split` takes TFDS's slicing grammar ("train[:10%]", "train[10%:]", "train+test", ...;
    etl.read.splits); `.shard(index, count)` gives one host's part of it."""
    return Records(os.fspath(path), split, schema)


class Records:
    """One split of an output, read at random; see the module docstring."""

    def __init__(self, path: str, split: str = "train",
                 schema: Schema | str | os.PathLike[str] | None = None):
        from etl.output.manifest import dataset_dir  # noqa: PLC0415 - gs:// version lookup, on open

        self.path = path
        self.split = split
        self.root = dataset_dir(path)
        # the version opened: the manifest's identity, checked again after the indexes are
        # read and on the first read of each shard (one stat; etl.storage.fs.identity)
        self._store: Any = None  # gs://: one client for these stats (not pickled)
        self._pin = self._identity()
        manifest = _manifest(self.root)
        self.format = str(manifest.get("format") or DEFAULT_FORMAT)
        try:
            names = split_names(split)
        except SplitError as e:
            raise RecordsError(f"{self.root}: {e}") from None
        first_shard: dict[str, int] = {}
        counts: dict[str, list[int]] = {}
        self.shards: list[_Shard] = []
        try:
            for name in names:  # the shards of every split the spec names, one after the other
                first_shard[name] = len(self.shards)
                more = _shards(self.root, manifest, name, self.format)
                counts[name] = [s.num_records for s in more]
                self.shards += more
        except RecordsError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # its shapes, not ours
            raise RecordsError(f"{fs.join(self.root, MANIFEST)}: damaged, or not a manifest "
                               f"this pipeline wrote (split {split!r}: {type(e).__name__}: "
                               f"{fs.first_line(e)[:200]}); `verify` checks the whole "
                               "output") from e
        # its format's adapter: read by record number (ArrayRecord) or through index files
        self._by_number = _adapter(self.root, self.format).by_number
        if schema is None:
            schema = fs.join(self.root, SCHEMA_FILE)
            if not fs.exists(schema):
                raise RecordsError(f"{self.root}: no {SCHEMA_FILE} in the output; pass "
                                   "schema=... (a Schema or a schema YAML path)")
        self.schema = schema if isinstance(schema, Schema) else load_schema(schema)
        check_decodable(self.schema, self.root)
        self._decoder = RecordDecoder(self.schema)
        self._starts = np.concatenate([[0], np.cumsum([s.num_records for s in self.shards])])
        self._first_shard = first_shard
        try:
            pieces = plan(split, {n: counts[n] for n in names})
        except SplitError as e:
            raise RecordsError(f"{self.root}: {e}") from None
        self._set_view(pieces)
        self._open: dict[int, Any] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()  # Grain reads with several threads per worker
        self._indexes: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._load_indexes()  # errors now, naming the file, not at the first record

    def _set_view(self, pieces: list[Piece]) -> None:
        """The records this object shows, in order: `pieces` (etl.read.splits) as ranges of
        the shards' positions (`_view_base[k]` the first of range k, `_view_starts` the
        cumulated sizes)."""
        self._pieces = [p for p in pieces if p.size]
        self._view_base = np.array([self._starts[self._first_shard[p.split] + p.shard] + p.first
                                    for p in self._pieces], np.int64)
        self._view_starts = np.concatenate([[0], np.cumsum([p.size for p in self._pieces],
                                                           dtype=np.int64)]).astype(np.int64)

    def shard(self, index: int, count: int) -> Records:
        """Host `index` of `count`'s part of these records (a new Records; this one is
        unchanged): every record in exactly one host's part, whole shards when `count`
        divides their number, else contiguous record ranges differing by at most one record
        (etl.read.splits.host_part; the same parts `make_dataset(shard=...)` reads)."""
        try:
            pieces = host_part(self._pieces, index, count, what=f"split {self.split!r}")
        except SplitError as e:
            raise RecordsError(f"{self.root}: {e}") from None
        part = copy.copy(self)
        part.__dict__.update(_open={}, _pid=os.getpid(), _lock=threading.Lock(),
                             _store=None)
        part._set_view(pieces)
        return part

    # ---- the protocol ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._view_starts[-1])

    def __getitem__(self, key: Any) -> dict[str, Any]:
        """`records[i]`: one record; `records[a:b]` or `records[[i, j]]`: a batch."""
        if isinstance(key, (int, np.integer)):
            batch = self.batch(np.array([self._position(int(key))], np.int64))
            return {name: value[0] for name, value in batch.items()}
        if isinstance(key, slice):
            return self.batch(np.arange(len(self))[key])
        return self.batch(key)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        """The records at `indices`, read and decoded as one batch, seen as a sequence of
        records (PyTorch's DataLoader asks for this, then hands it to its collate function)."""
        return Batch(self.batch(indices), len(indices))

    # Grain's SupportsBatchedReadRandomAccessDataSource: `grain.MapDataset.source(records)`
    # then reads a batch of indices in one call (a one-record decode costs ~100 µs, ~4 µs per
    # record in a batch of 256: benchmarks/README.md)
    _getitems = __getitems__

    def batch(self, indices: Any) -> dict[str, Any]:
        """Records `indices` as one batch: arrays [n, *shape] for fixed-shape features, lists
        of n per-record arrays for ragged and sequence features (etl.read.decode)."""
        idx = np.asarray(indices)
        if idx.ndim != 1 or (len(idx) and idx.dtype.kind not in "iu"):
            raise TypeError(f"records are indexed by an int, a slice or a 1-d sequence of ints, "
                            f"got {type(indices).__name__}")
        idx = np.array([self._position(int(i)) for i in idx.tolist()], np.int64) \
            if len(idx) and (idx.min() < 0 or idx.max() >= len(self)) else idx.astype(np.int64)
        # positions of the view (a slice, a host's part) -> positions in the shards
        k = np.searchsorted(self._view_starts, idx, side="right") - 1
        serialized, where = self._read(self._view_base[k] + idx - self._view_starts[k])

        def name(i: int) -> str:
            shard, local = where[i]
            return f"{self.shards[shard].path}: record {local}"

        return self._decoder.decode(serialized, name)

    def __repr__(self) -> str:
        return (f"Records({self.root!r}, split={self.split!r}, records={len(self)}, "
                f"shards={len(self.shards)}, format={self.format!r})")

    # ---- pickling: names, not handles -----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_open={}, _indexes=None, _pid=None, _lock=None, _store=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        for handle in self._open.values():
            handle.close()
        self._open = {}

    # ---- reading --------------------------------------------------------------------------------
    def _position(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"record {i} out of range: {self.split!r} has {n} records")
        return i + n if i < 0 else i

    def _handle(self, s: int) -> Any:
        """Shard s's open reader in this process (made once, under the lock)."""
        handle = self._open.get(s) if self._pid == os.getpid() else None
        if handle is not None:
            return handle
        with self._lock:
            if self._pid != os.getpid():  # unpickled or forked into a worker: its own handles
                self._open = {}
                self._store = None
                self._pid = os.getpid()
            if self._indexes is None:
                self._load_indexes()
            if s not in self._open:
                self._open[s] = self._open_shard(self.shards[s])
            return self._open[s]

    def _open_shard(self, shard: _Shard) -> Any:
        """Shard `shard` opened and pinned: its size (and, ArrayRecord, its footer and record
        count) as the manifest lists them, and the manifest still the one opened."""
        if self._by_number:
            _local_only(shard.path)
            size = _size(shard.path)
            if size is None:
                self._check_pin()
                raise RecordsError(f"{shard.path}: no such file (listed in {MANIFEST}); "
                                   "run `verify` on the output")
            try:
                problem = signature_problem(shard.path)
            except (OSError, StorageError) as e:
                problem = f"cannot read: {_why(e)}"
            if problem is not None:
                self._check_pin()
                raise RecordsError(f"{shard.path}: {problem}; run `verify` on the output")
            try:
                handle: Any = ADAPTER_FOR_FORMAT[self.format].open_random(shard.path)
            except RuntimeError as e:  # its footer (the record index) does not read
                self._check_pin()
                raise RecordsError(f"{shard.path}: not a readable ArrayRecord file, its footer "
                                   f"is damaged or missing ({riegeli_reason(e)}); run `verify` on "
                                   "the output") from e
            problem = self._array_record_problem(handle, shard)
        else:
            handle = fs.RangedFile(shard.path)
            try:
                size = handle.open()
            except (OSError, StorageError) as e:
                self._check_pin()
                raise RecordsError(f"{shard.path}: cannot read: {_why(e)}") from e
            problem = None
            if shard.num_bytes is None and self._indexes:  # a manifest without sizes
                assert shard.index is not None
                try:
                    check_index(*self._indexes[self.shards.index(shard)], size, shard.index)
                except IndexFileError:
                    handle.close()
                    raise
        if problem is None and shard.num_bytes is not None and size != shard.num_bytes:
            problem = (f"{size} bytes on disk, {MANIFEST} says {shard.num_bytes}: changed or "
                       "truncated after publishing")
        try:
            self._check_pin()
            if problem is not None:
                raise RecordsError(f"{shard.path}: {problem}; run `verify` on the output")
        except BaseException:
            try:
                handle.close()
            except RuntimeError:  # a reader whose file did not open (ArrayRecord)
                pass
            raise
        return handle

    @staticmethod
    def _array_record_problem(handle: Any, shard: _Shard) -> str | None:
        if not handle.ok():
            return "not a readable ArrayRecord file (truncated or damaged: its footer cannot be read)"
        if int(handle.num_records()) != shard.num_records:
            return (f"{handle.num_records()} records, {MANIFEST} says {shard.num_records}: "
                    "damaged or replaced after publishing")
        return None

    def _check_size(self, shard: _Shard, record: int) -> None:
        """RecordsError when the shard is not (or no longer) the size the manifest lists."""
        size = _size(shard.path)
        if shard.num_bytes is not None and size != shard.num_bytes:
            self._check_pin()
            raise RecordsError(f"{shard.path}: record {record}: the shard is "
                               f"{'gone' if size is None else f'{size} bytes'}, {MANIFEST} "
                               f"says {shard.num_bytes}: truncated or replaced while open; "
                               "run `verify` on the output")

    def _identity(self) -> tuple[int, ...] | None:
        if self._store is None and self.root.startswith("gs://"):
            from etl.storage.object_store import Store  # noqa: PLC0415 - gs:// only: google-cloud-storage loads on first use

            self._store = Store()
        return fs.identity(fs.join(self.root, MANIFEST), self._store)

    def _check_pin(self) -> None:
        """Republished when the manifest is not the one opened (local: another file, or
        rewritten; gs://: another generation, or the version deleted)."""
        if self._identity() != self._pin:
            raise Republished(f"{self.path}: the output was republished since it was opened "
                              f"(its {MANIFEST} changed); open it again with open_records")

    def _read(self, idx: np.ndarray) -> tuple[list[bytes], list[tuple[int, int]]]:
        """The serialized records at global positions `idx`, in that order, and where each
        one is (shard, record in shard)."""
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        local = idx - self._starts[shard_of]
        out: list[bytes] = [b""] * len(idx)
        for s in np.unique(shard_of).tolist():
            rows = np.flatnonzero(shard_of == s)
            wanted = local[rows]
            shard = self.shards[s]
            handle = self._handle(s)
            if self._by_number:
                records = self._read_array_record(handle, shard, wanted.tolist())
            else:
                assert self._indexes is not None
                offsets, lengths = self._indexes[s]
                try:
                    frames = handle.read(offsets[wanted], lengths[wanted])
                except (OSError, StorageError) as e:
                    self._check_pin()
                    raise RecordsError(f"{shard.path}: cannot read: {_why(e)}") from e
                records = [_payload(frame, shard.path, int(r), int(offsets[r]))
                           for frame, r in zip(frames, wanted.tolist(), strict=True)]
            for row, record in zip(rows.tolist(), records, strict=True):
                out[row] = record
        return out, list(zip(shard_of.tolist(), local.tolist(), strict=True))

    def _load_indexes(self) -> None:
        """Every shard's index, read and checked against its shard (TFRecord outputs)."""
        if self._by_number:
            self._check_pin()
            self._indexes = []
            return
        loaded = []
        for shard in self.shards:
            try:
                loaded.append(_index(shard))
            except (RecordsError, IndexFileError):
                self._check_pin()  # a republish while opening is said as such
                raise
        self._check_pin()  # the indexes read are the manifest's (no republish meanwhile)
        self._indexes = loaded

    def _read_array_record(self, handle: Any, shard: _Shard, wanted: list[int]) -> list[bytes]:
        """Records `wanted` of an ArrayRecord shard; damage (a chunk or footer whose hash does
        not match, a short read) is a RecordsError naming the shard and the first bad record."""
        try:
            records = handle.read(wanted)
        except RuntimeError:
            pass
        else:
            # a record past the end of a file truncated while open reads as b"" without an
            # error (array-record 0.8.6): an empty record costs one stat of its shard
            if b"" in records:
                self._check_size(shard, wanted[records.index(b"")])
            return records
        for r in wanted:  # the error path only: which record
            try:
                handle.read([r])
            except RuntimeError as e:
                self._check_pin()
                raise RecordsError(f"{shard.path}: record {r}: damaged ArrayRecord data "
                                   f"({riegeli_reason(e)}); run `verify` on the output") from e
        raise RecordsError(f"{shard.path}: records {wanted[:5]}...: damaged ArrayRecord data; "
                           "run `verify` on the output")


class Batch(Sequence):
    """A decoded batch (`columns`: feature -> array [n, ...] or list of n arrays) that is also
    a sequence of n records, built only when one is asked for: a collate function that knows
    it (etl.read.torch_dataset) takes `columns` whole; torch's default_collate walks records."""

    def __init__(self, columns: dict[str, Any], n: int):
        self.columns = columns
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, (int, np.integer)):
            raise TypeError("a Batch is indexed by record number")
        if not -self._n <= i < self._n:
            raise IndexError(f"record {i} out of range: the batch has {self._n}")
        return {name: value[i] for name, value in self.columns.items()}


def _index(shard: _Shard) -> tuple[np.ndarray, np.ndarray]:
    """A TFRecord shard's index file, read and checked: every line parses, one per record
    of the manifest's count, the entries tile the shard, and its size and sha256 are the
    manifest's (so an index of the same shape from another output is refused too)."""
    assert shard.index is not None
    try:
        data = fs.read_bytes(shard.index)
    except FileNotFoundError as e:
        raise RecordsError(f"{shard.index}: index file missing (listed in {MANIFEST}); "
                           f"`verify` checks the whole output") from e
    except (OSError, StorageError) as e:
        raise RecordsError(f"{shard.index}: cannot read: {_why(e)}") from e
    offsets, lengths = parse_index(data, shard.index)
    if len(offsets) != shard.num_records:
        raise RecordsError(f"{shard.index}: {len(offsets)} entries, {MANIFEST} lists "
                           f"{shard.num_records} records for {fs.basename(shard.path)}")
    if shard.num_bytes is not None:
        check_index(offsets, lengths, shard.num_bytes, shard.index)
    if shard.index_bytes is not None and len(data) != shard.index_bytes:
        raise RecordsError(f"{shard.index}: {len(data)} bytes, {MANIFEST} says "
                           f"{shard.index_bytes}: damaged or not this output's index file; "
                           "`verify` checks the whole output")
    if shard.index_sha256 is not None and hashlib.sha256(data).hexdigest() != shard.index_sha256:
        raise RecordsError(f"{shard.index}: sha256 does not match {MANIFEST}: damaged or not "
                           "this output's index file; `verify` checks the whole output")
    return offsets, lengths


def _payload(frame: bytes, path: str, record: int, offset: int) -> bytes:
    """A TFRecord frame's payload, its length and both CRCs checked (etl.formats.tfrecord)."""
    payload = unframe(frame)
    if payload is None:
        raise RecordsError(f"{path}: record {record} (byte {offset}): the frame the index points "
                           f"at is corrupt (length or CRC mismatch); run `verify` on the output")
    return payload


def _size(path: str) -> int | None:
    """A file's size, None when it is not there."""
    try:
        return fs.size(path)
    except FileNotFoundError:
        return None
    except (OSError, StorageError) as e:
        raise RecordsError(f"{path}: cannot read: {_why(e)}") from e


def _why(e: BaseException) -> str:
    """An OSError's reason without the path the message already starts with."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return fs.first_line(e)


def _local_only(path: str) -> None:
    if fs.local_path(path) is None:
        raise RecordsError(f"{path}: ArrayRecordReader reads local files only; copy the output "
                           "to a local disk first (gsutil -m cp -r)")


def _manifest(root: str) -> dict[str, Any]:
    import json  # noqa: PLC0415

    path = fs.join(root, MANIFEST)
    try:
        raw = fs.read_bytes(path)
    except FileNotFoundError as e:
        raise RecordsError(f"{path}: no such file: open_records reads outputs the pipeline "
                           f"wrote (shards, index files and {MANIFEST})") from e
    except OSError as e:
        raise RecordsError(f"{path}: cannot read: {_why(e)}") from e
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise RecordsError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        raise RecordsError(f"{path}: not a manifest of this pipeline (no 'splits')")
    return manifest


def _adapter(root: str, fmt: str) -> ShardAdapter:
    """The adapter of an output's format, if open_records reads it at random (by record
    number, or through index files: etl.formats.shards)."""
    readable = {name: a for name, a in ADAPTER_FOR_FORMAT.items()
                if a.by_number or a.indexable("none")}
    if fmt not in readable:
        raise RecordsError(f"{fs.join(root, MANIFEST)}: unknown format {fmt!r}; open_records "
                           f"reads {' and '.join(repr(name) for name in readable)}")
    return readable[fmt]


def _shards(root: str, manifest: dict[str, Any], split: str, fmt: str) -> list[_Shard]:
    splits = manifest["splits"]
    if split not in splits:
        raise RecordsError(f"{root}: split {split!r} not in {MANIFEST}; available splits: "
                           f"{sorted(splits)}")
    entries = (splits[split] or {}).get("shards") or []
    if not entries:
        raise RecordsError(f"{root}: split {split!r} has no shards in {MANIFEST}")

    def place(p: str) -> str:
        return p if fs.is_absolute(p) else fs.join(root, p)

    compression = str(manifest.get("compression") or "none")
    adapter = _adapter(root, fmt)
    by_number = adapter.by_number
    if not by_number and not adapter.indexable(compression):
        raise RecordsError(f"{place(entries[0]['path'])}: shards are {compression}-compressed; "
                           "random access needs uncompressed shards with index files (offsets "
                           "into a compressed stream cannot be seeked to): convert with "
                           "`compression: none`")
    return [_shard(e, by_number, place) for e in entries]


def _shard(e: dict[str, Any], by_number: bool, place: Any) -> _Shard:
    """One shard entry of the manifest (`by_number`: no index file, the format's own)."""
    index = e.get("index")
    if not by_number and not (isinstance(index, dict) and index.get("path")):
        raise RecordsError(f"{place(e['path'])}: no index file in {MANIFEST} (written with "
                           "`index: false`, or before index files were written); rerun "
                           "the job with `index: true` to read it at random")
    size = e.get("num_bytes")
    if int(e["num_records"]) < 0:
        raise ValueError(f"num_records {e['num_records']}")
    index = {} if by_number else index
    index_bytes, index_sha = index.get("num_bytes"), index.get("sha256")
    return _Shard(place(e["path"]), int(e["num_records"]),
                  size if isinstance(size, int) else None,
                  None if by_number else place(index["path"]),
                  index_bytes if isinstance(index_bytes, int) else None,
                  index_sha if isinstance(index_sha, str) else None)
