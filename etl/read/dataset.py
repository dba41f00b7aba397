"""tf.data reader for our TFRecords: the parse spec comes from the schema stored with the data.

The fast shape (≈25x the usual per-record parse reader in benchmarks/reader_bench.py on
2 cores): shard names -> parallel-interleaved `TFRecordDataset`s (blocks of records) ->
shuffle serialized records -> batch -> ONE vectorised `Schema.parse_and_decode` per batch
-> prefetch. Per-record parsing is what makes the common `map(parse_single_example)`
reader slow; here the parse runs on whole batches.

Errors name the shard: TensorFlow's reader says only "corrupted record at 492" (and a
parse error "Could not parse example input"), not which file. Iterating the dataset
`make_dataset` returns catches such an error and, on that failure path only, re-scans the
shards (framing and CRCs as `verify` checks them, then each record parsed against the schema)
to raise `DatasetError` naming the shard, record and byte offset. Datasets derived from it
(`.take`, `.map`, Keras `fit`) iterate in TensorFlow's own code and keep TF's message.
TensorFlow reads a truncated gzip shard as a shorter one without any error; for a dataset
directory the shard sizes are compared with the manifest before reading, which catches that.

This module imports TensorFlow at the top: it is the reading side. It does so through
etl.base.quiet.quiet_tensorflow, so TensorFlow's start-up lines (absl, oneDNN, cuInit, the
TFRecord buffer-size INFO) do not reach the user's console: TF_CPP_MIN_LOG_LEVEL=2 when they
set none, fd 2 muted while TensorFlow imports and starts its devices; TF_CPP_MIN_LOG_LEVEL=0
shows them all.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from etl.base.errors import EtlError, VerifyError
from etl.base.quiet import quiet_tensorflow, start_devices_quietly
from etl.contract.schema import Schema, load_schema
from etl.formats.record_index import INDEX_SUFFIX
from etl.formats.shards import DEFAULT_FORMAT, tf_data_reads
from etl.formats.tfrecord import compression_of, read_file
from etl.output.layout import MANIFEST, SCHEMA_FILE
from etl.read.splits import SplitError, check_host, host_part, parse, plan, split_names
from etl.storage import fs

tf = quiet_tensorflow()  # before any other TensorFlow import: its start-up lines muted

from tensorflow.python.data.ops import dataset_ops, iterator_ops  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE

_READ_BLOCK = 64  # records a parallel file read hands over at a time

# etl.formats.tfrecord names -> TFRecordDataset compression_type
_TF_COMPRESSION = {"none": "", "": "", "gzip": "GZIP", "zlib": "ZLIB"}


class DatasetError(EtlError, ValueError):
    """A dataset cannot be read: no schema, no shards for the split, a listed shard missing."""


PathLike = str | os.PathLike[str]


def make_dataset(
    path: PathLike | Sequence[PathLike],
    split: str = "train",
    batch_size: int = 256,
    shuffle_buffer: int | None = 10_000,
    repeat: bool | int = False,
    schema: Schema | PathLike | None = None,
    seed: int | None = None,
    num_parallel_reads: int = AUTOTUNE,
    drop_remainder: bool = False,
    compression: str | None = None,
    deterministic: bool | None = None,
    prefetch: int | None = AUTOTUNE,
    as_supervised: tuple[str | Sequence[str], str] | None = None,
    shard: tuple[int, int] | None = None,
    input_context: Any = None,
) -> tf.data.Dataset:
    """A `tf.data.Dataset` of batches: dicts feature name -> decoded tensor.

    `path` is a directory written by the pipeline (its `schema.yaml` gives the schema and
    its `manifest.json`, or the shard names, the files of `split`), or a glob / list of
    TFRecord files together with `schema` (a `Schema` or a path to a schema YAML).

    Shuffling (`shuffle_buffer` > 0) shuffles the shard order and then records in a buffer.
    With `shuffle_buffer` 0/None and `deterministic` not False, records come in file order
    (shard 0 first), which keeps the order the pipeline wrote. `repeat`: True for ever, or
    a number of epochs. `compression` ('none', 'gzip', 'zlib') overrides the per-file
    inference from the extension (.gz, .zz).

    `as_supervised=(x, y)` gives `(x, y)` batches, what Keras `fit` and `evaluate` take:
    `y` a feature name (the label), `x` a feature name (one tensor) or a list of names (a
    dict of those, for a model with named inputs), e.g. `as_supervised=("image", "label")`.

    `split` takes TFDS's slicing grammar: "train[:10%]", "train[10%:]", "train[:1000]",
    "train[-5%:]", "train+test" (etl.read.splits; exact record boundaries from the manifest's
    per-shard counts, a shard cut inside skipping its first records).

    Many hosts: `shard=(index, count)` (e.g. `(jax.process_index(), jax.process_count())`)
    or `input_context=` the `tf.distribute.InputContext` that
    `strategy.distribute_datasets_from_function` passes: this host reads its part, every
    record read by exactly one host (whole shards when `count` divides the number of shards,
    else contiguous record ranges differing by at most one record; etl.read.splits.host_part).
    """
    if batch_size < 1:
        raise DatasetError(f"batch_size must be >= 1, got {batch_size}")
    start_devices_quietly(tf)  # before the first op: its cuInit line muted
    host = _host(shard, input_context)
    files, schema_obj, records, ranges = _resolve_ranges(path, split, schema, host)
    decode = _decoder(schema_obj, as_supervised)
    shuffling = bool(shuffle_buffer) and shuffle_buffer > 1
    names = [compression if compression is not None else compression_of(f) for f in files]
    ds = _file_table(files, names, ranges, shuffle_files=shuffling and len(files) > 1, seed=seed)
    ds = _read_records(ds, len(files), in_file_order=not shuffling and deterministic is not False,
                       num_parallel_reads=num_parallel_reads, deterministic=deterministic)
    ds = ds.shuffle(int(shuffle_buffer), seed=seed, reshuffle_each_iteration=True) if shuffling else ds
    ds = _repeat_and_batch(ds, records, repeat, batch_size, drop_remainder)
    ds = ds.map(decode, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if prefetch:
        ds = ds.prefetch(prefetch)
    return _ShardErrors(ds, files, names, schema_obj)


def _file_table(files: list[str], compressions: list[str], ranges: Sequence[tuple[int, int]],
                shuffle_files: bool, seed: int | None) -> tf.data.Dataset:
    """One element per file: (name, compression, records to skip, records to take)."""
    comps = [_tf_compression(c) for c in compressions]
    skips = [r[0] for r in ranges]
    takes = [r[1] for r in ranges]
    ds = tf.data.Dataset.from_tensor_slices((tf.constant(files, tf.string),
                                             tf.constant(comps, tf.string),
                                             tf.constant(skips, tf.int64),
                                             tf.constant(takes, tf.int64)))
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    return ds


def _read_range(filename: tf.Tensor, compression_type: tf.Tensor, skip: tf.Tensor,
                take: tf.Tensor) -> tf.data.Dataset:
    # a slice or a host's range cut inside a shard: skip/take its records (take -1: all)
    return tf.data.TFRecordDataset(filename, compression_type=compression_type,
                                   buffer_size=1 << 20).skip(skip).take(take)


def _read_records(ds: tf.data.Dataset, num_files: int, in_file_order: bool,
                  num_parallel_reads: int, deterministic: bool | None) -> tf.data.Dataset:
    """The serialized records of the file table's files: in file order, or parallel reads."""
    if in_file_order:
        # One file after the other: the order the pipeline wrote.
        return ds.interleave(_read_range, cycle_length=1, block_length=1)
    cycle = (num_parallel_reads if num_parallel_reads == AUTOTUNE
             else max(1, min(num_parallel_reads, num_files)))
    # Parallel reads hand over blocks of records, not single records: a parallel
    # interleave of single records costs more per element than the parse itself
    # (measured 60-120k records/s vs 230-400k/s with blocks on 2 cores). The shuffle
    # buffer after `unbatch` mixes the blocks.
    ds = ds.interleave(lambda f, c, a, b: _read_range(f, c, a, b).batch(_READ_BLOCK),
                       cycle_length=cycle,
                       num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    return ds.unbatch()


def _repeat_and_batch(ds: tf.data.Dataset, records: int | None, repeat: bool | int,
                      batch_size: int, drop_remainder: bool) -> tf.data.Dataset:
    """Epochs, then batches; with a known record count, the batches per epoch declared."""
    if repeat is True:
        ds = ds.repeat()
    elif repeat:
        ds = ds.repeat(int(repeat))
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    if records is not None and repeat is not True:
        # the manifest's count gives the batches per epoch, which the interleave hides from
        # tf.data: Keras then shows "12/47" and does not warn that the input "ran out of data"
        total = records * (int(repeat) if repeat else 1)
        batches = total // batch_size if drop_remainder else -(-total // batch_size)
        ds = ds.apply(tf.data.experimental.assert_cardinality(batches))
    return ds


def _decoder(schema: Schema, as_supervised: tuple[str | Sequence[str], str] | None) -> Any:
    """The batch map: the schema's parse and decode, then the (x, y) pick `as_supervised`
    asks for (feature names checked here, before TensorFlow would fail with a KeyError)."""
    if as_supervised is None:
        return schema.parse_and_decode
    if (not isinstance(as_supervised, (tuple, list)) or len(as_supervised) != 2
            or not isinstance(as_supervised[1], str)):
        raise DatasetError(f"as_supervised must be (features, label), e.g. ('image', 'label'), "
                           f"got {as_supervised!r}")
    x, y = as_supervised
    names = [x] if isinstance(x, str) else list(x)
    known = [f.name for f in schema.features]
    unknown = [n for n in [*names, y] if n not in known]
    if unknown or not names:
        raise DatasetError(f"as_supervised={as_supervised!r}: "
                           + (f"no feature {unknown[0]!r} in schema {schema.name!r}; features: "
                              f"{known}" if unknown else "no features named for x"))

    def pick(serialized: tf.Tensor) -> tuple[Any, Any]:
        batch = schema.parse_and_decode(serialized)
        return (batch[x] if isinstance(x, str) else {n: batch[n] for n in names}), batch[y]

    return pick


class _ShardErrors(dataset_ops.UnaryUnchangedStructureDataset):
    """The same dataset (same graph, same variant); only its Python iterator differs: a read
    or parse error is re-raised as `DatasetError` naming the shard (see the module doc)."""

    def __init__(self, inner: tf.data.Dataset, files: list[str], compressions: list[str],
                 schema: Schema):
        self._inner = inner
        self._files = files
        self._compressions = compressions
        self._schema = schema
        super().__init__(inner, inner._variant_tensor)

    def __iter__(self) -> Any:
        if not tf.executing_eagerly():
            return super().__iter__()
        return _NamingIterator(self)


class _NamingIterator(iterator_ops.OwnedIterator):
    """TensorFlow's own iterator (so Keras `fit`, which runs only a `tf.data.Iterator` inside
    its compiled step, takes it as one; in the graph it is the plain iterator again), whose
    Python `next()` names the shard of a read or parse error."""

    def __init__(self, ds: _ShardErrors):
        self._shards = ds
        super().__init__(dataset=ds)

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise self._named(e) from e

    def get_next(self) -> Any:
        try:
            return super().get_next()
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise self._named(e) from e

    def _named(self, e: tf.errors.OpError) -> DatasetError:
        ds = self._shards
        return DatasetError(find_bad_shard(ds._files, ds._compressions, ds._schema, e.message))


def find_bad_shard(files: list[str], compressions: list[str], schema: Schema, error: str,
                   chunk: int = 256) -> str:
    """A message naming the first shard whose framing, compression or records are broken
    (the failure path of iterating `make_dataset`: it reads every shard again)."""
    for path, comp in zip(files, compressions, strict=True):
        records: list[bytes] = []
        offsets: list[int] = []
        index = 0
        try:
            for offset, data in read_file(path, comp):
                records.append(data)
                offsets.append(offset)
                if len(records) == chunk:
                    bad = _first_unparsable(schema, records)
                    if bad is not None:
                        return (f"{path}: record {index + bad} (byte {offsets[bad]}) does not parse "
                                f"with the dataset's schema: {error}")
                    index += len(records)
                    records, offsets = [], []
        except (VerifyError, OSError, EOFError, ValueError) as e:
            detail = str(e)
            return detail if detail.startswith(path) else f"{path}: {detail}"
        bad = _first_unparsable(schema, records) if records else None
        if bad is not None:
            return (f"{path}: record {index + bad} (byte {offsets[bad]}) does not parse with the "
                    f"dataset's schema: {error}")
    return (f"reading {len(files)} shard(s) ({', '.join(files[:3])}"
            f"{', ...' if len(files) > 3 else ''}): {error} (every shard's framing and records "
            f"check out on a second read)")


def _first_unparsable(schema: Schema, records: list[bytes]) -> int | None:
    try:
        schema.parse_and_decode(tf.constant(records))
        return None
    except (tf.errors.InvalidArgumentError, ValueError):
        pass
    for i, record in enumerate(records):
        try:
            schema.parse_and_decode(tf.constant([record]))
        except (tf.errors.InvalidArgumentError, ValueError):
            return i
    return None


def resolve(
    path: PathLike | Sequence[PathLike], split: str = "train",
    schema: Schema | PathLike | None = None,
) -> tuple[list[str], Schema]:
    """(files, schema) for a dataset directory or for explicit files plus a schema."""
    files, schema_obj, _, _ = _resolve_ranges(path, split, schema, None)
    return files, schema_obj


def _host(shard: tuple[int, int] | None, input_context: Any) -> tuple[int, int] | None:
    """(index, count) of this host, from `shard=` or a tf.distribute.InputContext."""
    if shard is not None and input_context is not None:
        raise DatasetError("pass shard=(index, count) or input_context=, not both")
    if input_context is not None:
        try:
            shard = (int(input_context.input_pipeline_id),
                     int(input_context.num_input_pipelines))
        except AttributeError:
            raise DatasetError(f"input_context must be a tf.distribute.InputContext, got "
                               f"{type(input_context).__name__}") from None
    if shard is None:
        return None
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise DatasetError(f"shard must be (index, count), e.g. (0, 4), got {shard!r}")
    return int(shard[0]), int(shard[1])


def _resolve_ranges(
    path: PathLike | Sequence[PathLike], split: str, schema: Schema | PathLike | None,
    host: tuple[int, int] | None,
) -> tuple[list[str], Schema, int | None, list[tuple[int, int]]]:
    """The files a split spec (etl.read.splits) and a host's part read, each with (records
    to skip, records to take or -1 for the rest), the schema, and the record count when the
    manifest gives it. `path`: a dataset directory, or TFRecord files with `schema`."""
    root = None
    if not isinstance(path, (str, os.PathLike)) and len(path) == 1:
        path = path[0]  # a one-item list (e.g. from a CLI) may name a dataset directory
    if isinstance(path, (str, os.PathLike)) and tf.io.gfile.isdir(os.fspath(path)):
        root = _dataset_root(os.fspath(path))
    where = root or "reading files"
    try:
        parts = parse(split)
        sliced = any(p.start is not None or p.stop is not None for p in parts)
        if root is None:
            if sliced or len(parts) > 1:
                raise SplitError(f"split {split!r}: slicing and '+' need a dataset directory "
                                 f"(its {MANIFEST} gives the record counts), not files")
            files, schema_obj = _files_and_schema(path, schema)
            files = _whole_files(files, host, split)
            return files, schema_obj, None, [(0, -1)] * len(files)
        shards = {name: _split_shards(root, name) for name in split_names(split)}
        schema_obj = _dir_schema(root, schema)
        if all(counts is not None for _, counts in shards.values()):
            pieces = plan(split, {n: counts for n, (_, counts) in shards.items()})
            if host is not None:
                pieces = host_part(pieces, *host, what=f"split {split!r}")
            files = [shards[p.split][0][p.shard] for p in pieces]
            ranges = [(p.first, -1 if p.stop == p.shard_records else p.size) for p in pieces]
            return files, schema_obj, sum(p.size for p in pieces), ranges
        if sliced:
            raise SplitError(f"split {split!r}: slicing needs the per-shard record counts of "
                             f"{MANIFEST}, which this output does not have")
        files = _whole_files([f for p in parts for f in shards[p.split][0]], host, split)
        return files, schema_obj, None, [(0, -1)] * len(files)
    except SplitError as e:
        raise DatasetError(f"{where}: {e}") from None


def _whole_files(files: list[str], host: tuple[int, int] | None, split: str) -> list[str]:
    """Whole files (no record counts known): a host takes every count-th file, which needs
    `count` to divide the number of files."""
    if host is None:
        return files
    index, count = host
    check_host(index, count)
    if len(files) % count:
        raise SplitError(f"shard=({index}, {count}) of {len(files)} files (split {split!r}, "
                         f"without {MANIFEST} record counts): count must divide the number "
                         "of files")
    return files[index::count]


def _files_and_schema(path: PathLike | Sequence[PathLike],
                      schema: Schema | PathLike | None) -> tuple[list[str], Schema]:
    """Explicit TFRecord files (paths or patterns) and the schema they need passed."""
    patterns = [os.fspath(path)] if isinstance(path, (str, os.PathLike)) else [
        os.fspath(p) for p in path
    ]
    files = _expand(patterns)
    if not files:
        raise DatasetError(f"no TFRecord files match {patterns}")
    if schema is None:
        raise DatasetError(f"reading files {patterns[:3]} needs schema=... (a Schema or a "
                           f"schema YAML path); only a dataset directory carries its own "
                           f"{SCHEMA_FILE}")
    return files, _as_schema(schema)


def _dir_schema(root: str, schema: Schema | PathLike | None) -> Schema:
    """`schema`, or the dataset directory's own schema.yaml."""
    if schema is None:
        schema_path = _join(root, SCHEMA_FILE)
        if not tf.io.gfile.exists(schema_path):
            raise DatasetError(f"{root}: no {SCHEMA_FILE} in the dataset directory; pass "
                               "schema=... (a Schema or a schema YAML path)")
        schema = schema_path
    return _as_schema(schema)


def split_files(root: str, split: str) -> list[str]:
    """Shards of one split: from manifest.json when present, else by the shard names."""
    return _split_shards(root, split)[0]


def _split_shards(root: str, split: str) -> tuple[list[str], list[int] | None]:
    """`split_files` and its shards' record counts (None without a manifest saying them)."""
    manifest_path = _join(root, MANIFEST)
    if tf.io.gfile.exists(manifest_path):
        with tf.io.gfile.GFile(manifest_path, "r") as fh:
            try:
                manifest = json.load(fh)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{manifest_path}: not valid JSON: {e}") from e
        splits = manifest.get("splits") if isinstance(manifest, dict) else None
        if isinstance(manifest, dict) and not tf_data_reads(manifest.get("format",
                                                                          DEFAULT_FORMAT)):
            raise DatasetError(f"{root}: holds {manifest['format']} shards (format: "
                               f"{manifest['format']}), which tf.data cannot read; read them "
                               "with etl.open_records or Grain's ArrayRecordDataSource")
        if isinstance(splits, dict):
            if split not in splits:
                raise DatasetError(f"{root}: split {split!r} not in {MANIFEST}; "
                                   f"available splits: {sorted(splits)}")
            shards = (splits[split] or {}).get("shards") or []
            files = [_join(root, s["path"]) if _relative(s["path"]) else s["path"]
                     for s in shards]
            if not files:
                raise DatasetError(f"{root}: split {split!r} has no shards in {MANIFEST}")
            # local shards only: on an object store one request per shard would delay the
            # first batch (`verify` checks remote shards; TensorFlow fails on a missing one)
            local = [(f, entry) for f, entry in zip(files, shards, strict=True)
                     if fs.local_path(f) is not None]
            missing = [f for f, _ in local if not os.path.exists(f)]
            if missing:
                raise DatasetError(f"{root}: {len(missing)} shard(s) listed in {MANIFEST} "
                                   f"are missing, e.g. {missing[0]}")
            # A truncated gzip shard reads as a shorter file in TensorFlow, without an error:
            # the sizes the manifest lists catch that (and a replaced shard) for one stat each.
            for f, entry in local:
                want = entry.get("num_bytes")
                if isinstance(want, int) and os.path.getsize(f) != want:
                    raise DatasetError(f"{f}: shard is {os.path.getsize(f)} bytes, {MANIFEST} "
                                       f"lists {want}: truncated or replaced (`verify` checks "
                                       f"every shard)")
            counts = [entry.get("num_records") for entry in shards]
            known = all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
            return files, (counts if known else None)
    files = sorted(f for f in tf.io.gfile.glob(_join(root, f"{split}-*-of-*.tfrecord*"))
                   if not f.endswith(INDEX_SUFFIX))
    if not files:
        present = sorted({posixpath.basename(f).split("-", 1)[0]
                          for f in tf.io.gfile.glob(_join(root, "*-of-*.tfrecord*"))})
        raise DatasetError(f"{root}: no shards for split {split!r} (expected "
                           f"{split}-NNNNN-of-NNNNN.tfrecord[.gz|.zz]); splits present: {present}")
    return files, None


def load_records(
    path: PathLike | Sequence[PathLike], split: str = "train",
    schema: Schema | PathLike | None = None, compression: str | None = None,
) -> dict[str, Any]:
    """Every record, in file order, as NumPy: dense features as arrays [N, *shape], ragged
    and sparse features as lists (one nested list per record). For tests and inspection."""
    _, schema_obj = resolve(path, split, schema)
    ds = make_dataset(path, split, batch_size=1024, shuffle_buffer=0, schema=schema_obj,
                      compression=compression, prefetch=None)
    parts: dict[str, list[Any]] = {f.name: [] for f in schema_obj.features}
    for batch in ds:
        for name, value in batch.items():
            parts[name].append(value)
    return {f.name: _concat(f, parts[f.name]) for f in schema_obj.features}


def to_numpy(value: Any) -> Any:
    """A decoded tensor -> ndarray (dense) or nested Python lists (ragged / sparse rows)."""
    if isinstance(value, tf.RaggedTensor):
        return value.to_list()
    if isinstance(value, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(value).to_list()
    return value.numpy()


# ---- helpers -------------------------------------------------------------------------------------
def _concat(feature: Any, parts: list[Any]) -> Any:
    pieces = [to_numpy(p) for p in parts]
    if pieces and isinstance(pieces[0], list):
        return [row for piece in pieces for row in piece]
    if not pieces:
        if feature.is_sequence or not (feature.fixed or feature.encoding != "values"):
            return []
        return np.zeros((0, *feature.shape), feature.numpy_dtype)
    return np.concatenate(pieces)


def _as_schema(schema: Schema | PathLike) -> Schema:
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, (str, os.PathLike)):
        return load_schema(schema)
    raise DatasetError(f"schema must be a Schema or a path to a schema YAML, got "
                       f"{type(schema).__name__}")


def _tf_compression(name: str) -> str:
    key = name.lower()
    if key not in _TF_COMPRESSION:
        raise DatasetError(f"compression must be one of 'none', 'gzip', 'zlib', got {name!r}")
    return _TF_COMPRESSION[key]


def _expand(patterns: Iterable[str]) -> list[str]:
    files: list[str] = []
    for p in patterns:
        if any(c in p for c in "*?["):  # index files beside the shards hold no records
            files.extend(f for f in sorted(tf.io.gfile.glob(p)) if not f.endswith(INDEX_SUFFIX))
        elif tf.io.gfile.isdir(p):
            raise DatasetError(f"{p} is a directory: pass a dataset directory on its own, "
                               "or TFRecord files / globs")
        elif tf.io.gfile.exists(p):
            files.append(p)
        else:
            raise DatasetError(f"no such file: {p}")
    return list(dict.fromkeys(files))


def _join(root: str, name: str) -> str:
    return fs.join(root, name)


def _relative(p: str) -> bool:
    return not fs.is_absolute(p)


def _dataset_root(path: str) -> str:
    """The folder holding a dataset's shards: on object stores an output may publish
    versions below itself, named by its `_SUCCESS` (etl.output.manifest.dataset_dir)."""
    from etl.output.manifest import dataset_dir  # noqa: PLC0415 - only for a dataset directory

    return dataset_dir(path)
