"""The first records of each input, read by the project's own source readers.

Text formats (CSV, JSON Lines, text) are read as a byte range from the start of the file
(1 MiB, then 8x more while it holds fewer than N records), so a 1 GB file costs what its first
megabytes cost; binary formats give one block of N records (IDX and npy headers, Parquet row
batches, memory maps). A record the reader rejects in the sample is an error naming the file
and its line or offset: a schema guessed around a malformed record would be wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl.base.errors import BadInputError
from etl.sources import make_reader
from etl.sources.base import Block, Split
from etl.storage import fs

_TEXT = ("csv", "jsonl", "text")
_FIRST_RANGE = 1 << 20


@dataclass
class Sample:
    """Columns of the sampled records (one chunk per block), in the readers' column order."""

    columns: dict[str, list[Any]] = field(default_factory=dict)
    rows: int = 0
    complete: bool = True  # every record of every input is in the sample
    per_file: dict[str, int] = field(default_factory=dict)
    absent: dict[str, list[str]] = field(default_factory=dict)  # column -> files without it
    seen: set[str] = field(default_factory=set)  # columns of the file being sampled

    def add(self, block: Block, take: int) -> None:
        """A block's first `take` records; a column that earlier blocks (files) lacked starts
        with nulls for their records, one this block lacks gets nulls: several files with
        different columns give columns of equal length, missing where a file has none."""
        for name, col in block.columns.items():
            if name not in self.columns and self.rows:
                self.columns[name] = [pa.nulls(self.rows)]
            self.columns.setdefault(name, []).append(_head(col, take))
            self.seen.add(name)
        for name, chunks in self.columns.items():
            if name not in block.columns:
                chunks.append(pa.nulls(take))
        self.rows += take




def _head(col: Any, n: int) -> Any:
    if isinstance(col, (pa.Array, pa.ChunkedArray, np.ndarray)):
        return col[:n] if not isinstance(col, pa.Array) else col.slice(0, n)
    return list(col)[:n]


def _check(block: Block, limit_line: int | None = None) -> None:
    for bad in block.bad:
        if limit_line is not None and bad.line is not None and bad.line > limit_line:
            continue
        more = f" (and {len(block.bad) - 1} more in the sample)" if len(block.bad) > 1 else ""
        raise BadInputError(f"{bad.message()}{more}; fix the input (or sample other files) "
                            "before inferring a schema")


def sample(config: dict[str, Any], n: int, where: str = "infer-schema") -> Sample:
    """Up to `n` records of each input unit `config` (a job's source entry) names."""
    fmt = config["format"]
    reader = make_reader({**config, "block_rows": max(1, min(n, 65536))}, ".", where)
    out = Sample()
    for unit in reader.files():
        before = out.rows
        earlier = list(out.per_file)
        old = set(out.columns)
        out.seen = set()
        if fmt in _TEXT and not unit.endswith(".gz"):
            complete = _text_sample(reader, unit, n, out)
        else:
            complete = _block_sample(reader.read(unit), n, out)
        out.complete &= complete
        out.per_file[unit] = out.rows - before
        if out.rows > before:
            for name in out.columns:  # in column order: the summary lists them so
                if name not in out.seen:
                    out.absent.setdefault(name, []).append(unit)
                elif name not in old and earlier:
                    out.absent.setdefault(name, []).extend(earlier)
    return out


def _block_sample(blocks: Iterator[Block], n: int, out: Sample) -> bool:
    """Blocks until `n` records; True when the unit had no more."""
    taken = 0
    try:
        for block in blocks:
            take = min(block.num_rows, n - taken)
            _check(block, int(block.lines[take - 1]) if take and block.lines is not None
                   else None)
            if take:
                out.add(block, take)
            taken += take
            if taken >= n:  # complete only if this block's rest and the next are empty
                return take == block.num_rows and next(blocks, None) is None
    finally:
        close = getattr(blocks, "close", None)
        if close:
            close()
    return True


def _text_sample(reader: Any, path: str, n: int, out: Sample) -> bool:
    """A growing byte range from the start of the file until it holds `n` records."""
    size = fs.size(path)
    stop = _FIRST_RANGE
    while True:
        whole = stop >= size
        split = Split(path) if whole else Split(path, 0, 2, 0, stop)
        blocks = list(reader.read_split(split))
        rows = sum(b.num_rows for b in blocks)
        if rows >= n or whole:
            return _block_sample(iter(blocks), n, out) and whole
        stop *= 8
