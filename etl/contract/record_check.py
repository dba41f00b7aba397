"""Check already-serialized records (a TFRecord source) against the schema before they are
written, so nothing `make_dataset` cannot parse is ever published.

Why here and not at read time: records from a TFRecord source are passed through unchanged,
so the encoder never sees them. Without this check a SequenceExample under an Example schema,
or a float_list where the schema stores int64, passes the run and `verify` and only fails in
training.

How, all batch-wise (no TensorFlow import):
1. The top-level fields of every record are walked at once with NumPy (one pass per field,
   usually one or two): an Example has only field 1 (`features`); a SequenceExample has field
   1 (`context`) and field 2 (`feature_lists`). Wire format cannot tell an Example from a
   SequenceExample without feature lists (they are byte-identical), so the kind check is:
   field 2 present under an Example schema, or absent under a SequenceExample schema with a
   required sequence feature, or any other top-level field -> `schema_mismatch`.
2. tfx_bsl's C++ batch decoders (`ExamplesToRecordBatchDecoder`,
   `SequenceExamplesToRecordBatchDecoder`) parse the batch into Arrow lists, given a schema of
   the features' list types. They fail a whole batch when one record has a feature of the
   wrong list type or does not parse; then the batch is halved until the failing records are
   alone (log2(n) extra decodes per bad record), and each of those is a `schema_mismatch`
   naming the feature. (A decoder that failed once is left broken, so a fresh one is built.)
3. Value counts, presence and raw byte lengths are checked on the Arrow columns:
   `missing_required`, `wrong_shape`.
Measured (`python -m etl.contract.record_check`, one core): see the README.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.base.errors import BadRecord
from etl.contract.codec import Encoder
from etl.contract.schema import Feature, Schema, schema_from_dict
from etl.contract.tfmd import SEQUENCE_STRUCT, schema_to_tfmd
from etl.formats.proto_wire import BINARY, offsets_of

_WRONG_TYPE = re.compile(r"expected (\w+), found (\w+) for (?:sequence )?feature \"(.*)\"")
_MAX_FIELDS = 64  # top-level fields walked vectorised; records with more are walked one by one


class RecordChecker:
    """Checks batches of serialized records against one schema; holds a tfx_bsl decoder."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self.sequence = schema.kind == "sequence_example"
        self.needs_lists = any(f.required for f in schema.sequence)
        self._decoder: Any = None

    # ---- public -----------------------------------------------------------------------------
    def check(
        self, records: pa.Array, source: str, positions: np.ndarray, offsets: np.ndarray | None = None,
    ) -> tuple[np.ndarray, list[BadRecord]]:
        """(mask of the records that fit, BadRecords for the others) for a column of serialized
        records; `positions`/`offsets` are each record's index and byte offset in `source`."""
        records = records if records.type == BINARY else records.cast(BINARY)
        n = len(records)
        problems: dict[int, tuple[str, str, str]] = {}  # row -> (code, feature, reason)
        for row, reason in self._kind_problems(records).items():
            problems[row] = ("schema_mismatch", "", reason)
        rows = np.array([i for i in range(n) if i not in problems], np.int64) if problems \
            else np.arange(n)
        if len(rows):
            values = records.take(pa.array(rows)).to_pylist() if len(rows) < n else records.to_pylist()
            pieces, failed = self._decode(values, np.arange(len(rows)))
            for local, message in failed.items():
                problems[int(rows[local])] = _decode_problem(message, self.schema)
            for local_rows, batch in pieces:
                for local, problem in self._shape_problems(batch).items():
                    problems.setdefault(int(rows[local_rows[local]]), problem)
        keep = np.ones(n, bool)
        bad: list[BadRecord] = []
        for row in sorted(problems):
            code, feature, reason = problems[row]
            keep[row] = False
            bad.append(BadRecord(source, code, reason, record=int(positions[row]),
                                 byte=None if offsets is None else int(offsets[row]),
                                 feature=feature))
        return keep, bad

    # ---- 1. proto kind ----------------------------------------------------------------------
    def _kind_problems(self, records: pa.LargeBinaryArray) -> dict[int, str]:
        fields, bad = top_level_fields(records)
        out = dict(bad)
        has_lists = fields[:, 2] > 0
        if not self.sequence:
            for row in np.flatnonzero(has_lists).tolist():
                out.setdefault(row, "a SequenceExample (it has feature_lists); the schema is "
                                    "kind example")
        elif self.needs_lists:
            for row in np.flatnonzero(~has_lists).tolist():
                out.setdefault(row, "no feature_lists (an Example, not a SequenceExample); the "
                                    "schema is kind sequence_example")
        return out

    # ---- 2. batch decode --------------------------------------------------------------------
    def _decoder_for(self) -> Any:
        if self._decoder is None:

            # the dataset's own schema.pbtxt: one TFMD export, derived from the features
            tfmd = schema_to_tfmd(self.schema).SerializeToString()
            if self.sequence:
                from tfx_bsl.coders import sequence_example_coder  # noqa: PLC0415

                self._decoder = sequence_example_coder.SequenceExamplesToRecordBatchDecoder(
                    SEQUENCE_STRUCT, tfmd)
            else:
                from tfx_bsl.coders import example_coder  # noqa: PLC0415

                self._decoder = example_coder.ExamplesToRecordBatchDecoder(tfmd)
        return self._decoder

    def _decode(
        self, values: list[bytes], rows: np.ndarray
    ) -> tuple[list[tuple[np.ndarray, pa.RecordBatch]], dict[int, str]]:
        """Decode `values[rows]`; a failing batch is halved until the failing records are
        alone. -> ([(rows, batch)], {row: decoder message})."""
        decoder = self._decoder_for()
        try:
            return [(rows, decoder.DecodeBatch([values[i] for i in rows.tolist()]))], {}
        except RuntimeError as e:
            # a decoder that failed keeps half-built state ("FinishFeature() must be called
            # before DecodeFeature()..." on every later batch): start from a fresh one
            self._decoder = None
            if len(rows) == 1:
                return [], {int(rows[0]): str(e)}
        half = len(rows) // 2
        a, fa = self._decode(values, rows[:half])
        b, fb = self._decode(values, rows[half:])
        return a + b, {**fa, **fb}

    # ---- 3. presence and shapes -------------------------------------------------------------
    def _shape_problems(self, batch: pa.RecordBatch) -> dict[int, tuple[str, str, str]]:
        out: dict[int, tuple[str, str, str]] = {}
        names = batch.schema.names
        for f in self.schema.context:
            if f.name in names:
                _check_lists(f, batch.column(names.index(f.name)), out)
        if self.sequence and SEQUENCE_STRUCT in names:
            struct = batch.column(names.index(SEQUENCE_STRUCT))
            for i, f in enumerate(self.schema.sequence):
                _check_steps(f, struct.field(i), out)
        return out


def _check_lists(f: Feature, col: pa.Array, out: dict[int, tuple[str, str, str]]) -> None:
    """One context feature: a list of values per record (null when absent)."""
    missing = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
    if f.required:
        for row in np.flatnonzero(missing).tolist():
            out.setdefault(row, ("missing_required", f.name, "required feature is missing"))
    counts = np.asarray(pc.fill_null(pc.list_value_length(col), 0).to_numpy(), np.int64)
    present = ~missing
    for row, reason in _count_problems(f, counts, present, col).items():
        out.setdefault(row, ("wrong_shape", f.name, reason))


def _check_steps(f: Feature, col: pa.Array, out: dict[int, tuple[str, str, str]]) -> None:
    """One sequence feature: a list (steps) of lists (values) per record."""
    missing = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
    if f.required:
        for row in np.flatnonzero(missing).tolist():
            out.setdefault(row, ("missing_required", f.name, "required feature list is missing"))
    steps = pc.list_flatten(col)
    if not len(steps):
        return
    parents = np.asarray(pc.list_parent_indices(col).to_numpy(), np.int64)
    counts = np.asarray(pc.fill_null(pc.list_value_length(steps), 0).to_numpy(), np.int64)
    step_problems = _count_problems(f, counts, np.ones(len(counts), bool), steps)
    for step, reason in sorted(step_problems.items()):
        row = int(parents[step])
        first = int(np.searchsorted(parents, row))
        out.setdefault(row, ("wrong_shape", f.name, f"step {step - first}: {reason}"))


def _count_problems(f: Feature, counts: np.ndarray, present: np.ndarray,
                    col: pa.Array) -> dict[int, str]:
    """Rows (records or steps) whose value count or raw byte length does not fit `f`."""
    out: dict[int, str] = {}
    shape = list(f.shape)
    if f.encoding != "values":
        for row in np.flatnonzero(present & (counts != 1)).tolist():
            out[row] = (f"{counts[row]} values; an encoding: {f.encoding} feature holds exactly "
                        f"one bytes value")
        if f.encoding == "raw":
            ones = present & (counts == 1)
            list_offsets = np.asarray(col.offsets.to_numpy(), np.int64)
            sizes = np.asarray(pc.binary_length(col.values).to_numpy(zero_copy_only=False), np.int64)
            first = list_offsets[:-1]
            size = np.where(ones, sizes[np.minimum(first, max(len(sizes) - 1, 0))]
                            if len(sizes) else 0, -1)
            for row in np.flatnonzero(ones & (size != f.raw_record_bytes)).tolist():
                out[row] = (f"raw value of {size[row]} bytes; shape {shape} of {f.dtype} needs "
                            f"{f.raw_record_bytes}")
        return out
    if f.fixed:
        for row in np.flatnonzero(present & (counts != f.value_count)).tolist():
            out[row] = f"{counts[row]} values; shape {shape} needs {f.value_count}"
    elif f.value_count > 1:
        for row in np.flatnonzero(present & (counts % f.value_count != 0)).tolist():
            out[row] = (f"{counts[row]} values do not make whole rows of shape "
                        f"{list(f.inner_shape)} ({f.value_count} values each)")
    return out


def _decode_problem(message: str, schema: Schema) -> tuple[str, str, str]:
    """A tfx_bsl decoder message for one record -> (code, feature, reason)."""
    found = _WRONG_TYPE.search(message)
    if found:
        expected, got, name = found.groups()
        return ("schema_mismatch", name, f"has a {got}; the schema stores it as {expected}")
    kind = "tf.train.Example" if schema.kind == "example" else "tf.train.SequenceExample"
    return ("schema_mismatch", "", f"not a valid serialized {kind} "
                                   f"({message.split(': ', 1)[-1].strip()})")


def top_level_fields(records: pa.LargeBinaryArray) -> tuple[np.ndarray, dict[int, str]]:
    """Walk the top-level protobuf fields of every record at once.

    -> (counts (n, 3): occurrences of field 1 and 2 per record in columns 1 and 2, and
    {row: reason} for records with another field, another wire type, or broken framing).
    """
    n = len(records)
    counts = np.zeros((n, 3), np.int64)
    bad: dict[int, str] = {}
    if not n:
        return counts, bad
    offs = offsets_of(records)
    buf = records.buffers()[2]
    data = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
    pos = offs[:-1].copy()
    ends = offs[1:]
    active = np.flatnonzero(pos < ends)
    for _ in range(_MAX_FIELDS):
        if not len(active):
            return counts, bad
        p = pos[active]
        tag = data[p].astype(np.int64)
        length, used, ok = _varints(data, p + 1, ends[active])
        nxt = p + 1 + used + length
        known = (tag == 0x0A) | (tag == 0x12)
        fits = ok & (length <= ends[active] - p) & (nxt <= ends[active])
        for i in np.flatnonzero(~known).tolist():
            t = int(tag[i])
            bad[int(active[i])] = (f"top-level field {t >> 3} (wire type {t & 7}): not a "
                                   f"tf.train.Example/SequenceExample")
        for i in np.flatnonzero(known & ~fits).tolist():
            bad[int(active[i])] = (f"top-level field {int(tag[i]) >> 3} runs past the end of "
                                   f"the record: not a valid serialized proto")
        good = known & fits
        rows = active[good]
        counts[rows, tag[good] >> 3] += 1
        pos[rows] = nxt[good]
        active = rows[pos[rows] < ends[rows]]
    for row in active.tolist():  # more fields than the vectorised walk takes: one by one
        extra = _walk_one(bytes(data[pos[row] : ends[row]]))
        if isinstance(extra, str):
            bad[row] = extra
        else:
            counts[row] += extra
    return counts, bad


def _varints(data: np.ndarray, at: np.ndarray, ends: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, bytes used, complete) of the varint at each offset in `at`, not reading past
    `ends`; values above 2**62 count as incomplete (no record is that long)."""
    value = np.zeros(len(at), np.int64)
    used = np.zeros(len(at), np.int64)
    done = np.zeros(len(at), bool)
    last = max(len(data) - 1, 0)
    for k in range(9):
        q = at + k
        live = ~done & (q < ends)
        if not live.any():
            break
        b = data[np.minimum(q, last)].astype(np.int64)
        value = np.where(live, value | ((b & 0x7F) << (7 * k)), value)
        stop = live & (b < 0x80)
        used[stop] = k + 1
        done |= stop
    return value, used, done


def _walk_one(record: bytes) -> np.ndarray | str:
    counts = np.zeros(3, np.int64)
    pos = 0
    while pos < len(record):
        tag = record[pos]
        if tag not in (0x0A, 0x12):
            return f"top-level field {tag >> 3} (wire type {tag & 7}): not a tf.train.Example"
        length, shift, pos = 0, 0, pos + 1
        while pos < len(record) and record[pos] & 0x80 and shift < 63:
            length |= (record[pos] & 0x7F) << shift
            shift, pos = shift + 7, pos + 1
        if pos >= len(record):
            return "a top-level field runs past the end of the record: not a valid proto"
        length |= record[pos] << shift
        pos += 1 + length
        if pos > len(record):
            return "a top-level field runs past the end of the record: not a valid proto"
        counts[tag >> 3] += 1
    return counts


def _bench(n: int = 100_000) -> None:
    """`python -m etl.contract.record_check`: records/s of `check` on n small Examples (all good)."""
    import time  # noqa: PLC0415


    schema = schema_from_dict({"name": "bench", "features": {
        "id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": [4]},
        "tag": {"dtype": "bytes", "shape": []}, "tokens": {"dtype": "int64", "shape": [-1]}}})
    rng = np.random.default_rng(0)
    column = Encoder(schema).encode({
        "id": np.arange(n), "x": rng.random((n, 4), np.float32), "tag": [b"abc"] * n,
        "tokens": [list(range(i % 7)) for i in range(n)]}).array
    checker = RecordChecker(schema)
    checker.check(column[:10], "bench", np.arange(10))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        keep, bad = checker.check(column, "bench", np.arange(n))
        best = min(best, time.perf_counter() - t)
    assert keep.all() and not bad
    print(f"{n} Examples of {len(column[0].as_py())} bytes: {best:.3f} s, {n / best:,.0f} records/s")


if __name__ == "__main__":
    _bench()
