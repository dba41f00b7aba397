"""A database column's declared type -> one schema feature (`infer-schema --sql-url`).

A database says what each column holds (the Arrow type its driver gives), so nothing is guessed
from the values: int2/int4/int8 keep their width, float8 is float64 with `encoding: raw` (the
only exact float64: tf.train.FloatList rounds to float32), text and bytea are bytes, bool is
int64 0/1 (as a `format: sql` run stores it), date and timestamp are `dtype: date` and
`dtype: timestamp` with the column's unit, arrays are shape [-1] lists, and numeric(p, 0) with
p <= 18 is int64 while any other numeric is its exact decimal text (bytes), as the Parquet
inference does. The sample only says where NULLs are: they decide `default:`/`required:` the way
etl.tools.infer.guess decides them for missing values, and are counted for the summary.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.contract.columns import nest
from etl.tools.infer.guess import (
    Guess,
    Observed,
    Unsupported,
    feature_name,
    observe_numbers,
)

_INT_RANGE = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
              "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
              "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1)}


def declared(column: str, values: pa.Array) -> tuple[Guess, int]:
    """The feature for one query column and how many sampled rows hold NULL there."""
    g = Guess(feature_name(column), {}, column=column)
    if g.name != column:
        g.spec["source"] = column
    n = len(values)
    nulls = int(values.null_count)
    t = values.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        _list(g, values, nulls)
        return g, nulls
    dtype, note = _leaf_dtype(t)
    g.spec["dtype"] = dtype
    if dtype in ("date", "timestamp"):
        g.kind = dtype
        if dtype == "timestamp":
            g.spec["unit"] = t.unit
    else:
        g.spec["shape"] = []
    if dtype == "float64":
        g.spec["encoding"] = "raw"
        note = ("float8: dtype float64 with encoding raw, exact (a FloatList would round it to "
                "float32); dtype float32 halves the bytes if that precision is enough")
    if note:
        g.notes.append(note)
    present = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
    if dtype == "bytes":
        g.kind = "bytes"
        g.observed = Observed(n, nulls, n - nulls)
        _optional(g, nulls, n, "", "is its value for them")
        return g, nulls
    if dtype in ("date", "timestamp"):
        _required(g, nulls, n, "")
        return g, nulls
    numbers = _numbers(values, present)
    g.kind = "number"
    g.observed = observe_numbers(numbers, n, nulls)
    if dtype.startswith("float"):
        bad = int((~np.isfinite(numbers)).sum())
        if bad:
            g.spec["allow_nan"] = True
            g.notes.append(f"NaN/Inf in {bad} sampled values: allow_nan: true keeps them; "
                           "without it such records are rejected")
        if g.spec.get("encoding") == "raw":
            _required(g, nulls, n, f" (encoding raw cannot be optional; COALESCE({column}, "
                      "'NaN') in the query with allow_nan: true keeps those rows)")
        else:
            if nulls:
                g.spec["allow_nan"] = True
            _optional(g, nulls, n, float("nan"), "(with allow_nan: true) marks them, so they "
                      "cannot pass for a measurement")
        return g, nulls
    low = g.observed.low
    default = -1 if low is None or low >= 0 else int(low) - 1
    if default < _INT_RANGE.get(dtype, (-(2**63), 0))[0]:
        _required(g, nulls, n, f" (no {dtype} lies below every sampled value)")
    else:
        _optional(g, nulls, n, default, "lies below every sampled value (a marker for "
                  "'missing', not a measurement)")
    return g, nulls


def _leaf_dtype(t: pa.DataType) -> tuple[str, str]:
    """The schema dtype of a declared scalar type, and a review note when it is a choice."""
    if pa.types.is_boolean(t):
        return "int64", "boolean column: stored as int64 0/1 (as a format: sql run reads it)"
    if pa.types.is_integer(t):
        name = str(t)
        if name in ("uint32", "uint64"):
            return "int64", f"{name} column: int64 (a value beyond int64 is rejected)"
        return name, ""
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "float32", ""
    if pa.types.is_float64(t):
        return "float64", ""
    if pa.types.is_decimal(t):
        if t.scale == 0 and t.precision <= 18:
            return "int64", f"{t}: whole numbers, stored exactly as int64"
        return "bytes", (f"{t}: stored as its exact decimal text (a float would round most "
                         "decimals)")
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytes", ""
    if pa.types.is_date32(t):
        return "date", ""
    if pa.types.is_timestamp(t):
        zone = (f"time zone {t.tz}: converted to UTC" if t.tz else
                "no time zone: read as UTC (set timezone: if it is local time)")
        return "timestamp", f"{t}, {zone}"
    raise Unsupported(f"Arrow type {t}")


def _numbers(values: pa.Array, present: np.ndarray) -> np.ndarray:
    t = values.type
    if pa.types.is_boolean(t):
        values = values.cast(pa.int64())
    elif pa.types.is_decimal(t):
        values = values.cast(pa.int64())
    kind = np.float64 if pa.types.is_floating(t) else np.int64
    if pa.types.is_uint64(t) and len(values) and pc.max(values).as_py() >= 2**63:
        raise Unsupported("uint64 values beyond int64")
    out = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False), kind)
    return out[present]


def _list(g: Guess, values: pa.Array, nulls: int) -> None:
    """An array column: shape [-1] of its element type; a NULL array reads as an empty
    list (required: false). float8[] needs a fixed length (encoding raw)."""
    nested = nest(values, len(values))
    if len(nested.levels) > 1:
        raise Unsupported("nested arrays (only one dimension may vary)")
    leaves = nested.leaves
    if isinstance(leaves, np.ndarray):
        leaves = pa.array(leaves)
    if leaves.null_count:
        raise Unsupported("arrays holding NULL elements (the schema has no missing element)")
    dtype, _ = _leaf_dtype(values.type.value_type)
    n = len(values)
    g.spec["dtype"] = dtype
    if dtype == "float64":
        counts = np.diff(nested.levels[0])[nested.row_valid]
        if nulls or not len(counts) or (counts != counts[0]).any():
            raise Unsupported("float8 arrays of varying length: exact float64 needs encoding "
                              "raw with a fixed shape; cast to real[] for float32 lists")
        g.spec.update(shape=[int(counts[0])], encoding="raw")
        g.notes.append(f"shape [{int(counts[0])}] fixed: every sampled array holds that many "
                       "float8 values (encoding raw keeps float64 exact); another length is "
                       "rejected as wrong_shape")
        return
    g.spec["shape"] = [-1]
    g.kind = "list"
    g.observed = Observed(n, nulls, len(leaves))
    if nulls:
        g.spec["required"] = False
        g.notes.append(f"NULL in {nulls} of {n} sampled rows: required: false reads them as an "
                       "empty list")


def _optional(g: Guess, nulls: int, rows: int, default: object, why: str) -> None:
    if not nulls:
        return
    g.spec["default"] = default
    g.fills = f"fills {nulls} of {rows} sampled values"
    g.notes.append(f"NULL in {nulls} of {rows} sampled rows: default {default!r} {why}; remove "
                   "the default to reject such records as missing_required instead")


def _required(g: Guess, nulls: int, rows: int, why: str) -> None:
    if not nulls:
        return
    g.unfilled = nulls
    g.notes.append(f"NULL in {nulls} of {rows} sampled rows: required, so a run rejects such "
                   f"records as missing_required (and counts them){why}")
