"""Vectorised conversion of one raw input column into a feature's stored lists.

A column arrives as whatever a source produced: a NumPy block (n, *shape), an Arrow array
(scalars, strings, nested lists) or a Python list from a generator. It leaves as an Arrow
LargeList (LargeList-of-LargeList for sequence features) of int64 / float32 / binary, the
layout tfx_bsl's C++ encoder and our wire encoder consume, plus the rows that failed with
a reason. No per-record Python work on the good path.

Every rejection carries a reason code from `etl.base.errors.REASONS` with its text: a `Why` is
the pair (code, text), so the encoder can build `BadRecord`s and the manifest count by code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.base import heap
from etl.base.errors import ConfigError, quote
from etl.contract import dates
from etl.contract.images import ImageProblem, encode_pixels, fit_image, image_header_problems
from etl.contract.schema import text_number_type
from etl.formats.kinds import STORAGE_KINDS

if TYPE_CHECKING:
    from etl.contract.schema import Feature

Why = tuple[str, str]  # (reason code from etl.base.errors.REASONS, readable detail)
MISSING: Why = ("missing_required", "missing value")


@dataclass
class Nested:
    """A column split into leaf values and list offsets (outermost level first)."""

    leaves: pa.Array | np.ndarray
    levels: list[np.ndarray]  # offsets arrays, each len(parent)+1
    row_valid: np.ndarray  # bool per row: False where the row itself is null/missing
    # rows without a value where row_valid also drops bad ones (packed columns); None: ~row_valid
    absent: np.ndarray | None = None


@dataclass
class Converted:
    """A feature's storage for a batch, the rows that could not be converted, and the rows
    whose value was missing (filled by the default, stored empty, or rejected)."""

    storage: pa.Array
    bad: dict[int, Why]
    missing: np.ndarray | None = None


class TypeRefused(Exception):
    """A typed column (Parquet, pandas) whose Arrow type no rule converts to the feature's
    dtype: the whole column is refused in one line (to_storage names the column)."""


def as_arrow(col: Any) -> pa.Array | np.ndarray:
    """Normalise a source column: NumPy blocks stay NumPy, the rest becomes one Arrow array."""
    if isinstance(col, np.ndarray):
        if col.dtype == object:
            return _objects_to_arrow(list(col))
        return col
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks()
    if isinstance(col, pa.Array):
        return col
    return _objects_to_arrow(list(col))


def _objects_to_arrow(items: list[Any], feature: Feature | None = None,
                      flag: Any = None) -> pa.Array | np.ndarray:
    if items and all(isinstance(x, np.ndarray) for x in items):
        shapes = {x.shape for x in items}
        if len(shapes) == 1:
            return np.stack(items)
        return pa.array([x.reshape(-1).tolist() for x in items])
    items = [x.tolist() if isinstance(x, np.ndarray) else x for x in items]
    try:
        return pa.array(items)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    if feature is not None and flag is not None:
        # Lists mixed with single values (JSON `"tokens": "oops"` among lists): reject the
        # odd rows as wrong_type, so the rest of the batch converts as usual.
        is_list = np.array([isinstance(x, (list, tuple)) for x in items], bool)
        is_value = np.array([x is not None for x in items], bool) & ~is_list
        if is_list.any() and is_value.any():
            if feature.is_sequence or len(feature.shape) > 0 and feature.encoding == "values":
                want_list = True
            elif feature.shape == () and feature.encoding == "values":
                want_list = False
            else:  # images and raw blobs come as one blob or as a list of numbers
                want_list = int(is_list.sum()) >= int(is_value.sum())
            odd = is_value if want_list else is_list
            what = "a list of values" if want_list else "a single value"
            rows = np.flatnonzero(odd)
            flag(rows, [("wrong_type", f"expected {what} for shape {list(feature.shape)}, "
                                       f"found {quote(items[r], 60)}") for r in rows.tolist()])
            items = [None if o else x for x, o in zip(items, odd.tolist(), strict=True)]
            try:
                return pa.array(items)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                pass
    # Mixed types (e.g. "3" and 3): keep them as text so the conversion reports the bad ones.
    return pa.array([None if x is None else _as_text(x) for x in items], pa.large_string())


def _column(feature: Feature, col: Any, flag: Any) -> pa.Array | np.ndarray:
    """`as_arrow`, with rows of the wrong kind (list vs single value) flagged, not stringified."""
    if isinstance(col, (pa.Array, pa.ChunkedArray)) or (
            isinstance(col, np.ndarray) and col.dtype != object):
        return as_arrow(col)
    return _objects_to_arrow(list(col), feature, flag)


def _as_text(x: Any) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)


def nest(col: pa.Array | np.ndarray, n: int) -> Nested:
    """Peel list levels off a column; NumPy blocks (n, a, b, ...) have one implicit level."""
    if isinstance(col, np.ndarray):
        if col.ndim == 1:
            return Nested(col, [], np.ones(n, bool))
        per_row = int(np.prod(col.shape[1:], dtype=np.int64))
        return Nested(
            col.reshape(-1), [np.arange(n + 1, dtype=np.int64) * per_row], np.ones(n, bool)
        )
    row_valid = (np.ones(len(col), bool) if not col.null_count  # no bitmap to convert
                 else ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool))
    levels: list[np.ndarray] = []
    arr = col
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(
        arr.type
    ):
        if pa.types.is_fixed_size_list(arr.type):
            size = arr.type.list_size
            offsets = np.arange(len(arr) + 1, dtype=np.int64) * size + arr.offset * size
        else:
            offsets = np.asarray(arr.offsets.to_numpy(), np.int64)
        values = arr.values
        start, stop = int(offsets[0]), int(offsets[-1])
        levels.append(offsets - start)
        arr = values.slice(start, stop - start)
    return Nested(arr, levels, row_valid)


def compose(levels: list[np.ndarray], count: int) -> np.ndarray:
    """Offsets from rows straight to leaves through every list level."""
    if not levels:
        return np.arange(count + 1, dtype=np.int64)
    out = levels[0]
    for inner in levels[1:]:
        out = inner[out]
    return out


def rows_of(leaf_mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Row index of each True leaf."""
    return np.searchsorted(offsets, np.flatnonzero(leaf_mask), side="right") - 1


# ---- leaf conversion ----------------------------------------------------------------------
def convert_leaves(feature: Feature, leaves: pa.Array | np.ndarray) -> tuple[Any, np.ndarray, Any]:
    """Leaf values -> (storage values, bad mask, reason for the bad ones).

    The reason is one `Why`, or an object array with one `Why` per bad leaf (naming the
    value found there; None reads as a missing value); `leaf_reasons` picks them.
    """
    if isinstance(leaves, pa.Array) and pa.types.is_dictionary(leaves.type):
        leaves = leaves.dictionary_decode()  # pandas categoricals: their values
    if feature.time is not None:
        return dates.to_epoch(feature.time, leaves)
    if feature.vocabulary:
        return _lookup(feature, leaves)
    if feature.dtype == "bytes":
        if isinstance(leaves, pa.Array):
            t = leaves.type
            if pa.types.is_decimal(t) or dates.is_temporal(t):
                # the exact decimal text ("1.50"); ISO text of dates and times (Arrow's:
                # "2010-01-01", "2010-01-01 00:00:01.250Z" for a zoned timestamp)
                return _to_binary(leaves.cast(pa.large_string()))
            if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_union(t):
                raise TypeRefused(f"is {t}, not text for dtype bytes: read its fields as "
                                  "columns of their own, or convert it in the source")
        return _to_binary(leaves)
    if feature.encoding in ("png", "jpeg") and not _numeric(leaves):
        return _to_binary(leaves)
    if feature.encoding == "raw" and not _numeric(leaves) and not _is_text(leaves):
        # blobs (IDX, npy rows) are the value's bytes already; text ("7601" in a CSV) is
        # parsed like `values` and stored as the number's little-endian bytes
        return _to_binary(leaves)
    return _to_number(feature, leaves)


def _is_text(leaves: Any) -> bool:
    if isinstance(leaves, np.ndarray):
        return leaves.dtype.kind == "U"
    return pa.types.is_string(leaves.type) or pa.types.is_large_string(leaves.type)


def _numeric(leaves: Any) -> bool:
    if isinstance(leaves, np.ndarray):
        return leaves.dtype.kind in "biuf"
    t = leaves.type  # decimals too: numbers (exact or refused), never blobs of their text
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t))


def _to_binary(leaves: Any) -> tuple[pa.Array, np.ndarray, str]:
    if isinstance(leaves, np.ndarray):
        leaves = pa.array([_as_bytes(x) for x in leaves.tolist()], pa.large_binary())
    if pa.types.is_string(leaves.type) or pa.types.is_large_string(leaves.type):
        leaves = leaves.cast(pa.large_utf8()).view(pa.large_binary())
    elif not pa.types.is_large_binary(leaves.type):
        try:
            leaves = leaves.cast(pa.large_binary())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            leaves = pa.array([_as_bytes(x) for x in leaves.to_pylist()], pa.large_binary())
    bad = np.asarray(leaves.is_null().to_numpy(zero_copy_only=False), bool)
    return leaves, bad, MISSING


def _as_bytes(x: Any) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    return str(x).encode()


def _lookup(feature: Feature, leaves: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    if isinstance(leaves, np.ndarray):
        leaves = pa.array([_as_text(x) for x in leaves.tolist()], pa.large_string())
    if not (pa.types.is_string(leaves.type) or pa.types.is_large_string(leaves.type)):
        leaves = leaves.cast(pa.large_string())
    ids = pc.index_in(leaves, value_set=pa.array(feature.vocabulary, leaves.type))
    missing = np.asarray(ids.is_null().to_numpy(zero_copy_only=False), bool)
    values = np.asarray(ids.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    real_null = np.asarray(leaves.is_null().to_numpy(zero_copy_only=False), bool)
    if feature.oov_id is not None:
        values = np.where(missing & ~real_null, feature.oov_id, values)
        missing = real_null
    expected = f"not in vocabulary (expected one of {_preview(feature.vocabulary)})"
    # nulls keep no reason of their own: leaf_reasons calls them "missing value"
    return values, missing, _name_values(missing & ~real_null, leaves, "not_in_vocabulary",
                                         "{value} " + expected)


def _preview(items: tuple[str, ...]) -> str:
    shown = ", ".join(repr(x) for x in items[:5])
    return shown + (f", ... {len(items)} labels" if len(items) > 5 else "")


def _to_number(feature: Feature, leaves: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    want = np.dtype(feature.dtype) if feature.dtype != "bytes" else np.dtype(object)
    null: np.ndarray | None = None  # NumPy leaves have no nulls
    if isinstance(leaves, np.ndarray):
        raw = leaves
        if raw.dtype.kind not in "biuf":
            return _to_number(feature, pa.array([_as_text(x) for x in raw.tolist()]))
    else:
        if pa.types.is_string(leaves.type) or pa.types.is_large_string(leaves.type) or pa.types.is_binary(
            leaves.type
        ) or pa.types.is_large_binary(leaves.type):
            return _parse_text(feature, leaves)
        if not leaves.null_count and (pa.types.is_integer(leaves.type)
                                      or pa.types.is_floating(leaves.type)):
            # no nulls: the values as they are (no mask converted, no copy filled)
            _check_number_type(feature, leaves.type)
            return _to_number(feature, np.asarray(leaves.to_numpy(zero_copy_only=False)))
        null = np.asarray(leaves.is_null().to_numpy(zero_copy_only=False), bool)
        if pa.types.is_decimal(leaves.type):
            return _from_decimal(feature, leaves, null)
        if pa.types.is_null(leaves.type):
            return np.zeros(len(leaves), want), null, MISSING
        _check_number_type(feature, leaves.type)
        if pa.types.is_boolean(leaves.type):
            leaves = leaves.cast(pa.int8())
        raw = np.asarray(leaves.fill_null(0).to_numpy(zero_copy_only=False))
    # NumPy leaves: a zeroed mask the OS maps lazily (np.zeros, or a copy of an all-False mask,
    # would write every byte of it: 51 MB per block of 64k MNIST-shaped images)
    bad = heap.lazy_zeros(len(raw)) if null is None else null.copy()
    # one shared reason until a value needs naming: a per-leaf object array for a block of
    # 64k images would be 50M Python slots
    reason: Any = MISSING
    if want.kind in "biu":
        values, reason = _integer_values(feature, want, raw, null, bad, reason)
    else:
        values, reason = _float_values(feature, want, raw, bad, reason)
    return values, bad, reason


def _integer_values(feature: Feature, want: np.dtype, raw: np.ndarray, null: np.ndarray | None,
                    bad: np.ndarray, reason: Any) -> tuple[np.ndarray, Any]:
    """Numbers as the declared integer (or bool) type: fractions, non-finite values and
    values out of its range marked in `bad` (in place) and zeroed; the values, the reason."""
    if raw.dtype.kind == "f":
        frac = ~np.isfinite(raw) | (raw != np.floor(raw))
        if null is not None:
            frac &= ~null
        if frac.any():
            bad |= frac
            reason = _name_values(frac, raw, "out_of_range", "expected an integer for "
                                  f"{feature.dtype}, found " + "{value}", reason)
        raw = np.where(frac, 0, raw)
    lo, hi = (0, 1) if want.kind == "b" else (int(np.iinfo(want).min), int(np.iinfo(want).max))
    # a source type that fits the declared one needs no check (uint8 images: 470M
    # comparisons saved on 600k MNIST-shaped records)
    fits = raw.dtype.kind in "biu" and np.can_cast(raw.dtype, want, "safe")
    if fits:
        out_of_range = None
    elif raw.dtype.kind == "u":
        out_of_range = raw > hi
    else:
        # `>= hi + 1`: float(2**63 - 1) rounds up to 2**63, which would pass `> hi`
        out_of_range = (raw < lo) | (raw >= hi + 1)
    if out_of_range is not None and out_of_range.any():
        bad |= out_of_range
        reason = _name_values(out_of_range, raw, "out_of_range", "value {value} out of "
                              f"range for {feature.dtype} [{lo}, {hi}]", reason)
        raw = np.where(out_of_range, 0, raw)
    values = raw.astype(np.int64 if feature.storage == "int64" else want, copy=False)
    return values, reason


def _float_values(feature: Feature, want: np.dtype, raw: np.ndarray, bad: np.ndarray,
                  reason: Any) -> tuple[np.ndarray, Any]:
    """Numbers as the declared float type: an overflow, or NaN/inf where the feature does not
    allow them, marked in `bad` (in place); the values, the reason."""
    with np.errstate(over="ignore", invalid="ignore"):
        values = raw.astype(want, copy=False)
    # one pass on the good path; the split into overflow / NaN only when something is off
    nonfinite = ~np.isfinite(values)
    if nonfinite.any():
        source_nonfinite = (nonfinite & ~np.isfinite(raw) if raw.dtype.kind == "f"
                            else np.zeros(len(raw), bool))
        overflow = nonfinite & ~source_nonfinite
        if overflow.any():
            bad |= overflow
            reason = _name_values(overflow, raw, "out_of_range",
                                  "value {value} overflows " + feature.dtype, reason)
        if source_nonfinite.any() and not feature.allow_nan:
            bad |= source_nonfinite
            reason = _name_values(source_nonfinite, raw, "nan_not_allowed",
                                  "value {value} is not finite (the feature does not "
                                  "say allow_nan: true)", reason)
    if feature.storage == "float":
        values = values.astype(np.float32, copy=False)
    return values, reason


def _parse_text(feature: Feature, leaves: pa.Array) -> tuple[np.ndarray, np.ndarray, Any]:
    """Text cells (CSV, JSON strings) -> numbers; unparsable cells are reported, not raised."""
    text = leaves.cast(pa.large_string()) if not pa.types.is_large_string(leaves.type) else leaves
    text = pc.utf8_trim_whitespace(text)
    empty = pc.equal(text, "")
    text = pc.if_else(empty, pa.scalar(None, pa.large_string()), text)
    is_float = np.dtype(feature.dtype).kind == "f"
    parsed_as = text_number_type(feature.dtype)
    target = pa.type_for_alias(parsed_as)
    range_bad = None
    try:
        parsed = text.cast(target)
        parse_bad = np.zeros(len(text), bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # the slow path, only for a batch with a cell Arrow cannot cast: find which ones
        parsed, parse_bad, range_bad = _parse_cells(text, is_float, target)
    if is_float:
        # "1e400" parses as inf: an overflow of the text, not an Inf the source meant
        as_float = np.asarray(parsed.fill_null(0).to_numpy(zero_copy_only=False))
        nonfinite = ~np.isfinite(as_float)
        if nonfinite.any():
            idx = np.flatnonzero(nonfinite)
            said = text.take(pa.array(idx)).to_pylist()
            meant = np.array([str(t).lower().lstrip("+-") in ("inf", "infinity", "nan")
                              for t in said], bool)
            range_bad = np.zeros(len(text), bool)
            range_bad[idx[~meant]] = True
    values, bad, reason = _to_number(feature, parsed)
    if parse_bad.any():
        reason = _name_values(parse_bad, leaves, "unparsable_number",
                              "cannot parse {value} as " + feature.dtype, reason)
        _thousands_hint(parse_bad, text, reason)
        bad = bad | parse_bad
    if range_bad is not None and range_bad.any():
        if is_float:
            why = "value {value} overflows " + (feature.dtype if parsed_as == feature.dtype
                                                  else f"{parsed_as} (and {feature.dtype})")
        else:
            info = np.iinfo(np.dtype(feature.dtype))
            why = "value {value} out of range " + f"for {feature.dtype} [{info.min}, {info.max}]"
        reason = _name_values(range_bad, text, "out_of_range", why, reason, plain=True)
        bad = bad | range_bad
    return values, bad, reason


def _parse_cells(text: pa.Array, is_float: bool,
                 target: pa.DataType) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Cell by cell, the text Arrow could not cast: the numbers (null where a cell is not
    one), the unparsable cells, the integers beyond int64."""
    cells = text.to_pylist()
    out: list[Any] = []
    parse_bad = np.zeros(len(cells), bool)
    range_bad = np.zeros(len(cells), bool)
    for i, c in enumerate(cells):
        if c is None:
            out.append(None)
            continue
        try:
            if "_" in c:  # Python reads "1_000"; Arrow and every other reader do not
                raise ValueError(c)
            v: Any = float(c) if is_float else int(c)
        except ValueError:
            out.append(None)
            parse_bad[i] = True
            continue
        if not is_float and not -(2**63) <= v < 2**63:
            out.append(None)  # beyond int64: no Arrow array can hold it
            range_bad[i] = True
            continue
        out.append(v)
    if is_float and target != pa.float64():  # Python's float is a double: round once, as Arrow
        out = _single_rounding(cells, out, target)
    return pa.array(out, target), parse_bad, range_bad


def _single_rounding(cells: list[Any], values: list[Any], target: pa.DataType) -> list[Any]:
    """The parsed cells' text cast by Arrow to `target` directly (a float32 through a double
    can round twice); a cell Arrow does not read but Python does (digits of other scripts)
    keeps Python's value."""
    good = [c if v is not None else None for c, v in zip(cells, values, strict=True)]
    try:
        return pa.array(good, pa.large_string()).cast(target).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = []
    for c, v in zip(good, values, strict=True):
        try:
            out.append(None if c is None else pa.array([c]).cast(target)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(v)
    return out


_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")


def _thousands_hint(mask: np.ndarray, text: pa.Array, reason: np.ndarray) -> None:
    """"135,450" or "1,234,567": say it looks like thousands separators (no option reads
    them; the source must drop the commas, or the feature keep the text)."""
    idx = np.flatnonzero(mask)
    for i, cell in zip(idx.tolist(), text.take(pa.array(idx)).to_pylist(), strict=True):
        if cell is not None and _THOUSANDS.fullmatch(cell):
            code, why = reason[i]
            reason[i] = (code, why + " (looks like a thousands separator: remove the commas "
                                     "in the source, or declare dtype: bytes to keep the text)")


# Arrow types a number feature refuses, and what to declare instead
def _check_number_type(feature: Feature, t: pa.DataType) -> None:
    """Integers, floats and booleans convert (range-checked); text is parsed; anything else
    that reaches a number feature is refused with the option that fits it."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return
    if pa.types.is_date(t):
        fix = "declare dtype: date (stored as int64 days since 1970-01-01)"
    elif pa.types.is_timestamp(t):
        fix = f"declare dtype: timestamp with unit: {t.unit} (stored as int64 {t.unit} since the epoch)"
    elif pa.types.is_time(t) or pa.types.is_duration(t) or pa.types.is_interval(t):
        fix = "no feature dtype holds it as it is: convert it to a number of its unit in the source"
    elif pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_union(t):
        fix = "read its fields as columns of their own, or convert it in the source"
    else:
        fix = "declare dtype: bytes to keep it as text, or convert it in the source"
    raise TypeRefused(f"is {t}, not a number for dtype {feature.dtype}: {fix}")


def _from_decimal(feature: Feature, leaves: pa.Array, null: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, Any]:
    """decimal128/256 -> integers exactly (a value with a fraction or beyond the dtype is
    rejected), or floats when the float holds the decimal exactly (checked per value)."""
    import decimal  # noqa: PLC0415

    want = np.dtype(feature.dtype)
    if want.kind in "biu":
        try:  # whole numbers within int64: one Arrow cast (it refuses any loss)
            ints = leaves.cast(pa.int64())
            return _to_number(feature, ints)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        values = leaves.to_pylist()
        ok = [v is None or (v == v.to_integral_value() and -(2**63) <= v < 2**63) for v in values]
        ints = pa.array([int(v) if v is not None and k else None for v, k in
                         zip(values, ok, strict=True)], pa.int64())
        out, bad, reason = _to_number(feature, ints)
        lost = ~np.array(ok, bool)
        reason = _name_values(lost, leaves, "out_of_range", "decimal {value} is not a whole "
                              f"number within int64 for {feature.dtype} (declare dtype: bytes "
                              "for the exact decimal text)", reason, plain=True)
        return out, bad | lost, reason
    as_float = np.asarray(leaves.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False))
    stored = as_float.astype(want)
    exact = np.array([v is None or decimal.Decimal(float(f)) == v
                      for v, f in zip(leaves.to_pylist(), stored.tolist(), strict=True)], bool)
    reason: Any = MISSING
    if not exact.all():
        reason = _name_values(~exact, leaves, "out_of_range", "decimal {value} has no exact "
                              f"{feature.dtype} value (declare dtype: bytes for the exact "
                              "decimal text, or int64 for whole numbers)", plain=True)
    return stored, null | ~exact, reason


def _name_values(mask: np.ndarray, leaves: Any, code: str, template: str,
                 out: Any = None, plain: bool = False) -> np.ndarray:
    """Per-leaf reasons: (code, `template` formatted with the value of each masked leaf, quoted
    by `etl.base.errors.quote`: its repr, or its text with `plain`, bounded)."""
    if out is None or isinstance(out, tuple):
        out = np.full(len(mask), None, object)
    idx = np.flatnonzero(mask)
    if len(idx):
        found = (leaves[idx].tolist() if isinstance(leaves, np.ndarray)
                 else leaves.take(pa.array(idx)).to_pylist())
        out[idx] = [(code, template.format(value=quote(v, plain=plain))) for v in found]
    return out


def leaf_reasons(reason: Any, idx: np.ndarray) -> Why | list[Why]:
    """The reasons of the leaves `idx` (a shared one, or each leaf's own)."""
    if isinstance(reason, tuple):
        return reason
    return [reason[i] or MISSING for i in np.asarray(idx).tolist()]


# ---- whole-column conversion ---------------------------------------------------------------
def to_storage(feature: Feature, columns: Mapping[str, Any], n: int) -> Converted:
    """Convert the feature's source column(s) of one batch into its stored lists."""
    bad: dict[int, Why] = {}

    def flag(rows: np.ndarray, why: Why | list[Why]) -> None:
        """Reject `rows` for `why` (one (code, text) for all, or one per row); a row keeps
        its first reason."""
        rows = np.asarray(rows).tolist()
        if not rows:
            return
        reasons = [why] * len(rows) if isinstance(why, tuple) else why
        for r, w in zip(rows, reasons, strict=True):
            bad.setdefault(int(r), w)

    missing_cols = [s for s in feature.sources if s not in columns]
    if missing_cols:
        if feature.required:
            flag(np.arange(n), ("missing_required", f"source column {missing_cols[0]!r} is missing"))
        nested = Nested(np.zeros(0, feature.storage_numpy_dtype), [np.zeros(n + 1, np.int64)],
                        np.zeros(n, bool))
    try:
        if missing_cols:
            pass
        elif len(feature.sources) > 1:
            nested = _pack(feature, columns, n, flag)
        else:
            nested = nest(_column(feature, columns[feature.sources[0]], flag), n)

        if feature.is_sequence:
            storage = _sequence_storage(feature, nested, n, flag)
        else:
            storage = _context_storage(feature, nested, n, flag)
    except TypeRefused as e:
        column = feature.sources[0]
        named = f" (feature {feature.name!r})" if column != feature.name else ""
        raise ConfigError(f"column {column!r}{named} {e}") from None
    return Converted(storage, bad, _missing_rows(feature, nested, n))


def _missing_rows(feature: Feature, nested: Nested, n: int) -> np.ndarray:
    """Rows without a value (null, absent, or an empty list where a fixed shape is due):
    what the default fills, or `missing_required` rejects; counted per feature."""
    if nested.absent is not None:
        return nested.absent
    present = nested.row_valid.copy()
    if nested.levels and feature.fixed and not feature.is_sequence:
        present &= np.diff(compose(nested.levels, n)) > 0
    return ~present


def _pack(feature: Feature, columns: Mapping[str, Any], n: int, flag: Any) -> Nested:
    """Several scalar columns -> one [k] vector per row."""
    parts = []
    valid = np.ones(n, bool)
    absent = np.zeros(n, bool)
    for name in feature.sources:
        col = nest(as_arrow(columns[name]), n)
        if col.levels:
            flag(np.arange(n), ("wrong_shape",
                                f"source column {name!r} must hold one value per row to be packed"))
            return Nested(np.zeros(0), [np.zeros(n + 1, np.int64)], np.zeros(n, bool))
        values, leaf_bad, reason = convert_leaves(feature, col.leaves)
        missing = ~col.row_valid | leaf_bad
        empty = leaf_bad.copy()
        if not isinstance(reason, tuple):
            idx = np.flatnonzero(empty)
            empty[idx] = [reason[i] is None for i in idx.tolist()]
        absent |= ~col.row_valid | empty
        if missing.any():
            rows = np.flatnonzero(missing)
            why = leaf_reasons(reason, rows) if leaf_bad.any() else MISSING
            flag(rows, [(c, f"column {name!r}: {w}") for c, w in why] if isinstance(why, list)
                 else (why[0], f"column {name!r}: {why[1]}"))
        valid &= ~missing
        parts.append(np.asarray(values))
    block = np.stack(parts, axis=1)
    return Nested(block.reshape(-1), [np.arange(n + 1, dtype=np.int64) * len(parts)], valid,
                  absent)


def _context_storage(feature: Feature, nested: Nested, n: int, flag: Any) -> pa.Array:
    offsets = compose(nested.levels, n)
    values, leaf_bad, reason = convert_leaves(feature, nested.leaves)
    if not nested.levels:
        # A null scalar is a missing row, not a bad value: the default (or the required
        # check below) decides what it becomes. So is text that is empty once trimmed (the
        # conversions give it no reason of its own).
        empty = leaf_bad & nested.row_valid
        if empty.any() and not isinstance(reason, tuple):
            idx = np.flatnonzero(empty)
            empty[idx] = [reason[i] is None for i in idx.tolist()]
        if empty.any():
            nested.row_valid = nested.row_valid & ~empty
        leaf_bad = leaf_bad & nested.row_valid
    if leaf_bad.any():
        flag(rows_of(leaf_bad, offsets), leaf_reasons(reason, np.flatnonzero(leaf_bad)))
    scalar = not nested.levels  # one leaf per row: every count is 1
    counts = np.ones(n, np.int64) if scalar else np.diff(offsets)
    # an empty list is a value for variable-length features, "missing" for fixed shapes
    if nested.levels and feature.fixed:
        present = nested.row_valid & (counts > 0)
    else:
        present = nested.row_valid
    if feature.required:
        flag(np.flatnonzero(~present), ("missing_required", "missing required value"))
    if feature.encoding != "values":
        return _blob_storage(feature, values, offsets, present, flag)
    if feature.fixed:
        k = feature.value_count
        # a scalar column into a scalar feature: one value per row, the shape's count
        wrong = np.zeros(n, bool) if scalar and k == 1 else present & (counts != k)
        if wrong.any():
            r = int(np.flatnonzero(wrong)[0])
            flag(np.flatnonzero(wrong), ("wrong_shape", f"expected {k} value(s) for shape "
                                        f"{list(feature.shape)}, found {int(counts[r])}"))
        elif present.all():
            # a scalar's offsets are already 0, 1, ..., n (compose): not made again
            return _list_array(values, offsets if scalar and k == 1
                               else np.arange(n + 1, dtype=np.int64) * k, feature)
        dense = _filled(feature, n, k)
        ok = present & ~wrong
        starts = offsets[:-1][ok]
        take = (starts[:, None] + np.arange(k)[None, :]).reshape(-1)
        dense[ok] = np.asarray(_take(values, take)).reshape(-1, k) if k else dense[ok]
        return _list_array(dense.reshape(-1), np.arange(n + 1, dtype=np.int64) * k, feature)
    if not nested.levels and not present.all():
        # one value per row into a variable-length feature: a missing row is an empty list
        # (not a list holding a null)
        keep = np.flatnonzero(present)
        values = values[keep] if isinstance(values, np.ndarray) else values.take(pa.array(keep))
        offsets = np.concatenate([[0], np.cumsum(present)]).astype(np.int64)
        counts = np.diff(offsets)
    inner = int(np.prod(feature.inner_shape, dtype=np.int64))
    ragged_bad = counts % inner != 0 if inner > 1 else np.zeros(n, bool)
    if ragged_bad.any():
        flag(np.flatnonzero(ragged_bad), ("wrong_shape", f"value count is not a multiple of "
                                         f"{inner} for shape {list(feature.shape)}"))
    return _list_array(values, offsets, feature)


def _filled(feature: Feature, n: int, k: int) -> np.ndarray:
    default = feature.storage_default
    fill = default[0] if default else (b"" if feature.storage == "bytes" else 0)
    return np.full((n, k), fill, dtype=feature.storage_numpy_dtype)


def _take(values: Any, idx: np.ndarray) -> Any:
    if isinstance(values, np.ndarray):
        return values[idx]
    return np.asarray(values.take(pa.array(idx)).to_pylist(), dtype=object)


def _list_array(values: Any, offsets: np.ndarray, feature: Feature) -> pa.Array:
    leaf_type = STORAGE_KINDS[feature.storage].arrow
    if isinstance(values, np.ndarray):
        if values.dtype == object:
            values = pa.array(values.tolist(), leaf_type)
        else:
            values = pa.array(values.astype(feature.storage_numpy_dtype, copy=False), leaf_type)
    elif values.type != leaf_type:
        values = values.cast(leaf_type)
    return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)


def _blob_storage(
    feature: Feature, values: Any, offsets: np.ndarray, present: np.ndarray, flag: Any
) -> pa.Array:
    """raw / png / jpeg: exactly one blob per record."""
    n = len(offsets) - 1
    counts = np.diff(offsets)
    if isinstance(values, pa.Array):  # already blobs (bytes per record)
        return _checked_blobs(feature, values, offsets, present, counts, flag)
    if feature.variable_image:  # pixel values carry no height and width
        flag(np.flatnonzero(present), ("wrong_type", f"shape {list(feature.shape)} (any size) "
                                       f"takes encoded {feature.encoding} files, not pixel "
                                       f"values; give the pixels a fixed shape"))
        return pa.LargeListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int64)),
                                             pa.array([b""] * n, pa.large_binary()))
    k = feature.value_count
    wrong = present & (counts != k)
    if wrong.any():
        r = int(np.flatnonzero(wrong)[0])
        flag(np.flatnonzero(wrong), ("wrong_shape", f"expected {k} values for "
                                    f"{feature.dtype}{list(feature.shape)}, found {int(counts[r])}"))
    ok = present & ~wrong
    if ok.all() and offsets[0] == 0 and offsets[-1] == n * k:
        # every record has exactly k values, back to back: a reshape, no gather
        dense = np.asarray(values).reshape(n, k).astype(np.dtype(feature.dtype), copy=False)
    else:
        dense = np.zeros((n, k), np.dtype(feature.dtype))
        starts = offsets[:-1][ok]
        dense[ok] = np.asarray(values)[(starts[:, None] + np.arange(k)[None, :])].astype(dense.dtype)
    if feature.encoding == "raw":
        data = np.ascontiguousarray(dense.astype(dense.dtype.newbyteorder("<"), copy=False))
        row = feature.raw_record_bytes
        blobs = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n,
            [None, pa.py_buffer(np.arange(n + 1, dtype=np.int64) * row), pa.py_buffer(data)],
        )
    else:
        blobs = pa.array([encode_pixels(feature, dense[i]) if ok[i] else b"" for i in range(n)],
                         pa.large_binary())
    return pa.LargeListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int64)), blobs)


def _checked_blobs(feature: Feature, values: pa.Array, offsets: np.ndarray, present: np.ndarray,
                   counts: np.ndarray, flag: Any) -> pa.Array:
    """Blobs given as bytes: one per record, a raw blob's length and values, an image's
    header checked (an image fitted first when the feature resizes or pads)."""
    n = len(offsets) - 1
    one = present & (counts == 1)
    wrong = present & (counts != 1)
    if wrong.any():
        flag(np.flatnonzero(wrong), ("wrong_shape", "expected one encoded blob per record"))
    blobs = values.take(pa.array(np.where(one, offsets[:-1], 0)))
    lengths = np.asarray(pc.binary_length(blobs).fill_null(0).to_numpy(), np.int64)
    if feature.encoding == "raw":
        bad_len = one & (lengths != feature.raw_record_bytes)
        if bad_len.any():
            r = int(np.flatnonzero(bad_len)[0])
            flag(np.flatnonzero(bad_len), ("wrong_shape", f"raw blob has {int(lengths[r])} "
                                          f"bytes, expected {feature.raw_record_bytes} for "
                                          f"{feature.dtype}{list(feature.shape)}"))
        if np.dtype(feature.dtype).kind == "f" and not feature.allow_nan:
            _flag_raw_nonfinite(feature, blobs, one & ~bad_len, flag)
    else:
        if feature.resize or feature.pad:
            blobs, one = _fit_blobs(feature, blobs, one, flag)
        problems = image_header_problems(feature, blobs, one)
        for i, why in problems.items():
            flag(np.array([i]), why)
    return pa.LargeListArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int64)), blobs.cast(pa.large_binary())
    )


def _fit_blobs(feature: Feature, blobs: pa.Array, one: np.ndarray, flag: Any
               ) -> tuple[pa.Array, np.ndarray]:
    """`resize`/`pad` features: every present blob decoded (any format Pillow reads), brought
    to the feature's size by its rule and encoded once (etl.contract.images.fit_image); one
    that cannot be is flagged and left out of the header check."""
    out: list[bytes] = []
    ok = one.copy()
    for i, blob in enumerate(blobs.to_pylist()):
        if not one[i] or blob is None:
            out.append(b"")
            continue
        try:
            out.append(fit_image(feature, blob))
        except ImageProblem as e:
            flag(np.array([i]), (e.code, e.reason))
            ok[i] = False
            out.append(b"")
    return pa.array(out, pa.large_binary()), ok


def _flag_raw_nonfinite(feature: Feature, blobs: pa.Array, rows: np.ndarray, flag: Any) -> None:
    """NaN/Inf inside raw float tensor bytes (sources that hand over blobs: IDX, npy rows)."""
    idx = np.flatnonzero(rows)
    if not len(idx):
        return
    blobs = blobs.cast(pa.large_binary())
    buffers = blobs.buffers()
    if buffers[2] is None:
        return
    starts = np.frombuffer(buffers[1], np.int64)[blobs.offset: blobs.offset + len(blobs) + 1][idx]
    data = np.frombuffer(buffers[2], np.uint8)
    row, k = feature.raw_record_bytes, feature.value_count
    dtype = np.dtype(feature.dtype).newbyteorder("<")
    if len(idx) > 1 and (np.diff(starts) == row).all() or len(idx) == 1:
        block = data[starts[0]: starts[0] + row * len(idx)]  # back to back: a view, no gather
    else:
        block = data[(starts[:, None] + np.arange(row)[None, :]).reshape(-1)]
    nonfinite = ~np.isfinite(block.view(dtype).reshape(len(idx), k)).all(axis=1)
    if nonfinite.any():
        flag(idx[nonfinite], ("nan_not_allowed", "raw tensor holds NaN or Inf (the feature does "
                                                 "not say allow_nan: true)"))


def _sequence_storage(feature: Feature, nested: Nested, n: int, flag: Any) -> pa.Array:
    """Sequence features: rows -> steps -> values (LargeList of LargeList)."""
    if not nested.levels:
        flag(np.arange(n), ("wrong_type", "a sequence feature needs a list of steps per record"))
        empty = _list_array(np.zeros(0, feature.storage_numpy_dtype), np.zeros(1, np.int64), feature)
        return pa.LargeListArray.from_arrays(pa.array(np.zeros(n + 1, np.int64)), empty)
    step_offsets = nested.levels[0]
    n_steps = int(step_offsets[-1])
    value_offsets = compose(nested.levels[1:], n_steps)
    if not nested.row_valid.all():
        flag(np.flatnonzero(~nested.row_valid), ("missing_required", "missing required value"))
    values, leaf_bad, reason = convert_leaves(feature, nested.leaves)
    row_of_value = compose(nested.levels, n)
    if leaf_bad.any():
        flag(rows_of(leaf_bad, row_of_value), leaf_reasons(reason, np.flatnonzero(leaf_bad)))
    counts = np.diff(value_offsets)
    if feature.encoding != "values" or feature.fixed:
        # one blob per step when the input holds encoded blobs; otherwise the step's values
        blobs = feature.encoding != "values" and isinstance(values, pa.Array)
        k = 1 if blobs else feature.value_count
        wrong = counts != k
        if blobs and feature.encoding in ("png", "jpeg") and not wrong.all():
            # the step's one blob, per step (steps with another count are flagged below)
            per_step = values if not wrong.any() else values.take(
                pa.array(np.where(wrong, value_offsets[:-1][~wrong][0], value_offsets[:-1])))
            problems = image_header_problems(feature, per_step, ~wrong)
            for step, why in problems.items():
                flag(np.searchsorted(step_offsets, [step], side="right") - 1, why)
        if wrong.any():
            first = int(np.flatnonzero(wrong)[0])
            flag(np.searchsorted(step_offsets, np.flatnonzero(wrong), side="right") - 1,
                 ("wrong_shape", f"expected {k} value(s) per step for shape "
                                 f"{list(feature.shape)}, found {int(counts[first])}"))
            values, value_offsets = _pad_steps(feature, values, value_offsets, k)
    if feature.encoding == "raw" and not isinstance(values, pa.Array):
        # numbers per step -> one raw blob per step
        data = np.asarray(values).astype(np.dtype(feature.dtype).newbyteorder("<"))
        row = feature.raw_record_bytes
        steps = len(value_offsets) - 1
        blobs = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), steps,
            [None, pa.py_buffer(np.arange(steps + 1, dtype=np.int64) * row), pa.py_buffer(data)],
        )
        per_step = pa.LargeListArray.from_arrays(pa.array(np.arange(steps + 1, dtype=np.int64)), blobs)
    else:
        per_step = _list_array(values, value_offsets, feature)
    return pa.LargeListArray.from_arrays(pa.array(step_offsets, pa.int64()), per_step)


def _pad_steps(feature: Feature, values: Any, offsets: np.ndarray, k: int) -> tuple[Any, np.ndarray]:
    """Give every step exactly k values (bad rows are dropped later; layout must stay valid)."""
    steps = len(offsets) - 1
    if isinstance(values, pa.Array):
        py = values.to_pylist()
        flat = [py[offsets[i]] if offsets[i + 1] > offsets[i] else b"" for i in range(steps)]
        return pa.array(flat, pa.large_binary()), np.arange(steps + 1, dtype=np.int64)
    dense = np.zeros((steps, k), np.asarray(values).dtype)
    counts = np.minimum(np.diff(offsets), k)
    for i in np.flatnonzero(counts):
        dense[i, : counts[i]] = values[offsets[i] : offsets[i] + counts[i]]
    return dense.reshape(-1), np.arange(steps + 1, dtype=np.int64) * k
