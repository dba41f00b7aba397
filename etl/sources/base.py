"""What every raw-source reader produces: blocks of columns from one input file.

Readers are Beam-free: they take a path (any Beam FileSystems path, local or gs://) and
yield `Block`s of a few thousand to ~64k records as NumPy/Arrow columns. Rows a reader
cannot even parse (a malformed CSV line, invalid JSON) come back as `BadRecord`s in the
block, with the file and line; every other row still goes through.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from etl.errors import BadRecord

DEFAULT_BLOCK_ROWS = 65536
# A record (raw line or field, or serialized proto) above this is rejected as `oversized_record`
# before the shuffle; the job option `max_record_bytes` changes it.
DEFAULT_MAX_RECORD_BYTES = 64 * 2**20


@dataclass
class Block:
    """Columns of consecutive records of one file.

    `positions` number the records within their file (0-based, stable across reruns): they
    feed the shuffle key, so the same input always gives the same permutation.
    `lines` (text formats: the 1-based physical line each row starts on) and `offsets`
    (binary formats: each record's byte offset in its file, where known) only name rows in
    error reports, so a user can open the file at the right place.
    `bad` are the rows rejected while reading; `num_read` counts them with the good rows
    (an `unreadable_rest` entry counts as the records it stands for).
    """

    columns: dict[str, Any]
    positions: np.ndarray
    source: str
    bad: list[BadRecord] = field(default_factory=list)
    lines: np.ndarray | None = None
    offsets: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return len(self.positions)

    @property
    def num_read(self) -> int:
        return self.num_rows + sum(b.count for b in self.bad)


class SourceReader(Protocol):
    """One configured source format (from a job file's `sources:` entry)."""

    def files(self) -> list[str]:
        """Input files (globs expanded), sorted; what the manifest lists under `inputs`."""

    def read(self, path: str) -> Iterator[Block]:
        """Blocks of one input file, in file order."""

    # Optional: `prepare(schema, max_record_bytes)` is called once before any `read` when the
    # reader defines it: the schema to check records against (image shapes, serialized
    # records, numeric columns to parse up front) and the size above which a record is
    # rejected as `oversized_record` without being held whole in memory.


def open_file(path: str) -> Any:
    """Binary read handle for a local or gs:// path (through Beam's FileSystems when remote)."""
    from etl import fs  # noqa: PLC0415

    return fs.open_read(path)


def expand(patterns: list[str] | str) -> list[str]:
    """Expand globs through Beam FileSystems (local and gs:// alike); sorted, de-duplicated."""
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    if isinstance(patterns, str):
        patterns = [patterns]
    found: set[str] = set()
    for result in FileSystems.match(list(patterns)):
        found.update(m.path for m in result.metadata_list)
    return sorted(found)


def options(config: Mapping[str, Any], allowed: set[str], where: str) -> dict[str, Any]:
    from etl.errors import ConfigError  # noqa: PLC0415

    unknown = set(config) - allowed - {"format", "paths"}
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    return dict(config)
