"""Dates and times as stored integers: `dtype: date` and `dtype: timestamp`.

A `date` is stored as int64 days since 1970-01-01; a `timestamp` as int64 `unit`s (s, ms, us,
ns; default us) since 1970-01-01T00:00:00 UTC. Both travel as Int64List, so every reader
(make_dataset, open_records, TFX) gets the integer; `to_datetime64` / `to_strings` turn it
back into NumPy datetimes or ISO text.

How a value becomes that integer (exactly, or the row is rejected and counted):
- text (CSV cells, JSON strings): ISO 8601 (`2010-01-01`, `2010-01-01T12:30:00.5`,
  `2010-01-01 12:30:00+02:00`, `...Z`) or the feature's `format:` (strptime codes). Text
  with an offset is converted to UTC; naive text is read as wall time in the feature's
  `timezone:` (an IANA name, default UTC). A wall time a clock change skips or repeats in
  that zone is rejected (never guessed). Text that does not parse: `unparsable_date`.
- Arrow date32/date64/timestamp columns (Parquet, pandas): their integers, converted between
  units only when exact; a naive Arrow timestamp is wall time in `timezone:` like naive text.
- a value finer than the unit (12:30:00.5 for `unit: s`) or a date with a time of day is
  rejected (`unparsable_date`, naming the unit that would hold it): never truncated.
- numbers are not dates: a number is rejected as `wrong_type` (declare int64 to keep epoch
  numbers as they are).

The fast path is vectorised (Arrow casts and `assume_timezone`); a batch with a value the
fast path cannot take (a year outside 1678-2261, an invalid day, a `%f` format) goes through
the exact Python path below, which is also the reference the tests compare the fast path to.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.base.errors import quote

UNITS = ("s", "ms", "us", "ns")
NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1, "D": 86400 * 10**9}
_INT64 = (-(2**63), 2**63 - 1)
_EPOCH = dt.date(1970, 1, 1).toordinal()
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
                  r"(Z|[+-]\d{2}(?::?\d{2})?)?)?")
_ISO_ARROW = "^" + _ISO.pattern + "$"
# an offset after a time of day ("2010-01-01" ends in "-01", which is not one)
_OFFSET = r"[T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)$"
Why = tuple[str, str]


@dataclass(frozen=True)
class TimeSpec:
    """What a date/timestamp feature declares: `kind` date|timestamp, its unit ("D" for
    dates), the zone naive values are read in, and an optional strptime `format`."""

    kind: str
    unit: str = "us"
    timezone: str = "UTC"
    format: str | None = None

    @property
    def ns(self) -> int:
        """Nanoseconds per stored step."""
        return NS_PER[self.unit]

    @property
    def expected(self) -> str:
        if self.format:
            return f"text in the format {self.format!r}"
        if self.kind == "date":
            return "an ISO 8601 date such as 2010-01-01"
        return "an ISO 8601 date-time such as 2010-01-01T12:30:00 or 2010-01-01 12:30:00+02:00"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.kind}
        if self.kind == "timestamp":
            out["unit"] = self.unit
            if self.timezone != "UTC":
                out["timezone"] = self.timezone
        if self.format:
            out["format"] = self.format
        return out


def time_spec(kind: str, spec: Any, fail: Any) -> TimeSpec:
    """The `unit`, `timezone` and `format` keys of a date/timestamp feature, checked."""
    unit = spec.get("unit")
    zone = spec.get("timezone")
    fmt = spec.get("format")
    if kind == "date":
        if unit is not None or zone is not None:
            raise fail("a date has no unit or timezone (days since 1970-01-01); declare "
                       "dtype: timestamp for a time of day")
        unit = "D"
        zone = "UTC"
    else:
        unit = "us" if unit is None else str(unit)
        if unit not in UNITS:
            raise fail(f"unit must be one of {list(UNITS)}, got {unit!r}")
        zone = "UTC" if zone is None else str(zone)
        try:
            zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise fail(f"unknown timezone {zone!r}: use an IANA name such as UTC, "
                       "Europe/Berlin or America/New_York") from e
    if fmt is not None and (not isinstance(fmt, str) or "%" not in fmt):
        raise fail(f"format must be a strptime pattern such as '%d/%m/%Y', got {fmt!r}")
    return TimeSpec(kind, unit, zone, fmt)


def is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


# ---- conversion -------------------------------------------------------------------------
def to_epoch(spec: TimeSpec, leaves: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """Leaf values -> (int64 values, bad mask, reasons): the `columns.convert_leaves`
    contract. Reasons is an object array of `Why` per bad leaf (None: missing)."""
    if isinstance(leaves, np.ndarray):
        if leaves.dtype.kind == "M":
            leaves = pa.array(leaves)
        elif leaves.dtype == object:
            leaves = pa.array(leaves.tolist())
        else:
            leaves = pa.array(leaves)
    if pa.types.is_dictionary(leaves.type):
        leaves = leaves.dictionary_decode()
    n = len(leaves)
    null = np.asarray(leaves.is_null().to_numpy(zero_copy_only=False), bool)
    reasons = np.full(n, None, object)
    if pa.types.is_null(leaves.type):
        return np.zeros(n, np.int64), null, reasons
    t = leaves.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or (
            pa.types.is_large_binary(t)):
        return _from_text(spec, leaves, reasons)
    if is_temporal(t):
        return _from_arrow(spec, leaves, null, reasons)
    bad = ~null
    if bad.any():
        found = leaves.filter(pa.array(bad)).to_pylist()
        reasons[np.flatnonzero(bad)] = [
            ("wrong_type", f"expected {spec.expected}, found {t} value {quote(v)} (declare "
                           "dtype: int64 to store numbers as they are)") for v in found]
    return np.zeros(n, np.int64), bad | null, reasons


def _from_text(spec: TimeSpec, leaves: pa.Array, reasons: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    text = leaves.cast(pa.large_string())
    text = pc.utf8_trim_whitespace(text)
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.large_string()), text)
    null = np.asarray(text.is_null().to_numpy(zero_copy_only=False), bool)
    n = len(text)
    values = np.zeros(n, np.int64)
    fast = _fast_text(spec, text, null)
    if fast is not None:
        ns, bad_ns = fast
        good = ~null & ~bad_ns
        values, unit_bad = _to_unit(spec, ns, good)
        _why_unit(spec, unit_bad, text, reasons)
        bad = null | unit_bad
        if bad_ns.any():  # only the rejected ones go the slow way, for their reason
            bad |= _slow(spec, text, bad_ns, values, reasons)
    else:
        bad = null | _slow(spec, text, ~null, values, reasons)
    return values, bad, reasons


def _fast_text(spec: TimeSpec, text: pa.Array, null: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray] | None:
    """Nanoseconds since the epoch (UTC) for every cell, and the cells the fast path did not
    take (left to the slow path, which words their reason); None: the whole batch is slow."""
    try:
        if spec.format:
            aware = "%z" in spec.format
            parsed = pc.strptime(text, format=spec.format, unit="ns", error_is_null=True)
            failed = np.asarray(parsed.is_null().to_numpy(zero_copy_only=False), bool) & ~null
            failed |= rolled_over(spec.format, text, parsed) & ~null
            ns = np.asarray(parsed.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
            if not aware:
                ns, zone_bad = _assume(spec, ns, ~failed & ~null)
                failed |= zone_bad
            return ns, failed
        ok = np.asarray(pc.match_substring_regex(text, _ISO_ARROW).fill_null(False)
                        .to_numpy(zero_copy_only=False), bool)
        has_offset = np.asarray(pc.match_substring_regex(text, _OFFSET).fill_null(False)
                                .to_numpy(zero_copy_only=False), bool) & ok
        naive = ok & ~has_offset
        ns = np.zeros(len(text), np.int64)
        if naive.any():
            part = text.filter(pa.array(naive)).cast(pa.timestamp("ns"))
            ns[naive] = np.asarray(part.cast(pa.int64()).to_numpy(zero_copy_only=False))
            ns, zone_bad = _assume(spec, ns, naive)
            ok &= ~zone_bad
        if has_offset.any():
            part = text.filter(pa.array(has_offset)).cast(pa.timestamp("ns", "UTC"))
            ns[has_offset] = np.asarray(part.cast(pa.int64()).to_numpy(zero_copy_only=False))
        return ns, ~ok & ~null
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        return None


def rolled_over(fmt: str, text: pa.Array, parsed: pa.Array) -> np.ndarray:
    """Cells Arrow's strptime read as another date than they say: it rolls 2020/02/30 over to
    March 1st (and 25:00 to the next day) without an error. Each parsed value is written back
    in `fmt` and compared with its text (leading zeros and case aside); a cell that differs
    goes to the exact Python path, which rejects an impossible date or reads the text
    (`%z`, `%f` and other spellings strftime writes otherwise) correctly."""
    back = pc.strftime(parsed, format=fmt)

    def norm(a: pa.Array) -> pa.Array:
        return pc.utf8_lower(pc.replace_substring_regex(a.cast(pa.large_string()),
                                                        r"(^|\D)0+(\d)", r"\1\2"))

    same = pc.equal(norm(text), norm(back)).fill_null(True)
    return ~np.asarray(same.to_numpy(zero_copy_only=False), bool)


def _assume(spec: TimeSpec, ns: np.ndarray, naive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Naive wall times (ns) -> UTC in the spec's zone; the wall times a clock change skips
    or repeats come back flagged (left to the slow path, which says which)."""
    flagged = np.zeros(len(ns), bool)
    if spec.timezone == "UTC" or not naive.any():
        return ns, flagged
    wall = pa.array(ns[naive], pa.timestamp("ns"))
    early = pc.assume_timezone(wall, spec.timezone, ambiguous="earliest", nonexistent="earliest")
    late = pc.assume_timezone(wall, spec.timezone, ambiguous="latest", nonexistent="latest")
    e = np.asarray(early.cast(pa.int64()).to_numpy(zero_copy_only=False))
    la = np.asarray(late.cast(pa.int64()).to_numpy(zero_copy_only=False))
    out = ns.copy()
    out[naive] = e
    flagged[np.flatnonzero(naive)[e != la]] = True
    return out, flagged


def _to_unit(spec: TimeSpec, ns: np.ndarray, good: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ns -> the stored unit; the values with a remainder are flagged (never truncated)."""
    step = spec.ns
    if step == 1:
        return ns, np.zeros(len(ns), bool)
    rem = np.mod(ns, step)
    return np.floor_divide(ns, step), good & (rem != 0)


def _why_unit(spec: TimeSpec, mask: np.ndarray, text: Any, reasons: np.ndarray) -> None:
    idx = np.flatnonzero(mask)
    if not len(idx):
        return
    found = text.take(pa.array(idx)).to_pylist() if isinstance(text, pa.Array) else [
        text[i] for i in idx]
    reasons[idx] = [("unparsable_date", _finer(spec, v)) for v in found]


def _finer(spec: TimeSpec, value: Any) -> str:
    if spec.kind == "date":
        return (f"{quote(value)} has a time of day (a date feature stores whole days; declare "
                "dtype: timestamp to keep the time)")
    finer = {"s": "ms", "ms": "us", "us": "ns"}[spec.unit]
    return (f"{quote(value)} is more precise than unit {spec.unit} (it would be truncated); "
            f"declare unit: {finer} or finer")


def _slow(spec: TimeSpec, text: pa.Array, rows: np.ndarray, values: np.ndarray,
          reasons: np.ndarray) -> np.ndarray:
    """The exact Python path for the `rows` cells: their value, or their reason; returns
    the mask of the cells it rejected."""
    failed = np.zeros(len(values), bool)
    idx = np.flatnonzero(rows)
    cells = text.take(pa.array(idx)).to_pylist() if len(idx) else []
    zone = zoneinfo.ZoneInfo(spec.timezone)
    for i, cell in zip(idx.tolist(), cells, strict=True):
        try:
            values[i] = parse_one(spec, cell, zone)
        except ValueError as e:
            reasons[i] = ("unparsable_date", str(e))
            failed[i] = True
    return failed


def parse_one(spec: TimeSpec, cell: str, zone: dt.tzinfo | None = None) -> int:
    """One text value -> its stored integer, exactly; ValueError with the reason otherwise.
    The reference the vectorised path is tested against."""
    zone = zone or zoneinfo.ZoneInfo(spec.timezone)
    cell = cell.strip()
    if spec.format:
        try:
            got = dt.datetime.strptime(cell, spec.format)
        except ValueError as e:
            raise ValueError(f"cannot parse {quote(cell)} as {spec.kind}: expected "
                             f"{spec.expected} ({e})") from None
        fields = (got.year, got.month, got.day, got.hour, got.minute, got.second,
                  got.microsecond * 1000)
        offset = got.utcoffset()
        offset_s = None if offset is None else int(offset.total_seconds())
    else:
        m = _ISO.fullmatch(cell)
        if not m:
            raise ValueError(f"cannot parse {quote(cell)} as {spec.kind}: expected "
                             f"{spec.expected}")
        y, mo, d, h, mi, s, frac, off = m.groups()
        fields = (int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0),
                  int((frac or "").ljust(9, "0")))
        offset_s = None if off is None else _offset_seconds(off)
    ns = _wall_ns(cell, fields, offset_s, spec, zone)
    rem = ns % spec.ns
    if rem:
        raise ValueError(_finer(spec, cell))
    value = ns // spec.ns
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"{quote(cell)} does not fit int64 {spec.unit} since 1970-01-01; "
                         "declare a coarser unit")
    return value


def _offset_seconds(off: str) -> int:
    if off == "Z":
        return 0
    sign = -1 if off[0] == "-" else 1
    digits = off[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)


def _wall_ns(cell: str, fields: tuple[int, ...], offset_s: int | None, spec: TimeSpec,
             zone: dt.tzinfo) -> int:
    y, mo, d, h, mi, s, frac = fields
    try:
        wall = dt.datetime(y, mo, d, h, mi, s)
    except ValueError as e:
        raise ValueError(f"cannot parse {quote(cell)} as {spec.kind}: {e}") from None
    days = wall.date().toordinal() - _EPOCH
    secs = days * 86400 + h * 3600 + mi * 60 + s
    if offset_s is None and spec.timezone != "UTC":
        first = wall.replace(tzinfo=zone, fold=0)
        second = wall.replace(tzinfo=zone, fold=1)
        a, b = first.utcoffset(), second.utcoffset()
        if a != b:
            back = first.astimezone(dt.timezone.utc).astimezone(zone).replace(tzinfo=None)
            what = "does not exist" if back != wall else "is ambiguous"
            raise ValueError(f"{quote(cell)} {what} in {spec.timezone} (a clock change); "
                             "write it with its UTC offset, e.g. +01:00")
        offset_s = int(a.total_seconds()) if a is not None else 0
    return (secs - (offset_s or 0)) * 10**9 + frac


# ---- typed Arrow inputs -----------------------------------------------------------------
def _from_arrow(spec: TimeSpec, leaves: pa.Array, null: np.ndarray, reasons: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """date32/date64/timestamp[*, tz] -> the stored unit, exactly."""
    t = leaves.type
    raw = _integers(leaves)
    if pa.types.is_date32(t):
        step_ns, naive = NS_PER["D"], True
    elif pa.types.is_date64(t):
        step_ns, naive = NS_PER["ms"], True
    else:
        step_ns, naive = NS_PER[t.unit], t.tz is None
    values, lost, over = rescale(raw, step_ns, spec.ns)
    lost &= ~null
    over &= ~null
    unsure = np.zeros(len(leaves), bool)
    if naive and spec.kind == "timestamp" and spec.timezone != "UTC":
        values, unsure = _zone_shift(spec, values, ~null & ~lost & ~over, reasons, leaves)
    if lost.any():
        idx = np.flatnonzero(lost)
        found = leaves.take(pa.array(idx)).to_pylist()
        reasons[idx] = [("unparsable_date", _finer(spec, str(v)) + f" ({t} input)")
                        for v in found]
    if over.any():
        idx = np.flatnonzero(over)
        found = leaves.take(pa.array(idx)).to_pylist()
        reasons[idx] = [("out_of_range", f"{quote(str(v))} does not fit int64 {spec.unit} "
                                         "since 1970-01-01; declare a coarser unit")
                        for v in found]
    return values, null | lost | over | unsure, reasons


def _integers(leaves: pa.Array) -> np.ndarray:
    """The integers under a date32/date64/timestamp array (nulls as 0), without a copy
    where the layout allows."""
    width = pa.int32() if pa.types.is_date32(leaves.type) else pa.int64()
    ints = pa.Array.from_buffers(width, len(leaves), leaves.buffers()[:2], offset=leaves.offset)
    return np.asarray(ints.fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)


def rescale(raw: np.ndarray, from_ns: int, to_ns: int) -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]:
    """Integers in one step -> another: (values, lost precision mask, overflow mask)."""
    n = len(raw)
    if from_ns == to_ns:
        return raw.astype(np.int64), np.zeros(n, bool), np.zeros(n, bool)
    if from_ns > to_ns:
        factor = from_ns // to_ns
        limit = _INT64[1] // factor
        over = (raw > limit) | (raw < -limit)
        return np.where(over, 0, raw) * factor, np.zeros(n, bool), over
    factor = to_ns // from_ns
    return np.floor_divide(raw, factor), np.mod(raw, factor) != 0, np.zeros(n, bool)


def _zone_shift(spec: TimeSpec, values: np.ndarray, ok: np.ndarray, reasons: np.ndarray,
                leaves: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Naive Arrow values (wall time, in the stored unit) -> UTC in the spec's zone; the
    wall times a clock change skips or repeats are flagged (and given their reason)."""
    unit = spec.unit
    wall = pa.array(np.where(ok, values, 0), pa.timestamp(unit))
    e = np.asarray(pc.assume_timezone(wall, spec.timezone, ambiguous="earliest",
                                      nonexistent="earliest").cast(pa.int64()).to_numpy(
        zero_copy_only=False))
    la = np.asarray(pc.assume_timezone(wall, spec.timezone, ambiguous="latest",
                                       nonexistent="latest").cast(pa.int64()).to_numpy(
        zero_copy_only=False))
    unsure = ok & (e != la)
    if unsure.any():
        idx = np.flatnonzero(unsure)
        found = leaves.take(pa.array(idx)).to_pylist()
        reasons[idx] = [("unparsable_date", f"{quote(str(v))} is ambiguous or does not exist "
                                            f"in {spec.timezone} (a clock change)")
                        for v in found]
    return np.where(ok, e, values), unsure


# ---- the reading side ---------------------------------------------------------------------
def to_datetime64(values: Any, feature: Any) -> np.ndarray:
    """Stored integers of a date/timestamp feature (any array-like, e.g. a NumPy array from
    open_records or `tensor.numpy()` from make_dataset) -> NumPy datetime64 in UTC, same
    shape: `datetime64[D]` for dates, `datetime64[unit]` for timestamps."""
    spec = _spec_of(feature)
    arr = np.asarray(values, np.int64)
    unit = "D" if spec.kind == "date" else spec.unit
    return arr.view(f"datetime64[{unit}]")


def to_strings(values: Any, feature: Any) -> np.ndarray:
    """Stored integers -> ISO 8601 text (UTC for timestamps, with a trailing `Z`)."""
    spec = _spec_of(feature)
    times = to_datetime64(values, feature)
    text = np.datetime_as_string(times, unit="D" if spec.kind == "date" else spec.unit)
    return text if spec.kind == "date" else np.char.add(text, "Z")


def _spec_of(feature: Any) -> TimeSpec:
    spec = feature if isinstance(feature, TimeSpec) else getattr(feature, "time", None)
    if spec is None:
        raise ValueError(f"feature {getattr(feature, 'name', feature)!r} is not a date or "
                         "timestamp feature")
    return spec
