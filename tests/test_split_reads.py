"""Split reads: a file read as 1 split or as N gives the same records, positions, lines and
bad records (what the shuffle keys and the dead-letter output are made of).

Every file is generated here; each test reads it whole, then as 2, 3, 7 splits and as splits
so small that each holds a few records, and compares the concatenation value by value.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from etl.formats.idx import write_idx
from etl.sources import make_reader
from etl.sources.base import Source, Split
from tests.splits import check_splits, flatten

WHERE = "jobs/t.yaml: sources.train"


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


# ---- CSV ------------------------------------------------------------------------------------------
class _Numbers:
    """A schema stand-in for `CsvReader.prepare`: these columns are read as numbers (fast path)."""

    def __init__(self, columns: dict[str, str]):
        self.columns = columns

    def numeric_columns(self) -> dict[str, str]:
        return self.columns


def _csv_rows(n: int) -> list[bytes]:
    rows = []
    for i in range(n):
        if i % 11 == 3:
            rows.append(b'%d,"two\nlines %d",x' % (i, i))  # a quoted newline
        elif i % 29 == 7:
            rows.append(b'%d,"has ""quotes"", and, commas",y' % i)
        elif i % 31 == 5:
            rows.append(b"")  # blank line
        elif i % 37 == 9:
            rows.append(b"%d,only two" % i)  # wrong field count
        elif i % 11 == 2 and i % 4 == 0:  # unterminated quote (the next line's quote ends
            rows.append(b'%d,"never closed,z' % i)  # the bad row, so it reaches no bad UTF-8)
        elif i % 47 == 13:
            rows.append(b"%d,\xff\xfe,w" % i)  # not UTF-8
        else:
            rows.append(b"%d,plain %d,v" % (i, i))
    return rows


@pytest.mark.parametrize("fast", [False, True])
def test_csv_splits_with_quoted_newlines_bad_quotes_and_blank_lines(tmp_path: Path,
                                                                    fast: bool) -> None:
    data = b"# a comment line\nn,s,t\n" + b"\n".join(_csv_rows(400)) + b"\n"
    (tmp_path / "d.csv").write_bytes(data)
    reader = make_reader({"format": "csv", "paths": "d.csv", "skip_rows": 1, "block_rows": 16},
                         str(tmp_path), WHERE)
    whole = check_splits(reader, reader.files()[0], len(data),
                         schema=_Numbers({"n": "int64"}) if fast else None)
    codes = {b[1] for b in whole["bad"]}
    assert codes == {"wrong_field_count", "unterminated_quote", "not_utf8"}
    assert whole["positions"] == [x - 3 for x in whole["lines"]]  # skip_rows + header: 2 lines
    assert "two\nlines 3" in whole["s"]
    # a boundary never falls inside a quoted value: every split starts at a record
    splits = reader.splits(reader.files()[0], 1)
    assert len(splits) > 200
    for s in splits[1:]:
        assert data[s.start - 1 : s.start] == b"\n" and not data[s.start:].startswith(b"lines ")


def test_csv_unterminated_quote_near_a_boundary(tmp_path: Path) -> None:
    """A quote left open just before a wanted cut: the cut moves past the lines it may reach."""
    rows = [b"a,b"] + [b"%d,r%d" % (i, i) for i in range(100)]
    rows[50] = b'49,"open'
    data = b"\n".join(rows) + b"\n"
    (tmp_path / "d.csv").write_bytes(data)
    reader = make_reader({"format": "csv", "paths": "d.csv"}, str(tmp_path), WHERE)
    path = reader.files()[0]
    at = data.index(b'49,"open')
    splits = reader.splits(path, at + 3)  # wanted inside the open quote's line
    assert len(splits) == 1  # no quote after it closes the question: no provable record start
    whole = check_splits(reader, path, len(data), expect_splits=None)  # cuts before it only
    assert max(s.start for s in reader.splits(path, 1)) == at  # the open quote line starts one
    assert [(b[1], b[3]) for b in whole["bad"]] == [("unterminated_quote", 51)]
    assert whole["positions"] == [i for i in range(100) if i != 49]
    # once a later line ends a record from either state, splitting resumes after it
    rows[60] = b'59,"x"'
    data = b"\n".join(rows) + b"\n"
    (tmp_path / "d.csv").write_bytes(data)
    splits = reader.splits(path, at + 3)
    assert [s.start for s in splits[:2]] == [0, data.index(b"60,r60")]
    check_splits(reader, path, len(data))


def test_csv_without_header_and_without_quoting(tmp_path: Path) -> None:
    data = b"".join(b'%d,"q%d"\n' % (i, i) for i in range(300))
    (tmp_path / "d.csv").write_bytes(data)
    for config in ({"header": False, "columns": ["a", "b"]},
                   {"header": False, "columns": ["a", "b"], "quote_char": None}):
        reader = make_reader({"format": "csv", "paths": "d.csv", **config}, str(tmp_path), WHERE)
        whole = check_splits(reader, reader.files()[0], len(data))
        assert whole["positions"] == list(range(300))
        assert whole["b"][:2] == (["q0", "q1"] if "quote_char" not in config
                                  else ['"q0"', '"q1"'])


@pytest.mark.parametrize("seed", range(12))
def test_csv_random_quoting_reads_the_same_however_split(tmp_path: Path, seed: int) -> None:
    """Random lines of quotes, delimiters, CRLFs and text: 1 vs N splits agree exactly."""
    rng = np.random.default_rng(seed)
    pieces = [b'"', b'""', b",", b"a", b"bc", b"1", b" ", b"\r\n", b'"x"', b"\n"]
    weights = np.array([3, 1, 4, 6, 4, 4, 1, 0.5, 2, 1.5])  # (a CR alone is no line end here)
    lines = [b"p,q,r"]
    for _ in range(250):
        k = int(rng.integers(1, 9))
        parts = rng.choice(len(pieces), size=k, p=weights / weights.sum())
        lines.append(b"".join(pieces[i] for i in parts))
    data = b"\n".join(lines) + b"\n"
    (tmp_path / "d.csv").write_bytes(data)
    reader = make_reader({"format": "csv", "paths": "d.csv", "block_rows": 8}, str(tmp_path),
                         WHERE)
    check_splits(reader, reader.files()[0], len(data), expect_splits=None)
    assert len(reader.splits(reader.files()[0], 1)) > 1


# ---- formats read whole ---------------------------------------------------------------------------
def test_tfrecord_images_and_python_are_one_split_per_unit(tmp_path: Path) -> None:
    """TFRecord frames have no sync marker to find from a byte offset (and gzip cannot seek);
    an image folder's unit is already one class root of small files; a generator can only be
    replayed from its start (its `num_shards` option is the way to parallelise it)."""
    from PIL import Image  # noqa: PLC0415

    from etl.formats.tfrecord import frame_all  # noqa: PLC0415

    (tmp_path / "x.tfrecord").write_bytes(frame_all([b"a" * 10, b"b" * 20, b"c"]))
    for k in range(2):
        (tmp_path / "root" / "cls").mkdir(parents=True, exist_ok=True)
        Image.new("L", (4, 3), k).save(tmp_path / "root" / "cls" / f"{k}.png")
    configs = [{"format": "tfrecord", "paths": "x.tfrecord"},
               {"format": "images", "paths": ["root"]},
               {"format": "python", "function": "tests.generators:ids_and_pairs",
                "kwargs": {"n": 5}}]
    for config in configs:
        reader = make_reader(config, str(tmp_path), WHERE)
        assert isinstance(reader, Source)
        path = reader.files()[0]
        assert reader.splits(path, 1) == [Split(path)]
        whole = flatten(list(reader.read(path)))
        assert flatten(list(reader.read_split(Split(path)))) == whole and whole["read"] > 0
        with pytest.raises(ValueError, match="reads whole files only"):
            list(reader.read_split(Split(path, 1, 2, 5)))
