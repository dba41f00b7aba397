"""JSON Lines: one JSON object per line.

Fast path: a block of lines goes to `pyarrow.json` in one call (nested lists come out as Arrow
list arrays). If pyarrow rejects the block, only that block is parsed again line by line with
`json.loads`, so just the invalid lines become BadRecords (`invalid_json`, `not_utf8`) with
their 1-based line, and the rest still go through. When the valid lines' types clash (a scalar
where other lines hold lists, `3` and `"3"`), the block goes out as Python lists, one value per
row: the encoder then rejects only the rows that do not fit the schema (`wrong_type`, ...).
Lines longer than `max_record_bytes` are `oversized_record`s, skipped while they stream past.
Blank lines are no records; positions are 0-based line indexes, `Block.lines` 1-based lines.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from etl.base.errors import BadRecord
from etl.sources.base import Block, Split
from etl.sources.files import excerpt, utf8_bad_rows
from etl.sources.lines import LineBlock, line_blocks, line_end
from etl.sources.text_source import LineSource


class JsonlReader(LineSource):
    """`format: jsonl`; options: block_rows."""

    def read_split(self, split: Split) -> Iterator[Block]:
        path = split.path
        for block in line_blocks(split, self.block_rows, self.max_record_bytes):
            oversized = block.oversized_records(path, self.max_record_bytes)
            rows = np.flatnonzero(~block.blank() & ~block.oversized_mask())
            positions = block.first + rows
            # pyarrow.json takes bytes that are not UTF-8 into string columns without a word
            valid = not utf8_bad_rows(block.binary()).any()
            # oversized lines are empty in block.data: pyarrow skips them like blank ones
            table = _arrow(block.data, len(rows)) if valid else None
            if table is not None:
                columns = {n: table.column(n).combine_chunks() for n in table.schema.names}
                yield Block(columns=columns, positions=positions, source=path, bad=oversized,
                            lines=positions + 1, end_offset=line_end(block, path))
            else:
                out = _line_by_line(block, rows, path)
                out.bad = sorted(out.bad + oversized, key=lambda b: b.line or 0)
                out.end_offset = line_end(block, path)
                yield out


def _arrow(data: bytes, expected_rows: int) -> pa.Table | None:
    """The block through pyarrow, or None when pyarrow cannot take all of it one row per line."""
    try:
        table = pa_json.read_json(
            io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=max(len(data), 1 << 16))
        )
    except pa.ArrowInvalid:
        return None
    # Two objects on one line parse as two rows: line positions would shift, so go slow.
    return table if table.num_rows == expected_rows else None


def _line_by_line(block: LineBlock, rows: np.ndarray, path: str) -> Block:
    good: list[int] = []
    records: list[dict[str, Any]] = []
    bad: list[BadRecord] = []
    for i in rows.tolist():
        line = block.first + i + 1
        raw = block.line(i)
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append(BadRecord(path, "not_utf8", "not valid UTF-8 text", line=line,
                                 raw=excerpt(raw)))
            continue
        except json.JSONDecodeError as e:
            bad.append(BadRecord(path, "invalid_json", f"invalid JSON: {e.msg} at column {e.colno}",
                                 line=line, raw=excerpt(raw)))
            continue
        if not isinstance(value, dict):
            bad.append(BadRecord(path, "invalid_json",
                                 f"expected a JSON object, got {type(value).__name__}",
                                 line=line, raw=excerpt(raw)))
            continue
        good.append(i)
        records.append(value)
    positions = block.first + np.array(good, np.int64)
    # The valid lines usually go through pyarrow after all (so types match the fast path);
    # if their types clash (3 in one line, "3" in another, a scalar among lists) the encoder
    # gets Python lists and rejects just the rows that do not fit the schema.
    table = _arrow(b"\n".join(block.line(i) for i in good), len(good)) if good else None
    if table is not None:
        columns: dict[str, Any] = {n: table.column(n).combine_chunks() for n in table.schema.names}
    else:
        names = list(dict.fromkeys(k for r in records for k in r))
        columns = {n: [r.get(n) for r in records] for n in names}
    return Block(columns=columns, positions=positions, source=path, bad=bad, lines=positions + 1)
