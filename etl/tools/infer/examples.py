"""TFRecord files of tf.train.Example: the first records of each file as Arrow columns.

A TFRecord source passes its records through unchanged (etl.sources.tfrecord_source), so the
schema must describe the lists the records already hold: one column per feature key, exactly as
spelled, with the list type the record stores. The records are framed by etl.formats.tfrecord (through
etl.storage.fs: local and gs:// alike, gzip/zlib by extension) and decoded by tfx_bsl's schema-less C++
decoder into Arrow lists (int64 / float32 / binary; null where a record lacks the feature); no
TensorFlow import (~4 s, 600 MB). A feature holding exactly one value in every record that has
it becomes a scalar column, so the guess is shape [] and images are recognised.

Refused rather than guessed: SequenceExamples (their context would decode as an Example and
their feature lists be dropped silently: ConfigError), and records that are not Example protos,
broken frames or streams (BadInputError naming the file and byte offset).
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.base.errors import BadInputError, ConfigError, VerifyError
from etl.contract.record_check import top_level_fields
from etl.formats.tfrecord import compression_of, read_file
from etl.storage import fs
from etl.tools.infer.sample import Sample

SEQUENCE_REFUSED = ("records are tf.train.SequenceExample (they hold feature_lists): "
                    "infer-schema infers tf.train.Example schemas only; write a kind: "
                    "sequence_example schema by hand (README, 'Schema files')")


def sample_examples(paths: list[str], n: int) -> Sample:
    """Up to `n` records of each file, decoded into one column per feature key."""
    records: list[bytes] = []
    where: list[tuple[str, int, int]] = []  # (file, record index, byte offset) per record
    out = Sample()
    for path in paths:
        got, complete = _head(path, n)
        out.per_file[path] = len(got)
        out.complete &= complete
        records += [data for _, data in got]
        where += [(path, i, offset) for i, (offset, _) in enumerate(got)]
    out.rows = len(records)
    if not records:
        return out
    _check_kind(records, where)
    batch = _decode(records, where)
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        out.columns[name] = [scalar_if_single(column)]
    return out


def _head(path: str, n: int) -> tuple[list[tuple[int, bytes]], bool]:
    """The first `n` (offset, record) of one file, and whether that was all of it."""
    got: list[tuple[int, bytes]] = []
    compression = compression_of(path)
    frames = read_file(path, compression)
    try:
        for offset, data in frames:
            if len(got) == n:
                return got, False
            got.append((offset, data))
    except VerifyError as e:
        raise BadInputError(f"{e}; fix the file (or leave it out) before inferring a "
                            "schema") from e
    except (zlib.error, EOFError, OSError) as e:
        raise BadInputError(f"{path}: cannot read {compression} TFRecord data after record "
                            f"{len(got)} ({fs.first_line(e)}); fix the file (or leave it out) "
                            "before inferring a schema") from e
    finally:
        frames.close()
    return got, True


def _where(where: tuple[str, int, int]) -> str:
    path, index, offset = where
    return f"{path}: record {index} (byte {offset})"


def _check_kind(records: list[bytes], where: list[tuple[str, int, int]]) -> None:
    """Refuse SequenceExamples and records that are not Example protos at all, cheaply: one
    vectorised walk of the top-level protobuf fields (etl.contract.record_check)."""
    fields, bad = top_level_fields(pa.array(records, pa.large_binary()))
    if bad:
        row = min(bad)
        raise BadInputError(f"{_where(where[row])}: {bad[row]}; infer-schema reads TFRecord "
                            "files of tf.train.Example")
    lists = np.flatnonzero(fields[:, 2] > 0)
    if len(lists):
        raise ConfigError(f"{where[int(lists[0])][0]}: {SEQUENCE_REFUSED}")


def _decode(records: list[bytes], where: list[tuple[str, int, int]]) -> pa.RecordBatch:
    """All sampled records as one Arrow batch; on failure, the first record that makes the
    prefix fail (a record that does not parse, or a feature whose list type differs from
    earlier records') named with the decoder's reason."""
    from tfx_bsl.coders import example_coder  # noqa: PLC0415

    def decode(k: int) -> pa.RecordBatch | str:
        try:  # a decoder that failed keeps broken state: a fresh one per attempt
            return example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(records[:k])
        except RuntimeError as e:
            return str(e)

    whole = decode(len(records))
    if isinstance(whole, pa.RecordBatch):
        return whole
    lo, hi = 0, len(records)  # decode(lo) works, decode(hi) fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if isinstance(decode(mid), str):
            hi = mid
        else:
            lo = mid
    reason = decode(hi)
    reason = reason.split(": ", 1)[-1] if isinstance(reason, str) else whole
    hint = ("a schema holds one list type per feature" if "wrong type" in reason
            else "not a valid serialized tf.train.Example")
    raise BadInputError(f"{_where(where[hi - 1])}: {reason} ({hint}); fix the file (or leave "
                        "it out) before inferring a schema")


def scalar_if_single(column: pa.Array) -> pa.Array:
    """A list column whose every present list holds exactly one value -> those values (null
    where the feature is absent); any other column unchanged."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return column
    lengths = pc.list_value_length(column)
    present = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), bool)
    counts = np.asarray(lengths.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    if not present.any() or (counts[present] != 1).any():
        return column
    values = pc.list_flatten(column)  # absent rows contribute nothing
    index = np.zeros(len(column), np.int64)
    index[present] = np.arange(int(present.sum()))
    return values.take(pa.array(index, mask=~present))
