"""Encoder: a batch of raw records -> serialized tf.train.Example / SequenceExample protos.

Whole batches go through column conversion (etl.contract.columns: NumPy/Arrow, no per-record Python)
and then etl.formats.proto_wire's deterministic vectorised serialiser (see there why not tfx_bsl's encoder,
and the figures). No TensorFlow import on this path. Bad records are returned as
`BadRecord` values with a reason code, the row's position (1-based line for text sources,
record index and byte offset for binary ones), the feature, and the expected and found
value; the good ones go on. Serialized records above `max_record_bytes` are rejected as
`oversized_record` here, before they reach the shuffle.

Missing values are counted per feature (`EncodedBatch.missing`): how many rows had no value,
and how many of the records written hold the feature's `default:` in its place, so the
manifest and the run summary can say what was filled (a default is never silent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl.base.errors import BadRecord, ConfigError, RecordError, quote
from etl.base.units import DEFAULT_MAX_RECORD_BYTES
from etl.contract import columns as cols
from etl.contract.schema import Feature, Schema
from etl.formats import compiled_examples, proto_wire
from etl.formats.jit import COMPILED_FROM

Batch = Mapping[str, Any] | pa.RecordBatch | pa.Table


@dataclass
class EncodedBatch:
    """Serialized good records (input order, one Arrow column), their row indexes, and the
    rejected rows."""

    array: pa.LargeBinaryArray
    rows: np.ndarray
    bad: list[BadRecord] = field(default_factory=list)
    # each feature's stored lists for every row of the batch (row i of `array` is row
    # `rows[i]` here): what the records hold, typed, for statistics without a decode
    storage: dict[str, pa.Array] = field(default_factory=dict)
    # feature -> {"missing": rows without a value, "defaulted": written records holding the
    # default instead (an empty list for an optional feature without one)}; only features
    # with a missing value
    missing: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def records(self) -> list[bytes]:
        """The records as Python bytes, for per-record callers (tests, one-off encodes)."""
        return self.array.to_pylist()


def batch_columns(batch: Batch) -> tuple[dict[str, Any], int]:
    """Any accepted batch form -> (column dict, row count)."""
    if isinstance(batch, (pa.RecordBatch, pa.Table)):
        return {name: batch.column(name) for name in batch.schema.names}, batch.num_rows
    columns = dict(batch)
    lengths = {name: len(c) for name, c in columns.items()}
    if len(set(lengths.values())) > 1:
        raise RecordError(f"batch columns differ in length: {lengths}")
    return columns, next(iter(lengths.values()), 0)


class Encoder:
    """Encodes batches for one schema. Cheap to build; holds no TensorFlow objects.

    `max_record_bytes`: a serialized record above it is rejected as `oversized_record`
    (a shard group record must stay well under protobuf's 2 GiB; tensorflow/tfx#2014).
    """

    def __init__(self, schema: Schema, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES):
        self.schema = schema
        self.max_record_bytes = int(max_record_bytes)

    def compile_ahead(self) -> bool:
        """Compile the Example loop this schema's blocks will use (every feature of a fixed
        shape), before the first block asks for it (etl.formats.compiled_examples)."""
        features = self.schema.context
        if self.schema.kind != "example" or not all(f.fixed for f in features):
            return False
        return compiled_examples.compile_layout([(f.name, f.storage, f.value_count)
                                                 for f in features])

    def encode(
        self, batch: Batch, source: str = "", positions: np.ndarray | None = None,
        lines: np.ndarray | None = None, offsets: np.ndarray | None = None,
    ) -> EncodedBatch:
        """Encode one batch. Rejected rows are named by `source` and, per row, `lines`
        (1-based physical lines, text formats) or else `positions` (0-based record index in
        the file; the batch row when absent) with `offsets` (byte offsets, binary formats).
        Each rejected row is reported once, with its first reason."""
        columns, n = batch_columns(batch)
        bad: dict[int, tuple[str, str, str]] = {}
        storage: dict[str, pa.Array] = {}
        absent: dict[str, np.ndarray] = {}
        for f in self.schema.features:
            try:
                converted = cols.to_storage(f, columns, n)
            except ConfigError as e:  # a typed column no rule converts: refused, named
                raise ConfigError(f"{source}: {e}" if source else str(e)) from None
            storage[f.name] = converted.storage
            if converted.missing is not None and converted.missing.any():
                absent[f.name] = converted.missing
            for row, (code, reason) in converted.bad.items():
                bad.setdefault(row, (f.name, code, reason))
        good = np.ones(n, bool)
        if bad:
            good[list(bad)] = False
        rows = np.flatnonzero(good)
        records = self._serialize(storage, rows, n) if len(rows) else proto_wire.binary(b"", np.zeros(1))
        if len(rows):
            records, rows = self._drop_oversized(records, rows, bad)
        rejected = [
            _bad_record(source, r, name, code, reason, positions, lines, offsets,
                        _row_preview(columns, r))
            for r, (name, code, reason) in sorted(bad.items())
        ]
        return EncodedBatch(records, rows, rejected, storage, self._missing(absent, rows))

    def _missing(self, absent: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, dict[str, int]]:
        """Per feature: rows without a value, and written records (`rows`) holding its default."""
        out: dict[str, dict[str, int]] = {}
        for name, mask in absent.items():
            f = self.schema.feature(name)
            # optional features fill a missing value: the default, or an empty list
            filled = int(mask[rows].sum()) if not f.required and len(rows) else 0
            out[name] = {"missing": int(mask.sum()), "defaulted": filled}
        return out

    def _drop_oversized(self, records: pa.LargeBinaryArray, rows: np.ndarray,
                        bad: dict[int, tuple[str, str, str]]) -> tuple[pa.LargeBinaryArray, np.ndarray]:
        """Reject serialized records over `max_record_bytes` (lengths from the Arrow offsets,
        one vectorised comparison on the good path)."""
        ends = np.frombuffer(records.buffers()[1], np.int64)[records.offset: records.offset
                                                             + len(records) + 1]
        sizes = np.diff(ends)
        over = sizes > self.max_record_bytes
        if not over.any():
            return records, rows
        for i in np.flatnonzero(over).tolist():
            bad[int(rows[i])] = ("", "oversized_record",
                                 f"serialized record is {int(sizes[i])} bytes, over "
                                 f"max_record_bytes {self.max_record_bytes}")
        keep = ~over
        return records.filter(pa.array(keep)), rows[keep]

    def encode_records(self, records: Iterable[Mapping[str, Any]], source: str = "") -> EncodedBatch:
        """Per-record entry point (generators): dicts are gathered into one columnar batch."""
        rows = list(records)
        names = {k for r in rows for k in r}
        columns = {k: [r.get(k) for r in rows] for k in names}
        return self.encode(columns, source=source)

    def encode_one(self, record: Mapping[str, Any]) -> bytes:
        """One record -> serialized proto; raises RecordError naming the feature if invalid."""
        out = self.encode_records([record])
        if out.bad:
            raise RecordError(out.bad[0].message())
        return out.records[0]

    def _serialize(self, storage: dict[str, pa.Array], rows: np.ndarray, n: int) -> pa.LargeBinaryArray:
        take = None if len(rows) == n else pa.array(rows)

        def columns(features: tuple[Feature, ...]) -> list[tuple[str, str, pa.Array]]:
            return [(f.name, f.storage, storage[f.name] if take is None
                     else storage[f.name].take(take)) for f in features]

        if self.schema.kind == "example":
            context = columns(self.schema.context)
            # a big block in a layout the compiled loop writes: one pass, the same bytes
            encoded = compiled_examples.serialize(context) if len(rows) >= COMPILED_FROM else None
            return encoded if encoded is not None else proto_wire.serialize_examples(context)
        return proto_wire.serialize_sequence_examples(columns(self.schema.context),
                                                columns(self.schema.sequence), len(rows))


def _bad_record(source: str, row: int, feature: str, code: str, reason: str,
                positions: np.ndarray | None, lines: np.ndarray | None,
                offsets: np.ndarray | None, raw: str) -> BadRecord:
    """A rejected batch row, named by its line (text formats) or record index and byte."""
    if lines is not None:
        return BadRecord(source=source, code=code, reason=reason, line=int(lines[row]),
                         feature=feature, raw=raw)
    record = int(positions[row]) if positions is not None else row
    byte = int(offsets[row]) if offsets is not None else None
    return BadRecord(source=source, code=code, reason=reason, record=record, byte=byte,
                     feature=feature, raw=raw)


def _row_preview(columns: Mapping[str, Any], row: int, limit: int = 200) -> str:
    """A short text of the offending input row for the dead-letter output."""
    parts = []
    for name, col in columns.items():
        try:
            value = col[row]
            if isinstance(value, pa.Scalar):
                value = value.as_py()
            if isinstance(value, np.ndarray):
                value = f"<{value.dtype}{list(value.shape)}>"
        except (IndexError, TypeError, KeyError):
            value = "?"
        parts.append(f"{name}={quote(value, limit)}")
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."
