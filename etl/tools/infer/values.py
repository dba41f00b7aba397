"""What text cells hold, for `infer-schema`: null markers, dates and times, thousands separators.

- null markers: in a column whose other cells are all numbers or all dates, cells such as
  `NA`, `N/A`, `null`, `None`, `?` (NULL_MARKERS) stand for a missing value; the job's source
  then names them (`null_values:`) and the column is read as numbers or dates with missing
  values, instead of as strings (or a vocabulary holding `NA`);
- dates and times: ISO 8601 text (`2010-01-01` -> `dtype: date`; `2010-01-01T12:30:00Z`,
  `2010-01-01 12:30:00.5+02:00` -> `dtype: timestamp` with the `unit:` its fractions need), and
  a few common other layouts (DATE_FORMATS) proposed with `format:`; every non-missing cell
  must parse, all at once through Arrow's vectorised `strptime`;
- thousands separators (`135,450`): a note, the column stays text (no silent parse).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.contract.dates import rolled_over

# `NaN`/`nan` are not among them: text a float column holds as NaN is read as NaN (with
# allow_nan: true, said in a note), exactly what the text says.
NULL_MARKERS = ("NA", "N/A", "n/a", "na", "<NA>", "null", "NULL", "Null", "None", "none", "#N/A",
                "-", "?", ".")
_ISO_DATE = r"^\d{4}-\d{2}-\d{2}$"
_ISO_TIME = (r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.(\d{1,9}))?)?"
             r"(Z|[+-]\d{2}(:?\d{2})?)?$")
_OFFSET = r"(Z|[+-]\d{2}(:?\d{2})?)$"
DATE_FORMATS = ("%Y/%m/%d", "%d.%m.%Y", "%b %d %Y", "%d %b %Y", "%B %d %Y", "%d %B %Y",
                "%m/%d/%Y", "%d/%m/%Y")
# the same layouts with a time of day to the minute or second (vega's sf-temps, seattle-temps)
DATETIME_FORMATS = tuple(f"{d} {t}" for d in ("%Y/%m/%d", "%m/%d/%Y", "%d/%m/%Y", "%d.%m.%Y")
                         for t in ("%H:%M:%S", "%H:%M"))
_THOUSANDS = r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$"
_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|Infinity|nan|NaN)$"


@dataclass
class DateGuess:
    """A date or timestamp column: its spec keys and the note saying why."""

    dtype: str  # date | timestamp
    unit: str | None = None
    format: str | None = None
    note: str = ""


def _all(mask: pa.Array) -> bool:
    return bool(pc.all(mask).as_py()) if len(mask) else False


def is_number(cells: pa.Array) -> pa.Array:
    """A boolean mask: the (trimmed) cell is a decimal or float number."""
    return pc.match_substring_regex(cells, _NUMBER)


def date_guess(cells: pa.Array) -> DateGuess | None:
    """The date/timestamp reading of trimmed, non-missing text cells, or None."""
    if not len(cells):
        return None
    if _all(pc.match_substring_regex(cells, _ISO_DATE)):
        if _parses(cells, "%Y-%m-%d"):
            return DateGuess("date", note=f"ISO 8601 dates in all {len(cells)} sampled values: "
                             "dtype date (stored as int64 days since 1970-01-01)")
        return None
    if _all(pc.match_substring_regex(cells, _ISO_TIME)) and \
            _parses(pc.utf8_slice_codeunits(cells, 0, 10), "%Y-%m-%d"):
        digits = pc.extract_regex(cells, r"\.(?P<f>\d+)")
        longest = 0
        if digits.null_count < len(digits):
            longest = int(pc.max(pc.utf8_length(pc.struct_field(digits, [0]))).as_py() or 0)
        unit = "s" if longest == 0 else "ms" if longest <= 3 else "us" if longest <= 6 else "ns"
        offsets = int(pc.sum(pc.match_substring_regex(cells, _OFFSET)).as_py() or 0)
        zone = ("all carry a UTC offset, converted to UTC" if offsets == len(cells) else
                "no UTC offset: read as UTC (timezone: UTC; set timezone: if they are local "
                "time)" if offsets == 0 else
                f"{offsets} carry a UTC offset, the others are read as UTC")
        return DateGuess("timestamp", unit=unit, note=(
            f"ISO 8601 date-times in all {len(cells)} sampled values ({zone}): dtype timestamp, "
            f"unit {unit} (the finest fraction seen: {longest} digits; stored as int64 {unit} "
            "since 1970-01-01 UTC)"))
    fits = [f for f in DATE_FORMATS if _parses(cells, f)]
    if not fits:
        return _datetime_guess(cells)
    chosen = fits[0]
    note = (f"dates as {chosen!r} in all {len(cells)} sampled values: dtype date with "
            f"format: {chosen!r} (stored as int64 days since 1970-01-01)")
    if len(fits) > 1:
        note += f"; {fits[1]!r} reads them too: check which is meant"
    return DateGuess("date", format=chosen, note=note)


def _datetime_guess(cells: pa.Array) -> DateGuess | None:
    """Date-times in one of DATETIME_FORMATS: a timestamp of unit s read with that format."""
    fits = [f for f in DATETIME_FORMATS if _parses(cells, f)]
    if not fits:
        return None
    note = (f"date-times as {fits[0]!r} in all {len(cells)} sampled values (no UTC offset: "
            "read as UTC; set timezone: if they are local time): dtype timestamp, unit s, "
            f"format: {fits[0]!r} (stored as int64 s since 1970-01-01 UTC)")
    if len(fits) > 1:
        note += f"; {fits[1]!r} reads them too: check which is meant"
    return DateGuess("timestamp", unit="s", format=fits[0], note=note)


def _parses(cells: pa.Array, fmt: str) -> bool:
    """Every cell reads as a date in `fmt`, exactly: Arrow's strptime rolls 2020-02-30 over
    to March 1st, so each parsed date is written back and compared (etl.contract.dates, the
    rule the run applies)."""
    try:
        parsed = pc.strptime(cells, format=fmt, unit="s", error_is_null=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    if parsed.null_count:
        return False
    return not rolled_over(fmt, cells, parsed).any()


def marker_counts(cells: pa.Array, markers: tuple[str, ...] = NULL_MARKERS) -> dict[str, int]:
    """Null markers among trimmed, non-blank text cells, when every other cell is a number
    (or every other cell a date): marker -> cells; else {}."""
    if not len(cells):
        return {}
    is_marker = pc.is_in(cells, value_set=pa.array(markers, cells.type))
    if not pc.any(is_marker).as_py():
        return {}
    rest = cells.filter(pc.invert(is_marker))
    if not len(rest):
        return {}
    if not (_all(is_number(rest)) or date_guess(rest) is not None):
        return {}
    vc = pc.value_counts(cells.filter(is_marker))
    return dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True))


def count_in(cells: pa.Array, markers: list[str]) -> dict[str, int]:
    """How many trimmed cells equal each marker."""
    if not len(cells) or not markers:
        return {}
    hit = cells.filter(pc.is_in(cells, value_set=pa.array(markers, cells.type)))
    vc = pc.value_counts(hit)
    return dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True))


def thousands(cells: pa.Array) -> str | None:
    """A note when some cells are numbers with thousands separators (`135,450`) and every
    other cell is a plain number."""
    sep = pc.match_substring_regex(cells, _THOUSANDS)
    n = int(pc.sum(sep).as_py() or 0)
    if not n:
        return None
    rest = cells.filter(pc.invert(sep))
    if len(rest) and not _all(is_number(rest)):
        return None
    example = cells.filter(sep)[0].as_py()
    return (f"numbers with thousands separators ({example!r}, {n} sampled values): kept as "
            "text; a run does not read them as numbers: remove the separators (or a source "
            "option that parses them) to store numbers")


def text_cells(arr: pa.Array) -> pa.Array | None:
    """A string/binary column's trimmed, non-null, non-blank cells as large_string (None for
    other types or bytes that are not UTF-8)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):
        return None
    try:
        text = arr.cast(pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    text = pc.utf8_trim_whitespace(text.drop_null())
    keep = np.asarray(pc.not_equal(text, "").to_numpy(zero_copy_only=False), bool)
    return text.filter(pa.array(keep))

