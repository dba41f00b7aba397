"""Split reads: a file read as 1 split or as N gives the same records, positions, lines and
bad records (what the shuffle keys and the dead-letter output are made of).

Every file is generated here; each test reads it whole, then as 2, 3, 7 splits and as splits
so small that each holds a few records, and compares the concatenation value by value.
"""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from etl.idx import write_idx
from etl.sources import make_reader
from etl.sources.base import Block, Source, Split

WHERE = "jobs/t.yaml: sources.train"


def _values(col: Any) -> list[Any]:
    if isinstance(col, pa.ChunkedArray | pa.Array):
        return col.to_pylist()
    if isinstance(col, np.ndarray):
        return col.tolist()
    return list(col)


def flatten(blocks: list[Block]) -> dict[str, Any]:
    """Everything a read gives, block boundaries left out."""
    names = sorted({n for b in blocks for n in b.columns})
    out: dict[str, Any] = {n: [] for n in names}
    for b in blocks:
        for n in names:
            out[n] += _values(b.columns[n]) if n in b.columns else [None] * b.num_rows
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


def check_splits(reader: Source, path: str, size: int, expect_splits: bool = True,
                 schema: Any = None, limit: int | None = None) -> dict[str, Any]:
    """1 vs N splits; returns the whole read (for the tests' own exact checks)."""
    if schema is not None or limit is not None:
        reader.prepare(schema, limit or 64 << 20)
    whole = flatten(list(reader.read(path)))
    assert flatten(list(reader.read_split(Split(path)))) == whole
    counts = []
    for target in split_sizes(size):
        splits = reader.splits(path, target)
        assert [s.index for s in splits] == list(range(len(splits)))
        assert all(s.count == len(splits) and s.path == path for s in splits)
        assert pickle.loads(pickle.dumps(splits)) == splits  # they travel to workers
        counts.append(len(splits))
        blocks = [b for s in splits for b in reader.read_split(s)]
        got = flatten(blocks)
        assert got == whole, f"target {target}: {len(splits)} splits differ from the whole read"
    if expect_splits:
        assert counts[0] >= 2 and counts[-1] > counts[2], counts
    else:
        assert counts == [1] * len(counts)
    return whole


# ---- JSONL and text ------------------------------------------------------------------------------
def test_jsonl_splits_keep_lines_and_bad_records(tmp_path: Path) -> None:
    lines = []
    for i in range(200):
        if i % 37 == 5:
            lines.append('{"a": 1, broken')
        elif i % 23 == 3:
            lines.append("")
        else:
            lines.append(json.dumps({"a": i, "s": "x" * (i % 7), "v": [i, i + 1]}))
    data = ("\n".join(lines) + "\n").encode()
    (tmp_path / "d.jsonl").write_bytes(data)
    reader = make_reader({"format": "jsonl", "paths": "d.jsonl", "block_rows": 16},
                         str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], len(data))
    bad_lines = [i + 1 for i in range(200) if i % 37 == 5]
    assert [b[3] for b in whole["bad"]] == bad_lines
    assert {b[1] for b in whole["bad"]} == {"invalid_json"}
    good = [i for i in range(200) if i % 37 != 5 and i % 23 != 3]
    assert whole["positions"] == good and whole["lines"] == [i + 1 for i in good]
    assert whole["a"] == good


def test_text_splits_with_bad_utf8_and_oversized_lines(tmp_path: Path) -> None:
    rows = []
    for i in range(300):
        if i % 41 == 7:
            rows.append(b"bad \xff\xfe bytes %d" % i)
        elif i % 53 == 9:
            rows.append(b"y" * 90)  # over the 64-byte limit set below
        elif i % 17 == 0:
            rows.append(b"   ")
        else:
            rows.append(b"line %d of words %s" % (i, b"w " * (i % 5)))
    data = b"\n".join(rows)  # no newline at the end
    (tmp_path / "t.txt").write_bytes(data)
    reader = make_reader({"format": "text", "paths": "t.txt", "block_rows": 8}, str(tmp_path),
                         WHERE)
    whole = check_splits(reader, reader.files()[0], len(data), limit=64)
    assert [(b[1], b[3]) for b in whole["bad"]] == sorted(
        [("not_utf8", i + 1) for i in range(300) if i % 41 == 7]
        + [("oversized_record", i + 1) for i in range(300) if i % 53 == 9 and i % 41 != 7],
        key=lambda t: t[1])
    assert whole["id"] == whole["positions"] and whole["lines"] == [p + 1 for p in whole["id"]]
    assert whole["read"] == 300 - len([i for i in range(300) if i % 17 == 0 and i % 41 != 7
                                       and i % 53 != 9])


def test_gzip_text_is_one_split(tmp_path: Path) -> None:
    data = b"".join(b"line %d\n" % i for i in range(100))
    (tmp_path / "t.txt.gz").write_bytes(gzip.compress(data, mtime=0))
    reader = make_reader({"format": "text", "paths": "t.txt.gz"}, str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], len(data), expect_splits=False)
    assert whole["positions"] == list(range(100))


def test_line_splits_count_the_lines_before_them(tmp_path: Path) -> None:
    data = b"".join(b"%d\n" % i for i in range(1000))
    (tmp_path / "t.txt").write_bytes(data)
    reader = make_reader({"format": "text", "paths": "t.txt"}, str(tmp_path), WHERE)
    splits = reader.splits(reader.files()[0], 500)
    for s in splits:  # each starts at a line start, after exactly `first_line` lines
        assert data[: s.start].count(b"\n") == s.first_line
        assert s.start == 0 or data[s.start - 1 : s.start] == b"\n"
    assert [s.stop for s in splits[:-1]] == [s.start for s in splits[1:]]
    assert splits[-1].stop is None and len(splits) == len(data) // 500 + 1


# ---- Parquet --------------------------------------------------------------------------------------
def test_parquet_splits_by_row_groups(tmp_path: Path) -> None:
    n = 1000
    table = pa.table({"x": np.arange(n, dtype=np.int64), "s": [f"r{i}" for i in range(n)]})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=90)
    reader = make_reader({"format": "parquet", "paths": "d.parquet", "block_rows": 32},
                         str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], path.stat().st_size)
    assert whole["positions"] == list(range(n)) and whole["x"] == list(range(n))
    splits = reader.splits(reader.files()[0], 1)
    assert len(splits) == 12 and [s.start for s in splits] == list(range(0, n, 90))


# ---- IDX and npy ----------------------------------------------------------------------------------
def test_idx_plain_splits_by_record_ranges(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 255, (500, 4, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, 500).astype(np.uint8)
    write_idx(str(tmp_path / "img.idx"), images)
    write_idx(str(tmp_path / "lab.idx"), labels)
    reader = make_reader({"format": "idx", "paths": {"image": "img.idx", "label": "lab.idx"},
                          "block_rows": 16}, str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], 500 * 13)
    assert whole["positions"] == list(range(500)) and whole["label"] == labels.tolist()
    assert whole["image"] == images.tolist()


@pytest.mark.parametrize("case", ["gzip", "truncated"])
def test_idx_gzip_or_truncated_is_one_split(tmp_path: Path, case: str) -> None:
    """gzip cannot seek; a truncated file counts its lost records once: one split each."""
    images = np.arange(200 * 6, dtype=np.uint8).reshape(200, 6)
    name = "img.idx.gz" if case == "gzip" else "img.idx"
    write_idx(str(tmp_path / name), images)
    if case == "truncated":
        data = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(data[:-50])
    reader = make_reader({"format": "idx", "paths": {"image": name}, "block_rows": 16},
                         str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], 1200, expect_splits=False)
    if case == "truncated":
        assert [(b[1], b[4], b[7]) for b in whole["bad"]] == [("unreadable_rest", 191, 9)]
    else:
        assert whole["positions"] == list(range(200))


def test_npy_splits_by_record_ranges(tmp_path: Path) -> None:
    x = np.arange(700 * 3, dtype=np.float32).reshape(700, 3)
    y = (np.arange(700) % 10).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    reader = make_reader({"format": "npy", "paths": {"x": "x.npy", "y": "y.npy"},
                          "block_rows": 50}, str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], 700 * 20)
    assert whole["positions"] == list(range(700)) and whole["y"] == y.tolist()
    assert whole["x"] == x.tolist()


def test_npz_is_one_split(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.arange(300), y=np.arange(300) * 2)
    reader = make_reader({"format": "npz", "paths": "d.npz", "block_rows": 50},
                         str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], 4800, expect_splits=False)
    assert whole["y"] == list(range(0, 600, 2))
