"""A file read as 1 split and as N, compared value by value (tests/test_split_reads.py and the
CSV dialect tests): the positions, lines and bad records every split gives are what the
shuffle keys and the dead-letter output are made of."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa

from etl.sources.base import Block, Source, Split


def _values(col: Any, as_text: bool) -> list[Any]:
    """Values as text: the CSV fast path gives numbers where the careful path gives their text
    (the encoder parses either the same way), and a split may take either path."""
    if isinstance(col, pa.ChunkedArray | pa.Array):
        values = col.to_pylist()
    elif isinstance(col, np.ndarray):
        values = col.tolist()
    else:
        values = list(col)
    if not as_text:
        return values
    return [v if isinstance(v, str | list | bytes) or v is None else str(v) for v in values]


def flatten(blocks: list[Block], as_text: bool = False) -> dict[str, Any]:
    """Everything a read gives, block boundaries left out."""
    names = sorted({n for b in blocks for n in b.columns})
    out: dict[str, Any] = {n: [] for n in names}
    for b in blocks:
        for n in names:
            out[n] += _values(b.columns[n], as_text) if n in b.columns else [None] * b.num_rows
    out["positions"] = [p for b in blocks for p in np.asarray(b.positions).tolist()]
    out["lines"] = [x for b in blocks if b.lines is not None for x in np.asarray(b.lines).tolist()]
    out["sources"] = sorted({b.source for b in blocks})
    out["bad"] = [(r.source, r.code, r.reason, r.line, r.record, r.byte, r.raw, r.count)
                  for b in blocks for r in b.bad]
    out["read"] = sum(b.num_read for b in blocks)
    return out


def split_sizes(size: int) -> list[int]:
    """Targets giving 2, 3 and 7 splits, and splits of a few records each."""
    return [size // 2 + 1, size // 3 + 1, size // 7 + 1, 40, 1]


def check_splits(reader: Source, path: str, size: int, expect_splits: bool | None = True,
                 schema: Any = None, limit: int | None = None) -> dict[str, Any]:
    """1 vs N splits; returns the whole read (for the tests' own exact checks)."""
    if schema is not None or limit is not None:
        reader.prepare(schema, limit or 64 << 20)
    blocks = list(reader.read(path))
    whole, text = flatten(blocks), flatten(blocks, as_text=True)
    assert flatten(list(reader.read_split(Split(path)))) == whole
    counts = []
    for target in split_sizes(size):
        splits = reader.splits(path, target)
        assert [s.index for s in splits] == list(range(len(splits)))
        assert all(s.count == len(splits) and s.path == path for s in splits)
        assert pickle.loads(pickle.dumps(splits)) == splits  # they travel to workers
        counts.append(len(splits))
        blocks = [b for s in splits for b in reader.read_split(s)]
        got = flatten(blocks, as_text=True)
        assert got == text, f"target {target}: {len(splits)} splits differ from the whole read"
    if expect_splits is None:
        pass
    elif expect_splits:
        assert counts[0] >= 2 and counts[-1] > counts[2], counts
    else:
        assert counts == [1] * len(counts)
    return whole
