"""CSV dialect keys (`encoding`, `header: false` without `columns`, `null_values`), the header
names refused at launch, and the JSON Lines reader's text kept exactly (dates, null markers,
JSON array files). Files are written by the tests; every value, line and message is exact."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etl.base.errors import BadInputError, ConfigError
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.sources import make_reader
from etl.sources.base import Block
from etl.sources.csv_source import CsvReader
from tests.helpers import column
from tests.splits import check_splits

WHERE = "jobs/t.yaml: sources.train"


def read(path: Path, fast_schema: Any = None, **options: Any) -> list[Block]:
    """Every block of one file; `fast_schema` turns the CSV fast path on (as the pipeline does)."""
    fmt = "jsonl" if ".json" in path.name else "csv"
    reader = make_reader({"format": fmt, "paths": [path.name], **options}, str(path.parent), WHERE)
    reader.splits(str(path), 1 << 30)  # the launch-time checks
    if fast_schema is not None:
        reader.prepare(fast_schema, 64 << 20)
    return list(reader.read(str(path)))


def bad(blocks: list[Block]) -> list[tuple[int | None, str, str]]:
    return [(r.line, r.code, r.reason) for b in blocks for r in b.bad]


def lines(blocks: list[Block]) -> list[int]:
    return [int(n) for b in blocks for n in b.lines]


@pytest.fixture
def careful_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails a test whose fast path hands over to the careful path."""
    def refuse(self: Any, *a: Any, **k: Any) -> Any:
        raise AssertionError("the fast path handed over to the careful path")
    monkeypatch.setattr(CsvReader, "_read_careful", refuse)


NUMS = schema_from_dict({"name": "t", "kind": "example", "features": {
    "x": {"dtype": "float32", "shape": [], "default": 0.0},
    "n": {"dtype": "int64", "shape": [], "default": 0},
    "s": {"dtype": "string", "shape": [], "default": ""},
}})


# ---- encoding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fast", [False, True])
def test_utf8_bom_never_reaches_the_first_name_or_value(tmp_path: Path, fast: bool) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfx,n,s\n1.5,2,a\n")
    blocks = read(path, NUMS if fast else None)
    assert list(blocks[0].columns) == ["x", "n", "s"]
    assert column(blocks, "s") == ["a"]
    path.write_bytes(b"\xef\xbb\xbfx,y\n1,2\n")
    blocks = read(path, header=False)
    assert list(blocks[0].columns) == ["column_0", "column_1"]
    assert column(blocks, "column_0") == ["x", "1"] and lines(blocks) == [1, 2]
    path.write_bytes(b"\xef\xbb\xbfx,y\n1,2\n")
    assert column(read(path, encoding="utf-8-sig"), "x") == ["1"]


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("codec", ["latin-1", "cp1252"])
def test_8bit_encodings_become_utf8_with_exact_lines(tmp_path: Path, codec: str,
                                                     fast: bool) -> None:
    text = 'x,n,s\n1,2,café\n3,4,"naïve\nzwei Zeilen"\n5,6,7,8\n9,10,Ærø\n'
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode(codec))
    blocks = read(path, NUMS if fast else None, encoding=codec)
    assert column(blocks, "s") == ["café", "naïve\nzwei Zeilen", "Ærø"]
    assert lines(blocks) == [2, 3, 6]
    assert bad(blocks) == [(5, "wrong_field_count", "wrong number of fields (expected 3, found 4)")]


def test_latin1_without_quoting_on_the_fast_path(tmp_path: Path, careful_only: None) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("x,n,s\n1.5,2,café\n2.5,3,naïve\n".encode("latin-1"))
    blocks = read(path, NUMS, encoding="latin-1", quote_char=None)
    assert column(blocks, "s") == ["café", "naïve"] and column(blocks, "x") == [1.5, 2.5]
    assert lines(blocks) == [2, 3]


def test_cp1252_euro_sign_and_undefined_byte(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n\x80 5,x\n\x81,y\nok,z\n")  # 0x81 means nothing in cp1252
    blocks = read(path, encoding="cp1252")
    assert column(blocks, "a") == ["€ 5", "ok"] and lines(blocks) == [2, 4]
    assert bad(blocks) == [(3, "not_utf8", "not valid cp1252 text")]
    # the same bytes read as UTF-8 (the default): both rows are not UTF-8
    assert [b[:2] for b in bad(read(path))] == [(2, "not_utf8"), (3, "not_utf8")]


def test_latin1_names_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("größe,n\n1,2\n".encode("latin-1"))
    assert list(read(path, encoding="latin-1")[0].columns) == ["größe", "n"]


# ---- header: false -----------------------------------------------------------------------------
@pytest.mark.parametrize("fast", [False, True])
def test_header_false_without_columns_keeps_the_first_line(tmp_path: Path, fast: bool) -> None:
    path = tmp_path / "t.csv"
    path.write_text("1.5,2,a\n2.5,3,b\n")
    schema = schema_from_dict({"name": "t", "kind": "example", "features": {
        "x": {"dtype": "float32", "shape": [], "source": "column_0"},
        "s": {"dtype": "string", "shape": [], "source": "column_2"}}})
    blocks = read(path, schema if fast else None, header=False)
    assert list(blocks[0].columns) == ["column_0", "column_1", "column_2"]
    assert column(blocks, "column_0") == ([1.5, 2.5] if fast else ["1.5", "2.5"])
    assert column(blocks, "column_2") == ["a", "b"]
    assert [int(p) for b in blocks for p in b.positions] == [0, 1] and lines(blocks) == [1, 2]
    out = Encoder(schema).encode(blocks[0].columns, source=str(path),
                                 positions=blocks[0].positions, lines=blocks[0].lines)
    assert len(out.records) == 2 and not out.bad


def test_header_false_with_skip_rows(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("# comment\n7\n8\n")
    blocks = read(path, header=False, skip_rows=1)
    assert column(blocks, "column_0") == ["7", "8"] and lines(blocks) == [2, 3]


# ---- header names refused at launch ------------------------------------------------------------
@pytest.mark.parametrize("header, message", [
    ("a,b,a,c,b", "duplicate column names 'a' (columns 1, 3), 'b' (columns 2, 5): rename them "
                  "with 'columns:' (a name per column; the header line is then skipped), or set "
                  "'header: false' if the first line is data"),
    ("a,b,", "the header ends with the delimiter, so column 3 has no name (every line ends with "
             "','?): name every column with 'columns:' (the last one e.g. '_trailing'), or "
             "remove the trailing delimiter from the file"),
    ("a,,b", "column(s) [2] of the header have no name: name every column with 'columns:' "
             "(the header line is then skipped)"),
    ("a;b;c", "the header is one column 'a;b;c' holding 2 ';': it looks like ';'-separated: "
              "set delimiter: ';' (or, if it is one column, name it with 'columns:')"),
    ("a\tb", "the header is one column 'a\\tb' holding 1 '\\t': it looks like '\\t'-separated: "
             "set delimiter: '\\t' (or, if it is one column, name it with 'columns:')"),
    ("", "line 1, the header, is blank: set skip_rows: 1 to skip it"),
])
def test_header_names_that_cannot_name_features(tmp_path: Path, header: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(header + "\n1,2,3\n")
    with pytest.raises(ConfigError) as e:
        read(path)
    assert str(e.value) == f"{WHERE}: {path}: {message}"
    assert "\n" not in str(e.value)


def test_an_empty_file_has_no_names_to_refuse(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"")
    assert sum(b.num_rows for b in read(path)) == 0


def test_columns_key_renames_a_bad_header(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b,a,\n1,2,3,\n")
    blocks = read(path, columns=["a", "b", "a2", "_trailing"])
    assert column(blocks, "a2") == ["3"] and column(blocks, "_trailing") == [None]
    assert lines(blocks) == [2]


# ---- null_values -------------------------------------------------------------------------------
CELLS = 'x,n,s\n1.5,NA,NA\nNA,2,""\n,3,N/A\n4.5,,na\n5.5,6," NA"\n'


@pytest.mark.parametrize("fast", [False, True])
def test_null_values_in_both_paths(tmp_path: Path, fast: bool, request: Any) -> None:
    if fast:
        request.getfixturevalue("careful_only")  # markers must not stop the fast path
    path = tmp_path / "t.csv"
    path.write_text(CELLS)
    blocks = read(path, NUMS if fast else None, null_values=["", "NA", "N/A"])
    assert column(blocks, "s") == [None, None, None, "na", " NA"]
    if fast:
        assert column(blocks, "x") == [1.5, None, None, 4.5, 5.5]
        assert column(blocks, "n") == [None, 2, 3, None, 6]
    else:
        assert column(blocks, "x") == ["1.5", None, None, "4.5", "5.5"]
        assert column(blocks, "n") == [None, "2", "3", None, "6"]
    assert lines(blocks) == [2, 3, 4, 5, 6]


def test_default_null_values_is_the_empty_cell(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(CELLS)
    assert column(read(path), "s") == ["NA", None, "N/A", "na", " NA"]
    assert column(read(path, null_values=[]), "s") == ["NA", "", "N/A", "na", " NA"]


def test_null_markers_are_missing_for_the_encoder(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,s\nNA,a\n2,NA\n")
    schema = schema_from_dict({"name": "t", "kind": "example", "features": {
        "x": {"dtype": "float32", "shape": []}, "s": {"dtype": "string", "shape": []}}})
    (block,) = read(path, schema, null_values=["NA"])
    out = Encoder(schema).encode(block.columns, source=str(path), positions=block.positions,
                                 lines=block.lines)
    assert not out.records
    assert [(b.line, b.code, b.feature) for b in out.bad] == [
        (2, "missing_required", "x"), (3, "missing_required", "s")]


def test_yaml_null_and_nan_markers_mean_their_text(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("s,t\nnull,NaN\nx,y\n")
    blocks = read(path, null_values=[None, float("nan")])
    assert column(blocks, "s") == [None, "x"] and column(blocks, "t") == [None, "y"]


# ---- JSON Lines --------------------------------------------------------------------------------
DATES = ["1970-01-01", "2010-01-01T00:00:00Z", "2010-01-01 12:30:00+02:00", "2010-01-01T00:00"]


def test_jsonl_date_like_strings_keep_their_bytes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"d": DATES[i % 4], "l": [DATES[i % 4]], "o": {"k": DATES[i % 4]}, "n": i}
            for i in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    blocks = read(path, block_rows=4)
    assert column(blocks, "d") == [r["d"] for r in rows]
    assert column(blocks, "l") == [r["l"] for r in rows]
    assert column(blocks, "o") == [r["o"] for r in rows]
    assert column(blocks, "n") == list(range(10))


def test_jsonl_null_values(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"s": "NA", "l": ["a", "NA"], "n": 1}\n{"s": "na", "l": [], "n": 2}\n'
                    '{"s": null, "l": null, "n": "NA"}\n')
    blocks = read(path, null_values=["NA"])
    assert column(blocks, "s") == [None, "na", None]
    assert column(blocks, "l") == [["a", None], [], None]
    assert column(blocks, "n") == [1, 2, None]  # the types clash: Python lists, same rule
    assert column(read(path), "s") == ["NA", "na", None]  # no markers by default


TRICKY = [
    {"s": "a, b ] } [ {", "n": 1, "l": [[1, 2], [3]], "o": {"k": "x\\", "m": [{"q": "]"}]}},
    {"s": 'quote " and \\" and \\\\', "n": 2, "l": [], "o": {"k": "1970-01-01", "m": []}},
    {"s": "ünï €", "n": 3, "l": [[4]], "o": {"k": "", "m": [{"q": ","}]}},
]


def array_text(items: list[Any], pretty: bool) -> str:
    return json.dumps(items, indent=3 if pretty else None, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 22])
@pytest.mark.parametrize("pretty", [True, False])
def test_json_array_file_read_exactly_in_any_chunking(tmp_path: Path, chunk: int, pretty: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("etl.sources.json_array._CHUNK", chunk)
    items = [dict(r, i=i) for i, r in enumerate(TRICKY * 5)]
    text = array_text(items, pretty)
    path = tmp_path / "a.json"
    path.write_text(text)
    blocks = read(path, block_rows=4)
    assert [b.num_rows for b in blocks] == [4, 4, 4, 3]
    for key in ("s", "n", "l", "i"):
        assert column(blocks, key) == [r[key] for r in items]
    assert column(blocks, "o") == [r["o"] for r in items]
    assert [int(p) for b in blocks for p in b.positions] == list(range(15))
    starts = [n + 1 for n, line in enumerate(text.splitlines()) if line == "   {"] if pretty \
        else [1] * 15
    assert lines(blocks) == starts
    assert bad(blocks) == []


def test_json_array_bad_elements_are_records_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b'[\n {"a": 1},\n {"a": 2,},\n 7,\n {"a": "\xff"},\n {"a": 5},\n]\n')
    blocks = read(path)
    assert column(blocks, "a") == [1, 5]
    assert [int(p) for b in blocks for p in b.positions] == [0, 4] and lines(blocks) == [2, 6]
    assert bad(blocks) == [
        (3, "invalid_json", "invalid JSON: Expecting property name enclosed in double quotes"),
        (4, "invalid_json", "expected a JSON object, got int"),
        (5, "not_utf8", "not valid UTF-8 text"),
        (7, "invalid_json", "invalid JSON: empty element"),
    ]


def test_json_array_oversized_element_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('[{"a": 1},\n{"a": "' + "x" * 300 + '"},\n{"a": 3}]')
    reader = make_reader({"format": "jsonl", "paths": ["a.json"]}, str(tmp_path), WHERE)
    reader.prepare(None, 100)
    blocks = list(reader.read(str(path)))
    assert column(blocks, "a") == [1, 3] and lines(blocks) == [1, 3]
    assert [(b.line, b.code) for b in blocks[0].bad] == [(2, "oversized_record")]


@pytest.mark.parametrize("text, message", [
    ('[{"a": 1},\n {"a": [1}],\n {"a": 3}]\n',
     ":2: element 1 of the JSON array is not valid JSON (Expecting ',' delimiter) and its "
     "brackets do not balance, so where the next elements start is unknown"),
    ('[{"a": 1},\n {"a": [1},\n {"a": 3}]\n',
     ": the file ends inside the JSON array (near line 4): is it truncated, or do its brackets "
     "not balance?"),
    ('[{"a": 1}]\n{"a": 2}\n', ":2: the JSON array ends before this line or something other "
                               "than whitespace stands outside it"),
    ('[{"a": 1}]]\n', ":1: the JSON array ends before this line"),
    ('[{"a": 1},\n{"a": 2}', ": the file ends inside the JSON array (near line 2): is it "
                            "truncated"),
])
def test_json_array_whose_structure_breaks_fails_the_file(tmp_path: Path, text: str,
                                                          message: str) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(BadInputError) as e:
        read(path)
    assert str(e.value).startswith(f"{path}{message}"), str(e.value)


def test_empty_json_array_and_gzip(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(" [ ] \n")
    assert sum(b.num_rows for b in read(path)) == 0 and not bad(read(path))
    gz = tmp_path / "b.json.gz"
    gz.write_bytes(gzip.compress(array_text(TRICKY, True).encode()))
    assert column(read(gz), "s") == [r["s"] for r in TRICKY]


def test_jsonl_whose_first_line_is_a_list_is_not_an_array_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('[1, 2]\n{"a": 1}\n')
    blocks = read(path)
    assert column(blocks, "a") == [1]
    assert bad(blocks) == [(1, "invalid_json", "expected a JSON object, got list")]
    assert np.asarray(blocks[0].positions).tolist() == [1]


# ---- split reads -------------------------------------------------------------------------------
@pytest.mark.parametrize("fast", [False, True])
def test_cp1252_header_false_null_markers_split_like_the_whole_file(
        tmp_path: Path, fast: bool, request: Any) -> None:
    """The careful path with bad rows among the good; the fast path (never handing over) on
    the same file without them."""
    if fast:
        request.getfixturevalue("careful_only")
    rows = []
    for i in range(120):
        if fast and (i % 29 == 4 or i % 13 == 2):
            continue
        if i % 29 == 4:
            rows.append(f'{i},"open €{i}\n'.encode("cp1252"))  # never closed: rejected
        elif i % 13 == 2:
            rows.append(b"%d,NA,\x81\n" % i)  # a byte cp1252 does not define: not_utf8
        else:
            x = "NA" if i % 7 == 0 else i * 0.5
            rows.append(f'{i},"Ærø, {i} €",{x}\n'.encode("cp1252"))
    data = b"".join(rows)
    (tmp_path / "t.csv").write_bytes(data)
    reader = make_reader({"format": "csv", "paths": "t.csv", "header": False,
                          "encoding": "cp1252", "null_values": ["NA", ""], "block_rows": 16},
                         str(tmp_path), WHERE)
    schema = schema_from_dict({"name": "t", "kind": "example", "features": {
        "n": {"dtype": "int64", "shape": [], "source": "column_0"},
        "x": {"dtype": "float32", "shape": [], "source": "column_2", "default": 0.0}}})
    whole = check_splits(reader, reader.files()[0], len(data), schema=schema if fast else None)
    assert whole["column_1"][:2] == ["Ærø, 0 €", "Ærø, 1 €"]
    assert whole["column_2"][:2] == ([None, 0.5] if fast else [None, "0.5"])
    assert [(b[1], b[3]) for b in whole["bad"]] == ([] if fast else sorted(
        [("unterminated_quote", i + 1) for i in range(120) if i % 29 == 4]
        + [("not_utf8", i + 1) for i in range(120) if i % 13 == 2 and i % 29 != 4],
        key=lambda b: b[1]))
    assert len(whole["positions"]) == 120 - 4 - 10  # (the fast file has just the good rows)


def test_json_array_random_objects_match_json_load(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded random objects whose strings are made of the bytes the scan looks at."""
    rng = np.random.default_rng(27)
    alphabet = list('\\"[]{},: \tab\n€')

    def text() -> str:
        return "".join(rng.choice(alphabet, size=int(rng.integers(0, 12))).tolist())

    def value(depth: int) -> Any:
        kind = int(rng.integers(0, 6 if depth < 3 else 3))
        if kind == 0:
            return text()
        if kind == 1:
            return int(rng.integers(-5, 5))
        if kind == 2:
            return None
        if kind == 3:
            return [value(depth + 1) for _ in range(int(rng.integers(0, 3)))]
        return {text(): value(depth + 1) for _ in range(int(rng.integers(0, 3)))}

    items = [{"s": text(), "j": json.dumps(value(0)), "v": [value(1)]} for _ in range(200)]
    for indent, chunk in [(None, 5), (2, 13), (None, 1 << 22), (4, 64)]:
        monkeypatch.setattr("etl.sources.json_array._CHUNK", chunk)
        path = tmp_path / "r.json"
        path.write_text(json.dumps(items, indent=indent, ensure_ascii=bool(chunk % 2)))
        blocks = read(path, block_rows=64)
        assert not bad(blocks)
        assert [int(p) for b in blocks for p in b.positions] == list(range(200))
        assert column(blocks, "s") == [r["s"] for r in items]
        assert column(blocks, "j") == [r["j"] for r in items]
