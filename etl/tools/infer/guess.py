"""One sampled column -> one schema feature (a spec dict) and the guesses a person should review.

Columns arrive as the readers give them: NumPy blocks (IDX, npy: (n, *shape)) or Arrow arrays
(CSV text, JSON values, Parquet types). Everything is vectorised over the sample; only the
vocabulary counts and notes are Python.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.contract.columns import as_arrow, nest
from etl.tools.infer.values import DateGuess, date_guess, thousands

# A vocabulary only for text with at most VOCAB_MAX distinct values, each seen twice on
# average (distinct * 2 <= values), and never for text that is numbers or dates: a category
# has few labels; more than this is names, ids or free text (kept as strings).
VOCAB_MAX = 50
FEW_INTS = 20  # an int column with at most this many distinct values may be a label
RAW_MIN_VALUES = 65  # fixed shapes with more values (or 2+ dims) are stored as raw tensor bytes
_RAW_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
               "float16", "float32", "float64")
_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8"


@dataclass
class Sampled:
    """What a column's guess needs to know about the sample it came from."""

    rows: int  # records sampled
    complete: bool  # the sample is the whole input
    what: str  # "the 150 rows of iris.csv" / "the first 10000 rows of each file"


@dataclass
class Observed:
    """What the sample held for one feature, as the statistics of a run would count it (what
    `infer-schema --checks` proposes thresholds from, etl.tools.infer.checks)."""

    rows: int  # sampled records
    missing: int = 0  # records without a value (a null, empty text, no list or an empty list)
    values: int = 0  # values seen (numbers: the finite ones)
    low: float | int | None = None  # the smallest and largest finite number
    high: float | int | None = None
    nan: int = 0  # NaN and +-Inf among the numbers
    distinct: int | None = None  # distinct strings (vocabulary labels too); None: not counted
    integer: bool = False  # the numbers are integers


@dataclass
class Guess:
    """A feature: its schema spec, review notes, and the counts behind a vocabulary."""

    name: str
    spec: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # vocabulary label -> times seen
    counted: str = "seen"  # what the counts count
    observed: Observed | None = None  # None: nothing a check could use (images, bools)
    column: str = ""  # the source column (the name may change to stay distinct)
    fills: str = ""  # the `default:` line's comment: how many sampled values it fills
    kind: str = ""  # what the summary calls it: vocabulary, date, timestamp, text, number...
    distinct: int | None = None  # distinct strings of a text feature (for the summary)
    unfilled: int = 0  # sampled records without a value and no default: a run rejects them


class Unsupported(Exception):
    """A column no schema dtype can hold (timestamps, structs...): left out, with the reason."""


def feature_name(column: str) -> str:
    """A column name as a feature key: letters, digits and _ (the source keeps the original)."""
    name = re.sub(r"\W+", "_", column).strip("_").lower()
    return name or "column"


def combine(chunks: list[Any]) -> np.ndarray | pa.Array:
    """The chunks of one column (one per block) as one NumPy or Arrow array."""
    if all(isinstance(c, np.ndarray) and c.dtype != object for c in chunks):
        if len({c.shape[1:] for c in chunks}) == 1 and len({c.dtype for c in chunks}) == 1:
            return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    arrays = [as_arrow(c) for c in chunks]
    if all(isinstance(a, pa.Array) for a in arrays) and len({a.type for a in arrays}) == 1:
        return pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
    items: list[Any] = []
    for a in arrays:  # blocks whose types differ (a JSON block of nulls, ints then floats)
        items.extend(a.tolist() if isinstance(a, np.ndarray) else a.to_pylist())
    return as_arrow(items)


def guess(column: str, values: np.ndarray | pa.Array, sampled: Sampled, *,
          stored: bool = False, null_values: frozenset[str] = frozenset()) -> Guess:
    """The feature for one source column. `stored`: the values are the lists a TFRecord of
    tf.train.Example already holds (passed through unchanged by a run), so the feature keeps
    the key as spelled and the list type as stored: text is not parsed into numbers and no
    vocabulary is built (it would declare int64 ids where the records hold strings).
    `null_values`: text cells that are missing values (the job's source names them)."""
    if stored:
        g = Guess(column, {}, column=column)
        _arrow(g, as_arrow(values) if isinstance(values, np.ndarray) else values, sampled,
               stored=True)
        return g
    g = Guess(feature_name(column), {}, column=column)
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "biuf":
            _numpy(g, values, sampled)
            return _with_source(g, column)
        if values.dtype.kind not in "SUO":
            raise Unsupported(f"NumPy dtype {values.dtype}")
        values = as_arrow(values.reshape(len(values), -1)[:, 0] if values.ndim > 1 else values)
    _arrow(g, values, sampled, null_values=null_values)
    return _with_source(g, column)


def _with_source(g: Guess, column: str) -> Guess:
    if g.name != column:
        g.spec["source"] = column
    return g


# ---- NumPy blocks -----------------------------------------------------------------------------
def _numpy(g: Guess, a: np.ndarray, sampled: Sampled) -> None:
    dtype = a.dtype.newbyteorder("=") if a.dtype.byteorder == ">" else a.dtype
    shape = list(a.shape[1:])
    values = int(np.prod(shape, dtype=np.int64))
    flat = a.reshape(-1)
    if dtype.kind in "iuf":
        g.observed = observe_numbers(flat, len(a), 0)
    if not shape:
        _number_spec(g, flat, sampled, np.ones(len(a), bool))
        g.spec["shape"] = []
        return
    if dtype.name == "uint8" and len(shape) == 2:
        g.notes.append(f"shape {shape + [1]}: every sampled record is a {shape[0]}x{shape[1]} "
                       "uint8 array, read as a one-channel image (the trailing 1 is what Keras "
                       f"image layers expect); use shape {shape} to keep the array as stored")
        shape = [*shape, 1]
    if len(shape) >= 2 or values >= RAW_MIN_VALUES:
        if dtype.name in _RAW_DTYPES:
            g.spec.update(dtype=dtype.name, shape=shape, encoding="raw")
            g.notes.append(f"encoding raw: each record's {values} {dtype.name} values as one "
                           "tensor byte string (compact, decode_raw on read); encoding: values "
                           "stores them as a list instead")
            if dtype.kind == "f":
                bad = int((~np.isfinite(flat)).sum())
                if bad:
                    g.spec["allow_nan"] = True
                    g.notes.append(f"NaN/Inf in {bad} sampled values: allow_nan: true keeps "
                                   "them; without it such records are rejected")
            return
    _number_spec(g, flat, sampled, np.ones(len(flat), bool), per_row=values)
    g.spec["shape"] = shape
    g.notes.append(f"shape {shape} fixed: every sampled record holds this array shape")


def _number_spec(g: Guess, flat: np.ndarray, sampled: Sampled,
                 present: np.ndarray, per_row: int = 1) -> None:
    """dtype (int64 / float32 / bool) and notes for the numbers in `flat`."""
    kind = flat.dtype.kind
    if kind == "b":
        g.spec["dtype"] = "bool"
        return
    if kind in "iu":
        if flat.dtype.kind == "u" and flat.dtype.itemsize == 8 and len(flat) and \
                int(flat.max()) >= 2**63:
            raise Unsupported("uint64 values beyond int64")
        g.spec["dtype"] = "int64"
        if per_row == 1:
            _int_notes(g, flat)
        return
    _float_spec(g, flat.astype(np.float64, copy=False), f"{flat.dtype} data")


def _float_spec(g: Guess, f64: np.ndarray, source_dtype: str) -> None:
    g.spec["dtype"] = "float32"
    finite = np.isfinite(f64)
    if not finite.all():
        g.spec["allow_nan"] = True
        g.notes.append(f"NaN/Inf in {int((~finite).sum())} sampled values: allow_nan: true "
                       "keeps them (a NaN poisons every gradient it reaches: better clean them "
                       "out); without it such records are rejected")
    vals = f64[finite]
    if not len(vals) or source_dtype in ("float32", "float32 data", "float16 data"):
        return
    big = np.abs(vals) > float(np.finfo(np.float32).max)
    if big.any():
        g.notes.append(f"{int(big.sum())} sampled values exceed float32's range and would be "
                       "rejected as out_of_range; use encoding: raw with dtype float64")
        vals = vals[~big]
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(vals.astype(np.float32).astype(np.float64) - vals) / np.abs(vals)
    worst = float(np.nanmax(err)) if len(err) else 0.0
    if worst > 0:
        g.notes.append(f"float32 chosen for {source_dtype} (what FloatList holds), relative "
                       f"rounding error up to {worst:.1e}; exact: dtype float64, encoding raw")


def _int_notes(g: Guess, ints: np.ndarray) -> None:
    if not len(ints):
        return
    distinct = np.unique(ints)
    d = len(distinct)
    if d <= FEW_INTS and len(ints) >= 2 * d:
        shown = ", ".join(str(int(v)) for v in distinct[:10]) + (", ..." if d > 10 else "")
        g.notes.append(f"int column with {d} distinct values ({shown}): a class label? then "
                       "int64 ids are right; codes that are really categories may want a "
                       "vocabulary")
    elif d == len(ints) and d > 1:
        g.notes.append(f"all {d} sampled values distinct: an id? it does not help training, "
                       "but keeps records traceable")


# ---- Arrow columns -----------------------------------------------------------------------------
@dataclass
class _Column:
    """An Arrow column taken apart: its list levels, its leaf values, and which rows hold one."""

    n: int  # sampled rows
    levels: list[np.ndarray]  # list offsets, outermost first (none: one value per row)
    valid: np.ndarray  # rows that are not null
    present: np.ndarray  # rows with a value
    shape: list[int]
    variable: bool  # the first dimension varies
    leaves: pa.Array
    leaf_null: np.ndarray  # leaves that are missing


def _arrow(g: Guess, arr: pa.Array, sampled: Sampled, stored: bool = False,
           null_values: frozenset[str] = frozenset()) -> None:
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    n = len(arr)
    nested = nest(arr, n)
    leaves = nested.leaves
    if isinstance(leaves, np.ndarray):  # cannot happen for Arrow input; kept for safety
        leaves = pa.array(leaves)
    if pa.types.is_dictionary(leaves.type):
        leaves = leaves.dictionary_decode()
    valid = nested.row_valid
    shape, variable = _list_shape(nested.levels, valid, n)
    kind, numbers, leaf_null, notes, when = _leaf_kind(leaves, stored, null_values)
    if nested.levels and kind in ("text", "bytes"):  # "" in a list is a value, not missing
        leaf_null = np.asarray(leaves.is_null().to_numpy(zero_copy_only=False), bool)
    g.notes.extend(notes)
    present = _arrow_present(nested.levels, valid, leaf_null, variable, n)
    col = _Column(n, nested.levels, valid, present, shape, variable, leaves, leaf_null)
    if kind == "null":
        g.spec.update(dtype="string", shape=shape)
        g.notes.append(f"no value in any of the {n} sampled rows: dtype string is a "
                       "placeholder; fix the dtype or drop the feature")
        _missing(g, present, variable, sampled, default="")
    elif when is not None:
        _arrow_date(g, col, when, sampled)
    elif kind in ("int", "float", "bool"):
        _arrow_numbers(g, col, kind, numbers, sampled, stored)
    else:
        _arrow_text(g, col, kind, notes, sampled, stored)


def _arrow_present(levels: list[np.ndarray], valid: np.ndarray, leaf_null: np.ndarray,
                   variable: bool, n: int) -> np.ndarray:
    """The rows with a value: a non-null scalar, or a list (non-empty unless its length varies)."""
    if not levels:
        return valid & ~leaf_null
    counts = np.diff(levels[0])
    present = valid & ((counts > 0) if not variable else np.ones(n, bool))
    if leaf_null.any():
        raise Unsupported("lists holding null values (the schema has no missing element)")
    return present


def _arrow_date(g: Guess, col: _Column, when: DateGuess, sampled: Sampled) -> None:
    """Text or numbers read as dates or times: the dtype, unit and format of the guess."""
    g.kind = when.dtype
    g.spec["dtype"] = when.dtype
    if when.unit:
        g.spec["unit"] = when.unit
    if when.format:
        g.spec["format"] = when.format
    g.spec["shape"] = col.shape
    g.notes.append(when.note)
    _shape_note(g, col.levels, col.shape, col.variable, col.valid)
    _missing(g, col.present, col.variable, sampled, default=None)


def _arrow_numbers(g: Guess, col: _Column, kind: str, numbers: np.ndarray, sampled: Sampled,
                   stored: bool) -> None:
    """An int, float or bool feature: its dtype, number notes, observed range and default."""
    leaves, leaf_null = col.leaves, col.leaf_null
    g.kind = "number" if kind != "bool" else "bool"
    if kind == "bool":
        g.spec["dtype"] = "bool"
    elif kind == "int":
        g.spec["dtype"] = "int64"
        if stored and _flag_note(g, numbers[~leaf_null], bool(col.levels)):
            pass
        elif not col.levels:
            _int_notes(g, numbers[~leaf_null])
    else:
        narrow = pa.types.is_floating(leaves.type) and leaves.type.bit_width < 64
        text = not pa.types.is_floating(leaves.type)
        _float_spec(g, numbers[~leaf_null],
                    "float32" if narrow else "decimal text" if text else "float64 data")
    g.spec["shape"] = col.shape
    _shape_note(g, col.levels, col.shape, col.variable, col.valid)
    if kind != "bool":
        g.observed = observe_numbers(numbers[~leaf_null], col.n,
                                     _without_value(col.levels, col.present, col.valid,
                                                    col.variable))
    _missing(g, col.present, col.variable, sampled, stored=stored,
             default=False if kind == "bool" else 0 if stored else _number_default(g))


def _arrow_text(g: Guess, col: _Column, kind: str, notes: list[str], sampled: Sampled,
                stored: bool) -> None:
    """A string or bytes feature: exact decimal text, images, stored bytes, a vocabulary, or
    plain strings."""
    present, variable = col.present, col.variable
    if kind == "decimal":  # exact text: never a vocabulary (a number is not a label)
        g.spec.update(dtype="string", shape=col.shape)
        g.kind = "text"
        _missing(g, present, variable, sampled, default="")
        return
    if kind == "bytes" and _images(g, col.leaves, col.shape):
        _missing(g, present, variable, sampled, default=None)
        return
    g.spec["shape"] = col.shape
    _shape_note(g, col.levels, col.shape, variable, col.valid)
    text = kind == "text"
    kept = col.leaves.filter(pa.array(~col.leaf_null)) if col.leaf_null.any() else col.leaves
    vc = pc.value_counts(kept) if text else None
    absent = _without_value(col.levels, present, col.valid, variable)
    if stored:
        g.kind = "text"
        _stored_bytes_notes(g, kept, vc)
        _missing(g, present, variable, sampled, default="", stored=True)
        g.observed = Observed(col.n, absent, len(kept),
                              distinct=len(vc) if vc is not None else None)
        return
    numberish = any(n.startswith(("mostly numbers", "numbers with")) for n in notes)
    if vc is not None and len(vc) <= VOCAB_MAX and len(vc) * 2 <= len(kept) and not numberish:
        _arrow_vocabulary(g, vc, len(kept), sampled)
        _missing(g, present, variable, sampled, default=-1)
        g.observed = Observed(col.n, absent, len(kept), distinct=len(g.spec["vocabulary"]))
        return
    g.spec["dtype"] = "string"
    g.kind = "text" if text else "bytes"
    if text and vc is not None and not numberish:
        why = (f"more than {VOCAB_MAX} distinct values" if len(vc) > VOCAB_MAX else
               "fewer than two values per label")
        g.notes.append(f"text with {len(vc)} distinct values in {len(kept)} sampled values: "
                       f"kept as strings (no vocabulary: {why})")
    g.distinct = len(vc) if vc is not None else None
    _missing(g, present, variable, sampled, default="")


def _arrow_vocabulary(g: Guess, vc: pa.StructArray, kept: int, sampled: Sampled) -> None:
    """Text with few labels: an int64 feature with the sorted labels as its vocabulary."""
    g.kind = "vocabulary"
    labels = vc.field("values").to_pylist()
    seen = dict(zip(labels, vc.field("counts").to_pylist(), strict=True))
    vocab = sorted(seen)
    g.spec.update(dtype="int64", vocabulary=vocab)
    g.counts = {v: seen[v] for v in vocab}
    whole = "the whole input was read" if sampled.complete else "values beyond the sample " \
        "were not read"
    g.notes.append(f"vocabulary of the {len(vocab)} distinct values in {kept} sampled "
                   f"values (ids 0..{len(vocab) - 1} in this order; {whole}); a value not "
                   "in it is rejected as not_in_vocabulary: add missing labels, or set "
                   "oov_id")


def observe_numbers(numbers: np.ndarray, rows: int, missing: int) -> Observed:
    """The numbers of a feature's sampled values (ints, or floats with NaN/Inf)."""
    integer = numbers.dtype.kind in "iu"
    finite = numbers if integer else numbers[np.isfinite(numbers)]
    out = Observed(rows, missing, len(finite), nan=len(numbers) - len(finite), integer=integer)
    if len(finite):
        lo, hi = finite.min(), finite.max()
        out.low, out.high = (int(lo), int(hi)) if integer else (float(lo), float(hi))
    return out


def _without_value(levels: list[np.ndarray], present: np.ndarray, valid: np.ndarray,
                   variable: bool) -> int:
    """Records a run's statistics count as missing: no value, or an empty list of a
    variable-length feature (etl.stats.accumulators counts those too)."""
    if variable:
        return int((~valid | (np.diff(levels[0]) == 0)).sum())
    return int((~present).sum())


def _flag_note(g: Guess, ints: np.ndarray, nested: bool) -> bool:
    """Stored int64 values that are all 0 or 1: a note that they may be booleans."""
    if len(ints) < 2 or not np.isin(ints, (0, 1)).all():
        return False
    where = "values of the sampled lists" if nested else "sampled values"
    g.notes.append(f"only 0 and 1 in the {len(ints)} {where}: a bool? dtype: bool reads the "
                   "same int64_list as True/False (the records pass through unchanged either "
                   "way); int64 keeps them as numbers")
    return True


def _stored_bytes_notes(g: Guess, kept: pa.Array, vc: pa.StructArray | None) -> None:
    """Bytes a TFRecord already stores stay bytes; say what they look like."""
    g.spec["dtype"] = "string"
    raw = describe_bytes(kept.to_pylist()[:100_000])
    if raw:
        g.notes.append(raw)
        return
    if vc is None:
        return
    distinct = len(vc)
    if distinct <= VOCAB_MAX and distinct * 2 <= len(kept):
        seen = sorted(zip(vc.field("counts").to_pylist(), vc.field("values").to_pylist(),
                          strict=True), key=lambda cv: (-cv[0], cv[1]))
        shown = ", ".join(f"{scalar_text(v)} ({c})" for c, v in seen[:10]) + \
            (", ..." if distinct > 10 else "")
        g.notes.append(f"{distinct} distinct strings in {len(kept)} sampled values: {shown}; "
                       "kept as strings, as the records store them (a vocabulary would declare "
                       "int64 ids, which these records do not hold: convert the original source "
                       "with one instead)")
    else:
        g.notes.append(f"text with {distinct} distinct values in {len(kept)} sampled values: "
                       "kept as strings")


def describe_bytes(values: list[Any]) -> str | None:
    """A review note for bytes values that all have one length and look binary (a NUL or
    control byte, or not UTF-8): perhaps a raw tensor, which `encoding: raw` would decode."""
    blobs = [v for v in values if v is not None]
    if len(blobs) < 2 or len({len(b) for b in blobs}) != 1 or not len(blobs[0]):
        return None
    if not any(_binary(b) for b in blobs):
        return None
    size = len(blobs[0])
    options = [f"{dtype} [{size // width}]" for dtype, width in
               (("uint8", 1), ("float16 or int16", 2), ("float32 or int32", 4),
                ("float64 or int64", 8)) if size % width == 0]
    return (f"all {len(blobs)} sampled values are {size} bytes and not PNG/JPEG: a raw tensor? "
            f"encoding: raw decodes it on read but needs its dtype and shape (one of: "
            f"{', '.join(options)}, or any shape holding as many values), which the bytes "
            "do not tell; kept as bytes, read back unchanged")


def _binary(blob: bytes) -> bool:
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return any(ord(c) < 0x20 and c not in "\t\n\r" for c in text)


def scalar_text(value: Any) -> str:
    """A short quoted form of a sampled string for a note."""
    text = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _list_shape(levels: list[np.ndarray], valid: np.ndarray, n: int) -> tuple[list[int], bool]:
    """The per-record shape of nested lists, and whether its first dimension varies."""
    if not levels:
        return [], False
    counts = np.diff(levels[0])[valid]
    variable = len(counts) == 0 or bool((counts != counts[0]).any()) or int(counts[0]) == 0
    shape = [-1 if variable else int(counts[0])]
    for inner in levels[1:]:
        sizes = np.diff(inner)
        if len(sizes) == 0:
            raise Unsupported("nested lists with no inner values in the sample")
        if (sizes != sizes[0]).any() or int(sizes[0]) == 0:
            raise Unsupported(f"nested lists whose inner lengths vary ({int(sizes.min())} to "
                              f"{int(sizes.max())}): only a feature's first dimension may vary")
        shape.append(int(sizes[0]))
    return shape, variable


def _shape_note(g: Guess, levels: list[np.ndarray], shape: list[int], variable: bool,
                valid: np.ndarray) -> None:
    if not levels:
        return
    counts = np.diff(levels[0])[valid]
    rows = len(counts)
    if variable:
        lo, hi = (int(counts.min()), int(counts.max())) if rows else (0, 0)
        g.notes.append(f"shape {shape} variable: {lo} to {hi} values per row in {rows} sampled "
                       "rows (read back as a RaggedTensor); in a SequenceExample schema this "
                       "would be a sequence feature")
    else:
        g.notes.append(f"shape {shape} fixed: all {rows} sampled rows had {shape[0]} values; "
                       "a row with another count would be rejected as wrong_shape")


def _leaf_kind(leaves: pa.Array, stored: bool = False,
               null_values: frozenset[str] = frozenset()
               ) -> tuple[str, np.ndarray, np.ndarray, list[str], DateGuess | None]:
    """(kind, numbers as float64/int64, null mask, notes): kind is int | float | bool | text |
    bytes | null, and the date reading of date/timestamp columns (Arrow dates and timestamps,
    ISO 8601 text). Text that is all numbers (CSV cells, JSON strings) is read as numbers, as
    the encoder would; an empty text cell, or one of `null_values`, is then a missing value.
    `stored` bytes stay text or bytes (a record's bytes_list is not parsed into numbers)."""
    t = leaves.type
    null = np.asarray(leaves.is_null().to_numpy(zero_copy_only=False), bool)
    empty = np.zeros(0)
    if pa.types.is_null(t) or (len(leaves) and null.all()):
        return "null", empty, null, [], None
    if pa.types.is_boolean(t):
        return "bool", empty, null, [], None
    if pa.types.is_date(t):
        return "date", empty, null, [], DateGuess("date", note=f"Arrow {t}: dtype date (int64 "
                                                  "days since 1970-01-01)")
    if pa.types.is_timestamp(t):
        zone = f", time zone {t.tz}: converted to UTC" if t.tz else \
            " without a time zone: read as UTC (set timezone: if it is local time)"
        return "timestamp", empty, null, [], DateGuess(
            "timestamp", unit=t.unit, note=f"Arrow {t}{zone}: dtype timestamp, unit {t.unit} "
            f"(int64 {t.unit} since 1970-01-01 UTC)")
    if pa.types.is_integer(t):
        if pa.types.is_uint64(t) and len(leaves) and pc.max(leaves).as_py() >= 2**63:
            raise Unsupported("uint64 values beyond int64")
        return "int", np.asarray(leaves.fill_null(0).to_numpy(zero_copy_only=False),
                                 np.int64), null, [], None
    if pa.types.is_floating(t):
        return "float", np.asarray(leaves.fill_null(0).to_numpy(zero_copy_only=False),
                                   np.float64), null, [], None
    if pa.types.is_decimal(t):
        if t.scale == 0 and t.precision <= 18:  # whole numbers that fit int64 exactly
            return "int", np.asarray(leaves.cast(pa.int64()).fill_null(0).to_numpy(
                zero_copy_only=False), np.int64), null, [f"Arrow {t}: whole numbers, stored "
                                                       "exactly as int64"], None
        return "decimal", empty, null, [f"Arrow {t}: stored as its exact decimal text (dtype "
                                        "string); a float would round most decimals, and the "
                                        "run refuses values a float32 does not hold exactly"], None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        try:
            leaves = leaves.cast(pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return "bytes", empty, null, [], None
        if _looks_like_images(leaves.cast(pa.large_binary())):
            return "bytes", empty, null, [], None
        if stored:
            return "text", empty, null, [], None
    elif not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise Unsupported(f"Arrow type {t}")
    return _text_kind(leaves.cast(pa.large_string()), null, null_values)


def _text_kind(text: pa.Array, null: np.ndarray, null_values: frozenset[str] = frozenset()
               ) -> tuple[str, np.ndarray, np.ndarray, list[str], DateGuess | None]:
    trimmed = pc.utf8_trim_whitespace(text)
    blank = np.asarray(pc.equal(trimmed, "").fill_null(False).to_numpy(zero_copy_only=False), bool)
    marked = np.zeros(len(text), bool)
    if null_values:
        marked = np.asarray(pc.is_in(trimmed, value_set=pa.array(sorted(null_values),
                                                                 pa.large_string()))
                            .fill_null(False).to_numpy(zero_copy_only=False), bool)
    cells = trimmed.filter(pa.array(~blank & ~null & ~marked))
    if not len(cells):
        if marked.any():
            return "null", np.zeros(0), null | blank | marked, [], None
        return "text", np.zeros(0), null, [], None
    missing = null | blank | marked
    marker_note = ([f"{int(marked.sum())} sampled values are null markers of the source's "
                    "null_values: missing values"] if marked.any() else [])
    for kind, target in (("int", pa.int64()), ("float", pa.float64())):
        try:
            parsed = cells.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        if kind == "int":
            zeros = pc.match_substring_regex(cells, r"^[+-]?0\d")
            if pc.any(zeros).as_py():
                example = cells.filter(zeros)[0].as_py()
                return "text", np.zeros(0), missing, [
                    f"numbers with leading zeros ({example!r}): kept as text so the zeros "
                    "survive; declare int64 if they are plain numbers"], None
        numbers = np.zeros(len(text), np.float64 if kind == "float" else np.int64)
        numbers[~missing] = parsed.to_numpy(zero_copy_only=False)
        notes = marker_note
        if blank.any():
            notes.append(f"empty text in {int(blank.sum())} sampled rows is read as a missing "
                         "value")
        return kind, numbers, missing, notes, None
    when = date_guess(cells)
    if when is not None:
        return when.dtype, np.zeros(0), missing, marker_note, when
    sep = thousands(cells)
    return "text", np.zeros(0), missing, marker_note + ([sep] if sep else
                                                        _mostly_numbers(cells)), None


def _mostly_numbers(cells: pa.Array) -> list[str]:
    """A note when nearly every cell is a number but a few tokens ('NA', '?') are not."""
    ok = np.array([_is_number(c) for c in cells.to_pylist()[:100_000]], bool)
    if len(ok) and ok.mean() >= 0.9:
        odd = sorted({c for c, good in zip(cells.to_pylist(), ok.tolist(), strict=False)
                      if not good})
        shown = ", ".join(repr(x) for x in odd[:3])
        return [f"mostly numbers, but {shown} in {int((~ok).sum())} sampled rows: kept as "
                "text; empty those cells to read the column as numbers with a default"]
    return []


def _is_number(text: str) -> bool:
    try:
        float(text)
        return "_" not in text
    except ValueError:
        return False


def _number_default(g: Guess) -> Any:
    """What a missing number reads as: NaN for floats (with allow_nan: true: it cannot be
    mistaken for a measurement), for ints a value below every sampled one (-1 for counts)."""
    if g.spec.get("dtype") != "int64":
        return float("nan")
    low = g.observed.low if g.observed is not None else None
    return -1 if low is None or low >= 0 else int(low) - 1


def _missing(g: Guess, present: np.ndarray, variable: bool, sampled: Sampled,
             default: Any, stored: bool = False) -> None:
    """How rows without a value are declared: an optional list, a default whose `# fills N
    of M` comment says how many sampled values it fills, or (no default) required, whose
    missing records a run rejects as missing_required and counts."""
    absent = int((~present).sum())
    if not absent:
        return
    rows = len(present)
    if g.spec.get("encoding") in ("png", "jpeg", "raw") or default is None:
        g.unfilled = absent
        g.notes.append(f"{absent} of {rows} sampled rows have no value: required, so a run "
                       "rejects such records as missing_required (and counts them)")
        return
    if variable:
        g.spec["required"] = False
        g.notes.append(f"{absent} of {rows} sampled rows have no value: required: false reads "
                       "them as an empty list")
        return
    g.spec["default"] = default
    if stored:  # TFRecords pass through a run unchanged: the default only tells readers
        g.notes.append(f"{absent} of {rows} sampled records lack this feature: default "
                       f"{default!r} is what a reader's parse spec gives them (the records "
                       "pass through unchanged)")
        return
    g.fills = f"fills {absent} of {rows} sampled values"
    if isinstance(default, float) and default != default:
        g.spec["allow_nan"] = True
        g.notes.append(f"{absent} of {rows} sampled rows have no value: default NaN (with "
                       "allow_nan: true) marks them, so they cannot pass for a measurement; "
                       "remove the default to reject such records as missing_required instead")
        return
    if g.spec.get("dtype") == "int64" and not g.spec.get("vocabulary"):
        g.notes.append(f"{absent} of {rows} sampled rows have no value: default {default} lies "
                       "below every sampled value (a marker for 'missing', not a measurement); "
                       "remove the default to reject such records as missing_required instead")
        return
    what = "no label" if g.spec.get("vocabulary") else "its value"
    g.notes.append(f"{absent} of {rows} sampled rows have no value: default {default!r} is "
                   f"{what} for them; remove the default to reject such records as "
                   "missing_required instead")


# ---- images ---------------------------------------------------------------------------------
def _looks_like_images(blobs: pa.Array) -> bool:
    if not len(blobs):
        return False
    heads = pc.binary_slice(blobs.cast(pa.large_binary()), 0, 8) if hasattr(pc, "binary_slice") \
        else pa.array([None if b is None else b[:8] for b in blobs.to_pylist()], pa.large_binary())
    for head in heads.to_pylist():
        if head is not None and not (head.startswith(_PNG) or head.startswith(_JPEG)):
            return False
    return True


def image_facts(blob: bytes, name: str) -> tuple[str, str, int, int, int]:
    """(format, mode, width, height, frames) from an image's header (Pillow reads no
    pixels; `frames` > 1 for an animated GIF or a multipage TIFF/WebP)."""
    from PIL import Image  # noqa: PLC0415

    with Image.open(io.BytesIO(blob)) as img:
        return (str(img.format), str(img.mode), int(img.size[0]), int(img.size[1]),
                int(getattr(img, "n_frames", 1)))


_CHANNELS = {"1": 1, "L": 1, "I;16": 1, "I;16B": 1, "I": 1, "P": 3, "RGB": 3, "YCbCr": 3,
             "CMYK": 3, "LA": 4, "RGBA": 4, "PA": 4}


def _images(g: Guess, blobs: pa.Array, shape: list[int]) -> bool:
    """A bytes column whose every sampled value is a PNG or JPEG: an image feature."""
    if shape or not _looks_like_images(blobs):
        return False
    facts = [image_facts(b, g.name) for b in blobs.to_pylist() if b is not None]
    image_spec(g, facts)
    return True


def image_spec(g: Guess, facts: list[tuple[str, str, int, int, int]],
               where: list[str] | None = None) -> None:
    """Shape, dtype and encoding of an image feature from its sampled headers."""
    formats: dict[str, int] = {}
    modes: dict[str, int] = {}
    sizes: dict[tuple[int, int], int] = {}
    for fmt, mode, w, h, _ in facts:
        formats[fmt] = formats.get(fmt, 0) + 1
        modes[mode] = modes.get(mode, 0) + 1
        sizes[(h, w)] = sizes.get((h, w), 0) + 1
    n = len(facts)
    fmt = max(formats, key=lambda k: formats[k])
    encoding = "jpeg" if fmt == "JPEG" else "png"
    channels = max(_CHANNELS.get(m, 3) for m in modes)
    if encoding == "jpeg":
        channels = min(channels, 3)
    wide = any(m.startswith("I") for m in modes) and encoding == "png"
    dtype = "uint16" if wide else "uint8"
    g.kind = "image"
    if len(sizes) > 1:
        listed = ", ".join(f"{h}x{w} ({c})" for (h, w), c in sorted(
            sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:4])
        g.kind = "image of varying size"
        g.spec.update(dtype=dtype, shape=[None, None, channels], encoding=encoding)
        g.notes.append(f"images of {len(sizes)} sizes in {n} sampled ({listed}): shape "
                       f"[null, null, {channels}] stores each file's {encoding} bytes as they "
                       "are (no re-encode) and the readers decode each at its own size; for "
                       "one fixed shape add resize: [H, W] or pad: [H, W] with shape [H, W, "
                       f"{channels}]")
        others = n - formats[fmt]
        if others:
            g.notes.append(_converted(others, fmt, encoding))
        return
    (h, w), = sizes
    g.spec.update(dtype=dtype, shape=[h, w, channels], encoding=encoding)
    mode_text = ", ".join(f"{m} ({c})" for m, c in sorted(modes.items()))
    g.notes.append(f"{n} sampled images, all {h}x{w}, {'/'.join(sorted(formats))}, mode "
                   f"{mode_text}: shape [{h}, {w}, {channels}], encoding {encoding} (stored "
                   f"as the file's bytes, decoded on read); an image of another size is "
                   "rejected as wrong_shape")
    others = n - formats[fmt]
    if others:
        g.notes.append(_converted(others, fmt, encoding))


def _converted(others: int, fmt: str, encoding: str) -> str:
    """The note for sampled images of another format than the feature's encoding: the image
    source decodes them with Pillow and encodes them once (etl.contract.images)."""
    how = "lossless" if encoding == "png" else "lossy, JPEG quality 95"
    return (f"{others} sampled images are not {fmt}: each is decoded and stored once as "
            f"{encoding} ({how}); the {fmt} files are stored as they are")
