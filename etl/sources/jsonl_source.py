"""JSON Lines: one JSON object per line.

Fast path: a block of lines goes to `pyarrow.json` in one call (nested lists come out as Arrow
list arrays). If pyarrow rejects the block, only that block is parsed again line by line with
`json.loads`, so just the invalid lines become BadRecords (`invalid_json`, `not_utf8`) with
their 1-based line, and the rest still go through. When the valid lines' types clash (a scalar
where other lines hold lists, `3` and `"3"`), the block goes out as Python lists, one value per
row: the encoder then rejects only the rows that do not fit the schema (`wrong_type`, ...).
Lines longer than `max_record_bytes` are `oversized_record`s, skipped while they stream past.
Blank lines are no records; positions are 0-based line indexes, `Block.lines` 1-based lines.

Strings are never rewritten: pyarrow.json infers a timestamp from a string that looks like one
("1970-01-01" would come back as "1970-01-01 00:00:00"), so a block whose inferred types hold a
date or time anywhere is parsed again with those columns typed as text (their other types
kept): every string keeps its bytes, in every block. `null_values:` (default none: JSON has
`null`) makes strings equal to a marker null, at any list depth, one Arrow kernel per column.

A JSON array file (`[ {...}, {...} ]`, e.g. a pretty-printed export) is read too: each element
is a record, its position the element's index, its line where it starts (etl.sources.json_array;
one split per file).
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
from etl.sources.file_source import excerpt, mark_nulls, null_values_option, utf8_bad_rows
from etl.sources.json_array import is_json_array, read_json_array
from etl.sources.lines import LineBlock, line_blocks, line_end
from etl.sources.text_source import LineSource


class JsonlReader(LineSource):
    """`format: jsonl`; options: block_rows, null_values."""

    OPTIONS = {"block_rows", "null_values"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        super().__init__(config, base_dir, where)
        self.null_values = null_values_option(self.opts, [], where)

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        if is_json_array(path, self.max_record_bytes):
            return [Split(path)]
        return super().splits(path, target_bytes)

    def read_split(self, split: Split) -> Iterator[Block]:
        if split.first and is_json_array(split.path, self.max_record_bytes):
            blocks = read_json_array(split.path, self.block_rows, self.max_record_bytes,
                                     lambda data, rows: _arrow(data, rows, multiline=True))
        else:
            blocks = self._read(split)
        for block in blocks:
            if self.null_values:
                block.columns = {n: _null_markers(c, self.null_values)
                                 for n, c in block.columns.items()}
            yield block

    def _read(self, split: Split) -> Iterator[Block]:
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


def _arrow(data: bytes, expected_rows: int, multiline: bool = False) -> pa.Table | None:
    """The block through pyarrow, or None when pyarrow cannot take all of it one row per line
    (`multiline`: one row per object, objects over several lines allowed). Strings stay
    strings: columns inferred as dates or times are parsed again as text."""
    read_options = pa_json.ReadOptions(block_size=max(len(data), 1 << 16))
    try:
        table = pa_json.read_json(io.BytesIO(data), read_options=read_options,
                                  parse_options=pa_json.ParseOptions(newlines_in_values=multiline))
        fixed = {f.name: _as_text_type(f.type) for f in table.schema}
        fixed = {n: t for n, t in fixed.items() if t is not None}
        if fixed:
            table = pa_json.read_json(io.BytesIO(data), read_options=read_options,
                                      parse_options=pa_json.ParseOptions(
                                          explicit_schema=pa.schema(list(fixed.items())),
                                          unexpected_field_behavior="infer",
                                          newlines_in_values=multiline))
    except pa.ArrowInvalid:
        return None
    # Two objects on one line parse as two rows: line positions would shift, so go slow.
    return table if table.num_rows == expected_rows else None


def _as_text_type(kind: pa.DataType) -> pa.DataType | None:
    """`kind` with every date/time type in it made a string (None: it holds none), so the
    strings pyarrow took for timestamps are parsed again as the text they are."""
    if pa.types.is_temporal(kind):
        return pa.string()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = _as_text_type(kind.value_type)
        return None if inner is None else pa.list_(inner)
    if pa.types.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        inner_types = [_as_text_type(f.type) for f in fields]
        if all(t is None for t in inner_types):
            return None
        return pa.struct([pa.field(f.name, f.type if t is None else t)
                          for f, t in zip(fields, inner_types, strict=True)])
    return None


def _null_markers(col: Any, markers: list[str]) -> Any:
    """A block column with its strings equal to a marker made null (Arrow columns: one kernel
    per column; the Python lists of a block whose types clash: value by value)."""
    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        return mark_nulls(col, markers)
    if isinstance(col, list):
        found = set(markers)

        def clean(v: Any) -> Any:
            if isinstance(v, str):
                return None if v in found else v
            if isinstance(v, list):
                return [clean(x) for x in v]
            return v

        return [clean(v) for v in col]
    return col


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
