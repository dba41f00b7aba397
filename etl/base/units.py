"""Sizes and durations as people write them in job files and on the command line
(`128MB`, `1GiB`, `90s`, `24h`), and as every message shows them (`1.5 MB`): one parser and
one formatter, so the progress bar, the summary, the report and the errors agree.
"""

from __future__ import annotations

import re
from typing import Any

from etl.base.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*$", re.I)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "K": 10**3, "M": 10**6,
          "G": 10**9, "T": 10**12}
# the default `max_record_bytes`: a record (raw line, serialized proto) larger than this is
# rejected as oversized_record, skipped while it streams past, never held whole
DEFAULT_MAX_RECORD_BYTES = 64 * 2**20


def parse_size(value: Any, where: str, allow_zero: bool = False) -> int:
    """`128MB`, `1GiB`, `4096` -> bytes; a positive size (or 0 where `allow_zero`)."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: cannot read size {value!r}; use e.g. 128MB or 1GiB")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = f"{value:f}" if isinstance(value, float) else str(value)
    m = _SIZE.match(str(value))
    unit = m.group(2).upper() if m else ""
    if not m or unit not in _UNITS:
        raise ConfigError(f"{where}: cannot read size {value!r}; use e.g. 128MB or 1GiB "
                          "(a positive number, optionally with a unit)")
    size = int(float(m.group(1)) * _UNITS[unit])
    if size < 0 or (size == 0 and not allow_zero):
        raise ConfigError(f"{where}: size must be {'>= 0' if allow_zero else '> 0'}, "
                          f"got {value!r}")
    return size


def format_size(n: float) -> str:
    """Bytes for people, in the units parse_size reads: `512 B`, `1.5 MB` (powers of 1000, one
    decimal): the progress bar, the summary, the report and error messages all show these."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$", re.I)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, where: str) -> float:
    """`90s`, `30m`, `24h`, `2d` or plain seconds -> seconds (> 0)."""
    m = _DURATION.match(str(value))
    seconds = float(m.group(1)) * _SECONDS[(m.group(2) or "s").lower()] if m else 0
    if not m or seconds <= 0:
        raise ConfigError(f"{where}: cannot read duration {value!r}; use e.g. 90s, 30m, 24h")
    return seconds
