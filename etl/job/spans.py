"""Date spans: which day's data a scheduled run converts, and how a job file names it.

A job file's source paths, `output` and (optionally) `shuffle.seed` may hold placeholders,
filled from the span's date:

    {date}  2026-11-21      {YYYY} 2026     {MM} 11     {DD} 21
    {span}  20778           days since 1970-01-01, as TFX's ExampleGen counts its spans

`run JOB --date D` fills them with D, `--from D1 --to D2` runs each day of the range, and
without either a job with placeholders converts yesterday (UTC): the usual "process the
finished day" of a daily schedule. Anything else in braces that looks like a name (`{YYY}`)
is an error naming it, so a typo never becomes a literal folder name; braces around other
text (`{a,b}`) are left alone.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from etl.base.errors import ConfigError
from etl.output.origin import strings_in  # noqa: F401 - re-exported: config, ranges

EPOCH = dt.date(1970, 1, 1)  # TFX: (datetime(y, m, d) - datetime(1970, 1, 1)).days
PLACEHOLDERS = ("date", "YYYY", "MM", "DD", "span")
_PLACEHOLDER = re.compile(r"\{(\w*)\}")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_RANGE_DAYS = 100_000  # a typo in a year (--from 0026-...) fails instead of listing millennia


@dataclass(frozen=True, order=True)
class Span:
    """One day of data."""

    date: dt.date

    @property
    def name(self) -> str:
        return self.date.isoformat()

    @property
    def number(self) -> int:
        """Days since 1970-01-01 (TFX's span number for a date)."""
        return (self.date - EPOCH).days

    def fields(self) -> dict[str, Any]:
        d = self.date
        return {"date": self.name, "YYYY": f"{d.year:04d}", "MM": f"{d.month:02d}",
                "DD": f"{d.day:02d}", "span": self.number}

    def __str__(self) -> str:
        return self.name


def parse_date(text: str, where: str = "--date") -> Span:
    """`2026-11-21` -> Span; anything else (another format, 2026-02-30) is a ConfigError."""
    value = str(text).strip()
    try:
        if not _DATE.match(value):
            raise ValueError("not YYYY-MM-DD")
        return Span(dt.date.fromisoformat(value))
    except ValueError as e:
        raise ConfigError(f"{where}: {text!r} is not a date; use YYYY-MM-DD, e.g. 2026-11-21 "
                          f"({e})") from None


def default_span(now: dt.datetime | None = None) -> Span:
    """Yesterday in UTC: the last finished day, whatever the machine's time zone."""
    now = now or dt.datetime.now(dt.timezone.utc)
    if now.tzinfo is None:
        raise ValueError("default_span needs an aware datetime")
    return Span(now.astimezone(dt.timezone.utc).date() - dt.timedelta(days=1))


def span_range(first: Span, last: Span) -> list[Span]:
    """Every day from `first` to `last`, both included, oldest first."""
    if last < first:
        raise ConfigError(f"--from {first} is after --to {last}; give the older date first "
                          "(--reverse runs newest first)")
    days = (last.date - first.date).days + 1
    if days > MAX_RANGE_DAYS:
        raise ConfigError(f"--from {first} --to {last} spans {days:,} days; at most "
                          f"{MAX_RANGE_DAYS:,} at once")
    return [Span(first.date + dt.timedelta(days=i)) for i in range(days)]


def placeholders(text: str) -> list[str]:
    """The placeholder names in `text` (known or not), in order."""
    return _PLACEHOLDER.findall(text)


def fill(text: str, span: Span, where: str = "job") -> str:
    """`text` with every placeholder replaced by the span's value; an unknown one (`{YYY}`)
    is a ConfigError naming it and the known ones."""
    values = span.fields()

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            raise ConfigError(f"{where}: unknown placeholder {{{name}}} in {text!r}; known: "
                              + ", ".join(f"{{{k}}}" for k in PLACEHOLDERS))
        return str(values[name])

    return _PLACEHOLDER.sub(one, text)


def fill_all(value: Any, span: Span, where: str = "job") -> Any:
    """A paths value (string, list, mapping, nested) with every string filled."""
    if isinstance(value, str):
        return fill(value, span, where)
    if isinstance(value, dict):
        return {k: fill_all(v, span, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [fill_all(v, span, where) for v in value]
    return value
