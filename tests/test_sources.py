"""Source readers: exact columns, positions and bad records from small raw files.

Every file here is written by the test itself (deterministic bytes), read back through
`make_reader`, and checked value by value; the bad-input cases assert the exact file, line or
record index and reason, and that the good records around them still come through. The last
tests push one block of each reader through `etl.contract.codec.Encoder` under a fitting schema.
"""

from __future__ import annotations

import gzip
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from etl.base.errors import BadInputError, BadRecord, ConfigError, RecordError
from etl.contract.codec import Encoder
from etl.contract.schema import load_schema, schema_from_dict
from etl.formats.idx import GzipStream, read_idx, write_idx
from etl.formats.tfrecord import frame_all
from etl.sources import make_reader
from etl.sources.base import Block, Split
from etl.storage import fs
from tests.helpers import column

WHERE = "jobs/t.yaml: sources.train"


def read(tmp_path: Path, config: dict[str, Any], unit: int = 0) -> list[Block]:
    reader = make_reader(config, str(tmp_path), WHERE)
    return list(reader.read(reader.files()[unit]))


def positions(blocks: list[Block]) -> list[int]:
    return [int(p) for b in blocks for p in b.positions]


def bad(blocks: list[Block]) -> list[tuple[str, int | None, str]]:
    """(file name, 1-based line or else record index, reason) of each rejected record."""
    return [(Path(r.source).name, r.line if r.line is not None else r.record, r.reason)
            for b in blocks for r in b.bad]


def codes(blocks: list[Block]) -> list[str]:
    return [r.code for b in blocks for r in b.bad]


def lines(blocks: list[Block]) -> list[int]:
    return [int(n) for b in blocks for n in b.lines]


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# ---- options -----------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [
    {"format": "csv", "paths": "x.csv"},
    {"format": "jsonl", "paths": "x.jsonl"},
    {"format": "parquet", "paths": "x.parquet"},
    {"format": "idx", "paths": {"image": "i.gz", "label": "l.gz"}},
    {"format": "npy", "paths": {"x": "x.npy"}},
    {"format": "npz", "paths": ["x.npz"]},
    {"format": "images", "paths": ["root"]},
    {"format": "text", "paths": "x.txt"},
    {"format": "tfrecord", "paths": "x.tfrecord"},
    {"format": "python", "function": "json:loads"},
])
def test_unknown_option_names_source_and_option(config: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"t\.yaml: sources\.train: unknown option.*'blok_rows'"):
        make_reader({**config, "blok_rows": 10}, ".", WHERE)


@pytest.mark.parametrize("config, message", [
    ({"format": "csv", "paths": "x.csv", "encoding": "utf-16"},
     "'encoding' 'utf-16' does not write line breaks, quotes and delimiters as single ASCII"),
    ({"format": "csv", "paths": "x.csv", "encoding": "klingon"}, "unknown 'encoding' 'klingon'"),
    ({"format": "csv", "paths": "x.csv", "null_values": "NA"}, "'null_values' must be a list"),
    ({"format": "jsonl", "paths": "x.jsonl", "null_values": [["NA"]]},
     "'null_values' must be a list of texts"),
    ({"format": "csv", "paths": "x.csv", "columns": ["a", "b", "a"]},
     r"'columns' names \['a'\] more than once"),
    ({"format": "csv", "paths": "x.csv", "delimiter": ";;"}, "'delimiter' must be one character"),
    ({"format": "text", "paths": "x.txt", "tokenizer": "bpe"}, "'tokenizer' must be one of"),
    ({"format": "csv", "paths": "x.csv", "block_rows": 0}, "'block_rows' must be an integer >= 1"),
    ({"format": "images", "paths": "r", "channels": 2, "decode": True}, "'channels' must be 1 or"),
    ({"format": "npy", "paths": ["x.npy"]}, "'paths' must map column names"),
    ({"format": "python", "function": "no_such_module_xyz:f"}, "cannot load function"),
])
def test_bad_options(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_reader(config, ".", WHERE)


def test_unmatched_glob_is_a_config_error(tmp_path: Path) -> None:
    reader = make_reader({"format": "csv", "paths": ["missing-*.csv"]}, str(tmp_path), WHERE)
    with pytest.raises(ConfigError, match=r"train: no input files match 'missing-\*\.csv'"):
        reader.files()


# ---- CSV ---------------------------------------------------------------------------------------
CSV = (
    b"a,b,c\n"            # line 1: header
    b"1,2,3\n"            # 2: position 0
    b"4,5\n"              # 3: wrong column count
    b'"x\ny",7,8\n'       # 4-5: position 2, quoted newline (accepted)
    b"9,10,11,12\n"       # 6: wrong column count
    b"\n"                 # 7: blank line, no record
    b"\xff\xfe,1,2\n"     # 8: not UTF-8
    b'"q ""z""",6,7\n'    # 9: position 7, escaped quotes
    b'1,"abc,3\n'         # 10: unterminated quote: rejected, parsing resumes at line 11
    b"5,6,7\n"            # 11: position 9
)


def test_csv_good_rows_and_bad_rows_with_line_numbers(tmp_path: Path) -> None:
    write(tmp_path / "t.csv", CSV)
    blocks = read(tmp_path, {"format": "csv", "paths": "t.csv", "block_rows": 2})
    assert [b.num_rows for b in blocks] == [2, 2]
    assert column(blocks, "a") == ["1", "x\ny", 'q "z"', "5"]
    assert column(blocks, "b") == ["2", "7", "6", "6"]
    assert column(blocks, "c") == ["3", "8", "7", "7"]
    assert all(pa.types.is_string(b.columns["a"].type) for b in blocks)
    assert positions(blocks) == [0, 2, 7, 9]  # 0-based line index after the header
    assert lines(blocks) == [2, 4, 9, 11]
    assert bad(blocks) == [
        ("t.csv", 3, "wrong number of fields (expected 3, found 2)"),
        ("t.csv", 6, "wrong number of fields (expected 3, found 4)"),
        ("t.csv", 8, "not valid UTF-8 text (a file in another encoding: set encoding:, e.g. "
                     "cp1252 or latin-1)"),
        ("t.csv", 10, "unbalanced quote (the field runs on over the next lines); parsing resumes "
                      "at the next line"),
    ]
    assert codes(blocks) == ["wrong_field_count", "wrong_field_count", "not_utf8",
                             "unterminated_quote"]
    raws = [r.raw for b in blocks for r in b.bad]
    assert raws == ["4,5", "9,10,11,12", "\\xff\\xfe|1|2", '1,"abc,3']


def test_csv_positions_do_not_depend_on_block_size(tmp_path: Path) -> None:
    rows = b"".join(b"%d,%d\n" % (i, i) if i % 5 else b"%d\n" % i for i in range(3000))
    write(tmp_path / "big.csv", b"k,v\n" + rows)
    config = {"format": "csv", "paths": "big.csv"}
    small = read(tmp_path, {**config, "block_rows": 7})
    whole = read(tmp_path, config)
    assert positions(small) == positions(whole) == [i for i in range(3000) if i % 5]
    assert column(small, "k") == [str(i) for i in range(3000) if i % 5]
    assert max(b.num_rows for b in small) == 7
    assert [p for _, p, _ in bad(small)] == [i + 2 for i in range(0, 3000, 5)]


def test_csv_without_header_other_delimiter_and_skipped_rows(tmp_path: Path) -> None:
    write(tmp_path / "t.csv", b"# exported\n1;'a;b'\n2;c\n")
    blocks = read(tmp_path, {"format": "csv", "paths": "t.csv", "header": False, "skip_rows": 1,
                             "delimiter": ";", "quote_char": "'", "columns": ["n", "s"]})
    assert column(blocks, "n") == ["1", "2"]
    assert column(blocks, "s") == ["a;b", "c"]
    assert positions(blocks) == [0, 1]


def test_csv_columns_override_header_names(tmp_path: Path) -> None:
    write(tmp_path / "t.csv", b"A,B\n1,2\n3\n")
    blocks = read(tmp_path, {"format": "csv", "paths": "t.csv", "columns": ["x", "y"]})
    assert list(blocks[0].columns) == ["x", "y"]
    assert column(blocks, "y") == ["2"]
    assert bad(blocks) == [("t.csv", 3, "wrong number of fields (expected 2, found 1)")]


# ---- JSONL -------------------------------------------------------------------------------------
def test_jsonl_nested_lists_and_invalid_lines(tmp_path: Path) -> None:
    write(tmp_path / "t.jsonl", (
        b'{"id": 1, "steps": [[1, 2], [3]]}\n'   # line 1
        b"\n"                                     # 2: blank
        b'{"id": 2, "steps": \n'                  # 3: invalid JSON
        b"[1, 2]\n"                               # 4: not an object
        b'{"id": 3, "steps": []}\r\n'             # 5
        b'{"id": 4}{"id": 5}\n'                   # 6: two objects on a line
        b'{"id": 6, "steps": [[7]]}'              # 7: no final newline
    ))
    blocks = read(tmp_path, {"format": "jsonl", "paths": "t.jsonl"})
    assert column(blocks, "id") == [1, 3, 6]
    assert column(blocks, "steps") == [[[1, 2], [3]], [], [[7]]]
    assert pa.types.is_list(blocks[0].columns["steps"].type)
    assert positions(blocks) == [0, 4, 6] and lines(blocks) == [1, 5, 7]
    assert bad(blocks) == [
        ("t.jsonl", 3, "invalid JSON: Expecting value at column 20"),
        ("t.jsonl", 4, "expected a JSON object, got list"),
        ("t.jsonl", 6, "invalid JSON: Extra data at column 10"),
    ]
    assert codes(blocks) == ["invalid_json"] * 3


def test_jsonl_fast_path_and_clashing_types(tmp_path: Path) -> None:
    lines = [{"id": i, "x": i / 2} for i in range(10)]
    write(tmp_path / "ok.jsonl", "\n".join(json.dumps(r) for r in lines).encode())
    blocks = read(tmp_path, {"format": "jsonl", "paths": "ok.jsonl", "block_rows": 4})
    assert [b.num_rows for b in blocks] == [4, 4, 2]
    assert column(blocks, "x") == [i / 2 for i in range(10)] and bad(blocks) == []
    write(tmp_path / "mixed.jsonl", b'{"v": 3}\n{"v": "three", "w": true}\n')
    blocks = read(tmp_path, {"format": "jsonl", "paths": "mixed.jsonl"})
    # types clash: Python lists, and the encoder decides per schema
    assert blocks[0].columns == {"v": [3, "three"], "w": [None, True]}


def test_jsonl_bad_utf8_line(tmp_path: Path) -> None:
    write(tmp_path / "t.jsonl", b'{"s": "ok"}\n{"s": "\xff"}\n{"s": "fine"}\n')
    blocks = read(tmp_path, {"format": "jsonl", "paths": "t.jsonl"})
    assert column(blocks, "s") == ["ok", "fine"] and positions(blocks) == [0, 2]
    assert bad(blocks) == [("t.jsonl", 2, "not valid UTF-8 text")] and codes(blocks) == ["not_utf8"]


# ---- text --------------------------------------------------------------------------------------
TEXT = b"The cat  sat\n\n  \nb\xffd line\r\nLast Line"


def test_text_tokens_ids_and_bad_utf8(tmp_path: Path) -> None:
    write(tmp_path / "t.txt", TEXT)
    blocks = read(tmp_path, {"format": "text", "paths": "t.txt", "lowercase": True})
    assert column(blocks, "id") == [0, 4] and positions(blocks) == [0, 4]
    assert column(blocks, "text") == ["The cat  sat", "Last Line"]
    assert column(blocks, "tokens") == [["the", "cat", "sat"], ["last", "line"]]
    assert column(blocks, "length") == [3, 2]
    assert bad(blocks) == [("t.txt", 4, "not valid UTF-8 text")] and codes(blocks) == ["not_utf8"]
    assert lines(blocks) == [1, 5]


def test_text_keeps_empty_lines_and_char_tokens(tmp_path: Path) -> None:
    write(tmp_path / "t.txt", TEXT)
    blocks = read(tmp_path, {"format": "text", "paths": "t.txt", "skip_empty": False,
                             "tokenizer": "chars", "block_rows": 2})
    assert [b.num_rows for b in blocks] == [2, 1, 1]
    assert column(blocks, "id") == [0, 1, 2, 4]
    assert column(blocks, "tokens")[0] == list("The cat  sat")
    assert column(blocks, "tokens")[1:] == [[], [" ", " "], list("Last Line")]
    assert column(blocks, "length") == [12, 0, 2, 9]


def test_text_gzip(tmp_path: Path) -> None:
    write(tmp_path / "t.txt.gz", gzip.compress(b"a b\nc\n", mtime=0))
    blocks = read(tmp_path, {"format": "text", "paths": "t.txt.gz"})
    assert column(blocks, "tokens") == [["a", "b"], ["c"]]
    # progress: where the block ends in the file's own (compressed) bytes
    assert [b.end_offset for b in blocks] == [(tmp_path / "t.txt.gz").stat().st_size]


# ---- IDX ---------------------------------------------------------------------------------------
def mnist_like(tmp_path: Path, n: int = 5, suffix: str = ".gz") -> tuple[np.ndarray, np.ndarray]:
    images = (np.arange(n * 28 * 28) % 251).astype(np.uint8).reshape(n, 28, 28)
    labels = (np.arange(n) % 10).astype(np.uint8)
    write_idx(str(tmp_path / f"images{suffix}"), images)
    write_idx(str(tmp_path / f"labels{suffix}"), labels)
    return images, labels


IDX = {"format": "idx", "paths": {"image": "images.gz", "label": "labels.gz"}}


def test_idx_write_read_round_trip_is_deterministic(tmp_path: Path) -> None:
    floats = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    write_idx(str(tmp_path / "f.idx"), floats)
    assert (tmp_path / "f.idx").read_bytes()[:12] == bytes([0, 0, 0x0D, 2, 0, 0, 0, 3, 0, 0, 0, 4])
    np.testing.assert_array_equal(read_idx(str(tmp_path / "f.idx")), floats)
    mnist_like(tmp_path)
    first = (tmp_path / "images.gz").read_bytes()
    mnist_like(tmp_path)
    assert (tmp_path / "images.gz").read_bytes() == first  # gzip mtime 0: same bytes every run
    # gzip is recognised by its magic bytes too
    write(tmp_path / "renamed", first)
    assert read_idx(str(tmp_path / "renamed")).shape == (5, 28, 28)


def test_idx_reader_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images, labels = mnist_like(tmp_path)
    reader = make_reader({**IDX, "block_rows": 2}, str(tmp_path), WHERE)
    assert [Path(f).name for f in reader.files()] == ["images.gz"]
    assert [Path(f).name for f in reader.inputs()] == ["images.gz", "labels.gz"]
    assert reader.key_column == "image"
    blocks = list(reader.read(reader.files()[0]))
    assert [b.columns["image"].shape for b in blocks] == [(2, 28, 28), (2, 28, 28), (1, 28, 28)]
    assert blocks[0].columns["image"].dtype == np.uint8
    np.testing.assert_array_equal(np.concatenate([b.columns["image"] for b in blocks]), images)
    np.testing.assert_array_equal(np.concatenate([b.columns["label"] for b in blocks]), labels)
    assert positions(blocks) == [0, 1, 2, 3, 4]
    # progress (Block.end_offset): gzip files in compressed bytes; with the unit's size from
    # the plan, the share of it the records read so far stand for; without it, the raw tell()
    path, size = reader.files()[0], (tmp_path / "images.gz").stat().st_size
    data = 16 + 5 * 28 * 28
    assert [b.end_offset for b in blocks] == [size] * 3  # the decompressor read it all ahead
    sized = list(reader.read_split(Split(path, size=size)))
    assert [b.end_offset for b in sized] == [size * (16 + k * 784) // data for k in (2, 4, 5)]
    # one open per file and read (one request on an object store): gzip is told from the
    # name, or from the magic bytes read on that same open (plain copies without .gz)
    opened: list[str] = []
    real = fs.open_read
    monkeypatch.setattr(fs, "open_read", lambda p: opened.append(Path(p).name) or real(p))
    list(reader.read_split(Split(path)))
    assert sorted(opened) == ["images.gz", "labels.gz"]
    for name in ("images", "labels"):
        write(tmp_path / f"{name}.idx", gzip.decompress((tmp_path / f"{name}.gz").read_bytes()))
    plain = make_reader({**IDX, "paths": {"image": "images.idx", "label": "labels.idx"}},
                        str(tmp_path), WHERE)
    key = plain.files()[0]  # (files() reads the headers: a broken pair fails before any work)
    opened.clear()
    again = list(plain.read(key))
    assert sorted(opened) == ["images.idx", "labels.idx"]
    np.testing.assert_array_equal(np.concatenate([b.columns["image"] for b in again]), images)


def test_idx_gzip_larger_than_one_read_and_in_two_members(tmp_path: Path) -> None:
    """Blocks read straight into their arrays from ISA-L's reader: exact across its 4 MiB
    reads of the file, for a wider big-endian dtype, and over a second gzip member."""
    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, (7000, 28, 28), dtype=np.uint8)  # incompressible: 5.5 MB
    labels = rng.normal(size=(7000, 3)).astype(">f4")
    write_idx(str(tmp_path / "images.gz"), images)
    assert (tmp_path / "images.gz").stat().st_size > GzipStream.READ_SIZE
    raw = gzip.decompress((tmp_path / "images.gz").read_bytes())
    cut = 16 + 3333 * 784 + 100  # two members, split inside a record
    write(tmp_path / "images.gz", gzip.compress(raw[:cut], mtime=0) + gzip.compress(raw[cut:], mtime=0))
    write_idx(str(tmp_path / "labels.gz"), labels)
    reader = make_reader({**IDX, "block_rows": 1000}, str(tmp_path), WHERE)
    blocks = list(reader.read(reader.files()[0]))
    assert [len(b.columns["image"]) for b in blocks] == [1000] * 7
    np.testing.assert_array_equal(np.concatenate([b.columns["image"] for b in blocks]), images)
    got = np.concatenate([b.columns["label"] for b in blocks])
    assert got.dtype == np.dtype("=f4")
    np.testing.assert_array_equal(got, labels.astype("=f4"))
    assert positions(blocks) == list(range(7000))


def test_read_idx_of_a_truncated_gzip_says_where_and_why(tmp_path: Path) -> None:
    images = np.arange(200 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(200, 28, 28)
    write_idx(str(tmp_path / "images.gz"), images)
    data = (tmp_path / "images.gz").read_bytes()
    write(tmp_path / "cut.gz", data[: len(data) // 2])
    with pytest.raises(BadInputError) as e:
        read_idx(str(tmp_path / "cut.gz"))
    assert str(e.value) == (f"{tmp_path / 'cut.gz'}: IDX data ends after record 0, but its dims "
                            "[200, 28, 28] promise 200 records (the gzip stream breaks (EOFError: "
                            "Compressed file ended before the end-of-stream marker was reached))")


def test_idx_wrong_magic_names_the_file(tmp_path: Path) -> None:
    mnist_like(tmp_path)
    write(tmp_path / "images.gz", gzip.compress(b"\x08\x03\x00\x00" + bytes(20), mtime=0))
    with pytest.raises(BadInputError, match=r"images\.gz: not an IDX file \(magic bytes 08 03 00 00 "
                                            r"at byte 0"):
        read(tmp_path, IDX)


def test_idx_dims_that_do_not_match_the_data(tmp_path: Path) -> None:
    mnist_like(tmp_path, suffix="")
    data = (tmp_path / "images").read_bytes()
    write(tmp_path / "images", data[:-100])
    config = {"format": "idx", "paths": {"image": "images", "label": "labels"}}
    # shorter than the dims: the 4 whole records go, the 5th is counted as lost
    blocks = read(tmp_path, config)
    assert positions(blocks) == [0, 1, 2, 3]
    assert [b for bl in blocks for b in bl.bad] == [BadRecord(
        str(tmp_path / "images"), "unreadable_rest", "the data ends early (truncated file) at byte "
        "3152: records 4 to 4 of the 5 its header promises are missing", record=4, byte=3152)]
    # gzipped, the size is only known while streaming: the same
    write(tmp_path / "images.gz", gzip.compress(data[:-100], mtime=0))
    blocks = read(tmp_path, {**IDX, "paths": {"image": "images.gz", "label": "labels"}})
    assert positions(blocks) == [0, 1, 2, 3]
    assert [(b.code, b.record, b.count) for bl in blocks for b in bl.bad] == [
        ("unreadable_rest", 4, 1)]
    # longer than the dims: the dims are wrong, nothing can be trusted
    write(tmp_path / "images", data + b"\x00")
    with pytest.raises(BadInputError, match=r"images: IDX dims \[5, 28, 28\] of u1 describe 3936 "
                                            r"bytes, the file has 3937"):
        read(tmp_path, config)


def test_idx_mismatched_counts_name_both_files(tmp_path: Path) -> None:
    mnist_like(tmp_path)
    write_idx(str(tmp_path / "labels.gz"), np.zeros(4, np.uint8))
    with pytest.raises(BadInputError, match=r"different numbers of records .*images\.gz has 5, "
                                          r".*labels\.gz has 4"):
        read(tmp_path, IDX)


def test_idx_files_pair_by_sorted_order(tmp_path: Path) -> None:
    for i in range(2):
        write_idx(str(tmp_path / f"img-{i}.gz"), np.full((2, 2, 2), i, np.uint8))
        write_idx(str(tmp_path / f"lab-{i}.gz"), np.full(2, 10 + i, np.uint8))
    config = {"format": "idx", "paths": {"image": "img-*.gz", "label": "lab-*.gz"}}
    blocks = read(tmp_path, config, unit=1)
    assert blocks[0].columns["label"].tolist() == [11, 11] and blocks[0].source.endswith("img-1.gz")
    write_idx(str(tmp_path / "lab-2.gz"), np.zeros(2, np.uint8))
    with pytest.raises(ConfigError, match=r"different numbers of files \{'image': 2, 'label': 3\}"):
        make_reader(config, str(tmp_path), WHERE).files()


# ---- npy / npz ---------------------------------------------------------------------------------
def test_npy_columns_are_paired_and_read_block_by_block(tmp_path: Path) -> None:
    x = np.arange(20, dtype=np.float32).reshape(5, 2, 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.arange(5) * 3)
    blocks = read(tmp_path, {"format": "npy", "paths": {"x": "x.npy", "y": "y.npy"},
                             "block_rows": 2})
    assert not isinstance(blocks[0].columns["x"], np.memmap)  # read at offsets: no SIGBUS
    assert [len(b.positions) for b in blocks] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([b.columns["x"] for b in blocks]), x)
    assert column(blocks, "y") == [0, 3, 6, 9, 12] and positions(blocks) == [0, 1, 2, 3, 4]
    np.save(tmp_path / "y.npy", np.arange(4))
    with pytest.raises(BadInputError, match=r"differ in length.*x\.npy has 5, .*y\.npy has 4"):
        read(tmp_path, {"format": "npy", "paths": {"x": "x.npy", "y": "y.npy"}})


def test_npz_arrays_with_column_mapping(tmp_path: Path) -> None:
    np.savez_compressed(tmp_path / "d.npz", a=np.arange(6).reshape(3, 2),
                        f=np.asfortranarray(np.arange(12).reshape(3, 4)), skip=np.zeros(3))
    blocks = read(tmp_path, {"format": "npz", "paths": ["d.npz"], "block_rows": 2,
                             "columns": {"a": "features", "f": "fortran"}})
    assert list(blocks[0].columns) == ["features", "fortran"]
    assert np.concatenate([b.columns["features"] for b in blocks]).tolist() == [[0, 1], [2, 3],
                                                                                [4, 5]]
    fortran = np.concatenate([b.columns["fortran"] for b in blocks])
    assert fortran.tolist() == np.arange(12).reshape(3, 4).tolist()
    with pytest.raises(BadInputError, match=r"d\.npz: npz archive has no array\(s\) \['nope'\]"):
        read(tmp_path, {"format": "npz", "paths": ["d.npz"], "columns": ["nope"]})


# ---- Parquet -----------------------------------------------------------------------------------
def test_parquet_batches_and_broken_footer(tmp_path: Path) -> None:
    table = pa.table({"id": list(range(5)), "seq": [[i] * i for i in range(5)], "x": ["a"] * 5})
    pq.write_table(table, tmp_path / "t.parquet")
    blocks = read(tmp_path, {"format": "parquet", "paths": "t.parquet", "block_rows": 2,
                             "columns": ["id", "seq"]})
    assert [b.num_rows for b in blocks] == [2, 2, 1] and list(blocks[0].columns) == ["id", "seq"]
    assert column(blocks, "seq") == [[], [1], [2, 2], [3, 3, 3], [4, 4, 4, 4]]
    assert positions(blocks) == [0, 1, 2, 3, 4]
    data = (tmp_path / "t.parquet").read_bytes()
    write(tmp_path / "t.parquet", data[:-6])  # footer cut off
    with pytest.raises(BadInputError, match=r"t\.parquet: not a readable Parquet file \(its footer.*"
                                            r"magic"):
        read(tmp_path, {"format": "parquet", "paths": "t.parquet"})


# ---- TFRecord ----------------------------------------------------------------------------------
RECORDS = [b"record-%d" % i for i in range(5)]  # 8 bytes each: 24-byte frames


def test_tfrecord_plain_and_gzip(tmp_path: Path, write_tfrecord: Any, compression: str) -> None:
    write_tfrecord(tmp_path / "t.tfrecord", RECORDS, compression)
    blocks = read(tmp_path, {"format": "tfrecord", "paths": "t.tfrecord", "block_rows": 2,
                             "compression": compression})
    assert column(blocks, "__serialized__") == RECORDS and positions(blocks) == [0, 1, 2, 3, 4]
    assert pa.types.is_large_binary(blocks[0].columns["__serialized__"].type)


def test_tfrecord_corrupted_byte_costs_one_record(tmp_path: Path) -> None:
    data = bytearray(frame_all(RECORDS))
    data[3 * 24 + 12] ^= 0x01  # first data byte of record 3
    write(tmp_path / "t.tfrecord", bytes(data))
    blocks = read(tmp_path, {"format": "tfrecord", "paths": "t.tfrecord", "block_rows": 2})
    assert column(blocks, "__serialized__") == RECORDS[:3] + RECORDS[4:]
    assert positions(blocks) == [0, 1, 2, 4]
    assert [b for bl in blocks for b in bl.bad] == [BadRecord(
        str(tmp_path / "t.tfrecord"), "corrupt_record", "data CRC mismatch in a record of 8 bytes "
        "(its length header is valid: reading goes on with the next record)", record=3, byte=72)]


# ---- images ------------------------------------------------------------------------------------
def png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def image_tree(tmp_path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    pixels = {name: rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
              for name in ("cat/a.png", "cat/b.png", "dog/c.png")}
    for name, px in pixels.items():
        (tmp_path / "root" / name).parent.mkdir(parents=True, exist_ok=True)
        write(tmp_path / "root" / name, png(px))
    buf = io.BytesIO()
    Image.fromarray(pixels["cat/a.png"]).save(buf, format="JPEG", quality=95)
    write(tmp_path / "root/dog/d.jpg", buf.getvalue())
    write(tmp_path / "root/dog/notes.txt", b"not an image, not listed")
    return pixels


def test_image_folder_bytes_and_truncated_png(tmp_path: Path) -> None:
    pixels = image_tree(tmp_path)
    big = png(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    write(tmp_path / "root/cat/t.png", big[: len(big) // 2])
    reader = make_reader({"format": "images", "paths": ["root"], "block_rows": 3},
                         str(tmp_path), WHERE)
    assert [Path(f).name for f in reader.files()] == ["root"]
    assert [str(Path(f).relative_to(tmp_path / "root")) for f in reader.inputs()] == [
        "cat/a.png", "cat/b.png", "cat/t.png", "dog/c.png", "dog/d.jpg"]
    blocks = list(reader.read(reader.files()[0]))
    assert [b.num_rows for b in blocks] == [2, 2]
    assert column(blocks, "filename") == ["cat/a.png", "cat/b.png", "dog/c.png", "dog/d.jpg"]
    assert column(blocks, "label") == ["cat", "cat", "dog", "dog"]
    assert positions(blocks) == [0, 1, 3, 4]
    assert column(blocks, "image")[2] == (tmp_path / "root/dog/c.png").read_bytes()
    assert all(b.source == reader.files()[0] for b in blocks)
    assert [b for bl in blocks for b in bl.bad] == [BadRecord(
        str(tmp_path / "root/cat/t.png"), "bad_image",
        "cannot read image: OSError: image file is truncated", record=2, raw="cat/t.png")]
    assert len(pixels) == 3


def test_image_folder_decoded_and_size_mismatch(tmp_path: Path) -> None:
    pixels = image_tree(tmp_path)
    write(tmp_path / "root/dog/e.png", png(np.zeros((7, 5, 3), np.uint8)))
    blocks = read(tmp_path, {"format": "images", "paths": ["root"], "decode": True})
    image = blocks[0].columns["image"]
    assert image.shape == (4, 6, 5, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(image[:3], np.stack(list(pixels.values())))
    assert [(Path(b.source).name, b.code, b.record, b.reason) for bl in blocks for b in bl.bad] == [
        ("e.png", "wrong_shape", 4, f"image is 5x7 (width x height), expected 5x6: the first "
                                    f"image of {tmp_path}/root is 5x6")]
    grey = read(tmp_path, {"format": "images", "paths": ["root"], "decode": True, "channels": 1})
    assert grey[0].columns["image"].shape == (4, 6, 5, 1)


# ---- python generators -------------------------------------------------------------------------
GENERATORS = '''
import numpy as np

def squares(n, scale=1, shard_index=0, num_shards=1):
    for i in range(shard_index, n, num_shards):
        yield {"id": i, "sq": i * i * scale, "vec": np.full(2, i)}

def flaky(n):
    yield {"id": 0}
    yield ["not", "a", "dict"]
    yield {"id": 2, "extra": "x"}
    raise KeyError("boom")
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "user_gens.py").write_text(textwrap.dedent(GENERATORS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_gens"


def test_python_generator_shards(tmp_path: Path, user_module: str) -> None:
    config = {"format": "python", "function": f"{user_module}:squares", "args": [7],
              "kwargs": {"scale": 2}, "num_shards": 2, "block_rows": 2}
    reader = make_reader(config, str(tmp_path), WHERE)
    assert reader.files() == [f"python:{user_module}:squares#0-of-2",
                              f"python:{user_module}:squares#1-of-2"]
    blocks = list(reader.read(reader.files()[1]))
    assert column(blocks, "id") == [1, 3, 5] and column(blocks, "sq") == [2, 18, 50]
    assert positions(blocks) == [0, 1, 2] and [b.num_rows for b in blocks] == [2, 1]
    assert isinstance(blocks[0].columns["vec"][0], np.ndarray)
    assert blocks[0].source == reader.files()[1]


def test_python_generator_bad_record_and_exception(tmp_path: Path, user_module: str) -> None:
    reader = make_reader({"format": "python", "function": f"{user_module}:flaky", "args": [3],
                          "block_rows": 10}, str(tmp_path), WHERE)
    got: list[Block] = []
    with pytest.raises(RecordError, match=r"user_gens:flaky raised KeyError at record 3: 'boom'"):
        for block in reader.read(reader.files()[0]):
            got.append(block)
    assert got == []  # the block was not full yet when the generator failed
    reader.block_rows = 1
    got = []
    with pytest.raises(RecordError):
        for block in reader.read(reader.files()[0]):
            got.append(block)
    assert positions(got) == [0, 2] and column(got, "id") == [0, 2]
    assert column(got[1:], "extra") == ["x"]
    assert [b for bl in got for b in bl.bad] == [BadRecord(
        f"python:{user_module}:flaky", "wrong_type", "expected a dict of feature values, got list",
        record=1, raw="['not', 'a', 'dict']")]


# ---- end to end: blocks encode under the schemas -----------------------------------------------
def encode_all(blocks: list[Block], schema: Any) -> int:
    encoder = Encoder(schema)
    total = 0
    for block in blocks:
        out = encoder.encode(block.columns, source=block.source, positions=block.positions)
        assert out.bad == [] and block.bad == []
        total += len(out.records)
    return total


def test_idx_encodes_as_mnist(tmp_path: Path) -> None:
    mnist_like(tmp_path, n=7)
    blocks = read(tmp_path, {**IDX, "block_rows": 3})
    assert encode_all(blocks, load_schema("schemas/mnist.yaml")) == 7


def test_iris_csv_encodes(tmp_path: Path) -> None:
    from sklearn.datasets import load_iris  # noqa: PLC0415

    iris = load_iris()
    names = ["Iris-setosa", "Iris-versicolor", "Iris-virginica"]
    lines = ["sepal_length,sepal_width,petal_length,petal_width,species"] + [
        ",".join(f"{v:.1f}" for v in row) + f",{names[t]}"
        for row, t in zip(iris.data, iris.target, strict=True)
    ]
    write(tmp_path / "iris.csv", ("\n".join(lines) + "\n").encode())
    blocks = read(tmp_path, {"format": "csv", "paths": "iris.csv", "block_rows": 64})
    assert encode_all(blocks, load_schema("schemas/iris.yaml")) == 150


def test_text_and_jsonl_encode_as_sentences(tmp_path: Path) -> None:
    schema = load_schema("schemas/sentences.yaml")
    write(tmp_path / "s.txt", b"3 1 4 1 5\n\n9 2 6\n5\n")
    assert encode_all(read(tmp_path, {"format": "text", "paths": "s.txt"}), schema) == 3
    rows = [{"id": i, "length": i + 1, "tokens": list(range(i + 1))} for i in range(4)]
    write(tmp_path / "s.jsonl", "\n".join(json.dumps(r) for r in rows).encode())
    assert encode_all(read(tmp_path, {"format": "jsonl", "paths": "s.jsonl"}), schema) == 4


def test_numpy_parquet_python_images_encode(tmp_path: Path, user_module: str) -> None:
    digits = load_schema("schemas/digits.yaml")
    np.save(tmp_path / "image.npy", np.arange(3 * 64).reshape(3, 8, 8, 1) % 17)
    np.save(tmp_path / "label.npy", np.arange(3))
    npy = {"format": "npy", "paths": {"image": "image.npy", "label": "label.npy"}}
    assert encode_all(read(tmp_path, npy), digits) == 3

    pq.write_table(pa.table({"image": [list(range(64))] * 2, "label": [1, 2]}),
                   tmp_path / "d.parquet")
    assert encode_all(read(tmp_path, {"format": "parquet", "paths": "d.parquet"}), digits) == 2

    squares = schema_from_dict({"features": {
        "id": {"dtype": "int64", "shape": []}, "sq": {"dtype": "float32", "shape": []},
        "vec": {"dtype": "int64", "shape": [2]}}})
    python = {"format": "python", "function": f"{user_module}:squares", "args": [5]}
    assert encode_all(read(tmp_path, python), squares) == 5

    image_tree(tmp_path)
    (tmp_path / "root/dog/d.jpg").unlink()
    pictures = schema_from_dict({"features": {
        "image": {"dtype": "uint8", "shape": [6, 5, 3], "encoding": "png"},
        "label": {"dtype": "int64", "shape": [], "vocabulary": ["cat", "dog"]}}})
    assert encode_all(read(tmp_path, {"format": "images", "paths": ["root"]}), pictures) == 3
    decoded = schema_from_dict({"features": {
        "image": {"dtype": "uint8", "shape": [6, 5, 3], "encoding": "raw"},
        "filename": {"dtype": "bytes", "shape": []}}})
    blocks = read(tmp_path, {"format": "images", "paths": ["root"], "decode": True})
    assert encode_all(blocks, decoded) == 3
