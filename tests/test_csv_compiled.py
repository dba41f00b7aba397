"""The compiled CSV chunk loop (etl.sources.csv_compiled) takes only what Arrow's CSV reader
takes, with Arrow's values bit for bit; and the CSV reader gives the same blocks, positions,
lines and rejected rows with it as with Arrow's streaming reader alone, whatever the file
holds and wherever a chunk is handed to Arrow."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from etl.contract.schema import Schema, schema_from_dict
from etl.sources import csv_compiled, make_reader
from etl.sources.csv_source import CsvReader

TYPES = [pa.float32(), pa.float64(), pa.int64(), pa.binary()]
NAMES = ["f", "d", "i", "s"]


def _parser(delimiter: str = ",", quote: str = '"') -> csv_compiled.ChunkParser:
    parser = csv_compiled.chunk_parser(NAMES, TYPES, delimiter, quote)
    if parser is None:
        pytest.skip("no compiled loops on this machine (etl.formats.jit)")
    return parser


def _arrow(chunk: bytes, delimiter: str = ",") -> pa.Table | None:
    """What the CSV fast path's Arrow reader makes of the chunk alone (None: it refuses it)."""
    try:
        return pa_csv.read_csv(
            pa.BufferReader(chunk),
            read_options=pa_csv.ReadOptions(column_names=NAMES, use_threads=False),
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, newlines_in_values=True,
                                              ignore_empty_lines=False),
            convert_options=pa_csv.ConvertOptions(
                column_types=dict(zip(NAMES, TYPES, strict=True)), null_values=["", "NA"],
                strings_can_be_null=False, quoted_strings_can_be_null=True))
    except pa.ArrowInvalid:
        return None


def _bits(table: pa.Table | pa.RecordBatch) -> list[list]:
    """Every value, floats as their bit patterns (so -0.0 and 0.0 differ)."""
    out = []
    for col, t in zip(table.columns, TYPES, strict=True):
        values = col.to_numpy(zero_copy_only=False) if not isinstance(col, pa.ChunkedArray) \
            else col.combine_chunks().to_numpy(zero_copy_only=False)
        if t == pa.float32():
            values = np.asarray(values, np.float32).view(np.uint32)
        elif t == pa.float64():
            values = np.asarray(values, np.float64).view(np.uint64)
        out.append(list(values))
    return out


def _float32_midpoint(rng: random.Random) -> str:
    """The shortest decimal of a double exactly halfway between two float32s: rounding it to
    double and then to float32 can differ from rounding it to float32 once."""
    f = np.float32(rng.uniform(-1e6, 1e6))
    bits = int(np.array([f]).view(np.uint32)[0])
    lo, hi = (np.array([bits, bits + 1], np.uint32).view(np.float32).astype(np.float64))
    return repr(float((lo + hi) / 2))


def _number(rng: random.Random) -> str:
    pick = rng.randrange(12)
    if pick == 0:
        return repr(float(np.float32(rng.uniform(-1e3, 1e3))))
    if pick == 1:
        return _float32_midpoint(rng)
    if pick == 2:
        return rng.choice(["1.", ".5", "+1", "1e", "1e+", "--1", "1e400", "-1e-400", "nan",
                           "inf", "-inf", " 1", "1 ", "0x10", "1_0", "NA", "", "1.5E3", "-0",
                           "-0.0", "0e99999", "00012.5000", "9007199254740993", "1e22", "1e23",
                           "3.4028235e38", "3.4028236e38", "1.17549435e-38", "1e-45", "1.0e-7"])
    if pick == 3:  # long digit strings: past the 8-digit and 2^53 limits
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 22)))
        return (rng.choice(["", "-"]) + digits[: rng.randrange(1, len(digits) + 1)] + "."
                + digits + rng.choice(["", f"e{rng.randrange(-40, 40)}"]))
    if pick == 4:
        return str(rng.randrange(-10**19, 10**19))
    mantissa = rng.randrange(0, 10 ** rng.randrange(1, 10))
    text = str(mantissa)
    if rng.random() < 0.7:
        cut = rng.randrange(0, len(text) + 1)
        text = (text[:cut] or "0") + "." + (text[cut:] or "0")
    if rng.random() < 0.3:
        text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 45))
    return rng.choice(["", "-"]) + text


def _integer(rng: random.Random) -> str:
    pick = rng.randrange(6)
    if pick == 0:
        return rng.choice(["+5", "1.0", "", "NA", "9223372036854775807", "-9223372036854775808",
                           "9223372036854775808", "007", "-0", "1e3", " 3", "99999999",
                           "100000000", "999999999999999999", "1000000000000000000"])
    return str(rng.randrange(-10 ** rng.randrange(1, 19), 10 ** rng.randrange(1, 19)))


def _text(rng: random.Random) -> bytes:
    if rng.random() < 0.1:
        return rng.choice([b"", b'"q"', b'a"b', b"a\rb", b"\xef\xbb\xbfx", b"\xff\xfe", b"\x00",
                           b"a,b", b"x" * 40])
    return bytes(rng.choice(b"abcxyz019 ._-\t") for _ in range(rng.randrange(0, 35)))


def _row(rng: random.Random) -> bytes:
    fields = [_number(rng).encode(), _number(rng).encode(), _integer(rng).encode(), _text(rng)]
    if rng.random() < 0.02:
        fields = fields[: rng.randrange(1, 4)]  # too few fields
    return b",".join(fields) + b"\n"


def test_the_loop_takes_only_what_arrow_takes_with_arrows_values() -> None:
    parser, rng = _parser(), random.Random(29)
    taken = refused = 0
    for _ in range(4000):
        chunk = b"".join(_row(rng) for _ in range(rng.randrange(1, 4)))
        batch = parser.parse(chunk + csv_compiled.PAD, len(chunk))
        if batch is None:
            refused += 1
            continue
        taken += 1
        table = _arrow(chunk)
        assert table is not None, chunk
        assert batch.num_rows == table.num_rows, chunk
        assert _bits(batch) == _bits(table), chunk
    assert taken > 500 and refused > 1000  # both sides of the line are exercised


@pytest.mark.parametrize("text", [
    "1.0000000596046448",  # 17 digits: past the exact fast path, refused
    "16777217",  # 2^24 + 1: a float32 tie, exact in double
    "0.000000000000000000000000000000000000011754942",  # just under float32's normal range
])
def test_float32_cases_near_a_second_rounding_match_arrow(text: str) -> None:
    parser = _parser()
    chunk = f"{text},1,1,x\n".encode()
    batch = parser.parse(chunk + csv_compiled.PAD, len(chunk))
    table = _arrow(chunk)
    assert table is not None
    if batch is not None:
        assert _bits(batch) == _bits(table)


def test_every_float32_midpoint_is_left_to_arrow_or_matches_it() -> None:
    parser, rng = _parser(), random.Random(7)
    for _ in range(2000):
        text = _float32_midpoint(rng)
        chunk = f"{text},0,0,x\n".encode()
        batch = parser.parse(chunk + csv_compiled.PAD, len(chunk))
        if batch is not None:
            table = _arrow(chunk)
            assert _bits(batch) == _bits(table), text


def test_decimals_whose_double_is_a_float32_midpoint_are_left_to_arrow() -> None:
    """16 digits between 8 and 9: the nearest double is the midpoint itself, so rounding that
    double to float32 (ties to even) is wrong for about half of them."""
    parser, rng = _parser(), random.Random(5)
    for _ in range(500):
        f = np.float32(rng.uniform(8, 9))
        up = np.nextafter(f, np.float32(10))
        midpoint = (float(f) + float(up)) / 2
        text = f"{midpoint:.15e}"
        assert float(text) == midpoint and len(text.split("e")[0]) == 17
        chunk = f"{text},0,0,x\n".encode()
        assert parser.parse(chunk + csv_compiled.PAD, len(chunk)) is None, text
        assert _arrow(chunk) is not None


def test_sixteen_digits_past_two_to_the_53_match_arrow_or_are_left_to_it() -> None:
    """8 + 8 digits above 2^53 are no exact double: the loop must not take them as one."""
    parser, rng = _parser(), random.Random(9)
    for _ in range(1000):
        digits = str(rng.randrange(9007199254740993, 10**16))
        text = f"{digits[:8]}.{digits[8:]}"
        chunk = f"{text},{text},0,x\n".encode()
        batch = parser.parse(chunk + csv_compiled.PAD, len(chunk))
        if batch is not None:
            assert _bits(batch) == _bits(_arrow(chunk)), text


def test_a_long_chunk_across_many_windows_equals_arrow() -> None:
    parser, rng = _parser(), random.Random(3)
    lines = []
    for i in range(20000):  # plain rows of every length, some text fields past 16 and 64 bytes
        text = b"t" * (i % 150)
        lines.append(b"%.9g,%.12g,%d,%s\n" % (rng.uniform(-9, 9), rng.uniform(-1e5, 1e5),
                                              rng.randrange(-10**17, 10**17), text))
    chunk = b"".join(lines)
    assert len(chunk) > 20 * csv_compiled.WINDOW
    batch = parser.parse(chunk + csv_compiled.PAD, len(chunk))
    assert batch is not None and batch.num_rows == 20000
    assert _bits(batch) == _bits(_arrow(chunk))
    # a row longer than a window is left to Arrow
    long_row = b"1,2,3," + b"x" * (2 * csv_compiled.WINDOW) + b"\n"
    assert parser.parse(chunk + long_row + csv_compiled.PAD, len(chunk) + len(long_row)) is None


def test_a_quote_or_carriage_return_anywhere_leaves_the_chunk_to_arrow() -> None:
    parser = _parser()
    for chunk in [b'1,2,3,"x"\n', b"1,2,3,x\r\n", b'1,2,3,x"y\n', b"1,2,3\r,x\n"]:
        assert parser.parse(chunk + csv_compiled.PAD, len(chunk)) is None
    assert _parser(quote="").parse(b'1,2,3,x"y\n' + csv_compiled.PAD, 10) is not None


def test_no_loop_for_delimiters_a_number_can_hold_or_other_types() -> None:
    assert csv_compiled.chunk_parser(NAMES, TYPES, ".", '"') is None
    assert csv_compiled.chunk_parser(NAMES, TYPES, "e", '"') is None
    assert csv_compiled.chunk_parser(["x"], [pa.int32()], ",", '"') is None


# ---- the reader, with and without the loop ------------------------------------------------------
SCHEMA = schema_from_dict({"name": "t", "kind": "example", "features": {
    "f": {"dtype": "float32", "shape": []},
    "d": {"dtype": "float16", "shape": []},  # read as float64 (numeric_columns)
    "i": {"dtype": "int64", "shape": []},
    "s": {"dtype": "string", "shape": []},
}})


def _plain_rows(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [b"%.7g,%.6f,%d,%s\n" % (rng.uniform(-9, 9), rng.uniform(-1e5, 1e5),
                                    rng.randrange(-10**9, 10**9), b"w" * rng.randrange(0, 30))
            for _ in range(n)]


# what is put at row 2,500 of 5,000 (each case a file of its own, so none hides another)
CASES = {
    "plain": None,
    "quoted field": b'1,2,3,"a,b"\n',
    "quoted newline": b'1,2,3,"a\nb"\n',
    "unterminated quote": b'1,2,3,"ab\n',
    "null marker": b"NA,2,3,x\n",
    "empty number": b",2,3,x\n",
    "crlf line": b"1,2,3,x\r\n",
    "too few fields": b"1,2\n",
    "too many fields": b"1,2,3,x,y\n",
    "beyond the fast path": b"1.00000005960464477539,123456789012345678901e-3,3,x\n",
    "overflowing float": b"1e40,2,3,x\n",
    "overflowing int": b"1,2,99999999999999999999,x\n",
    "bom mid-file": b"\xef\xbb\xbfx,2,3,x\n",
    "not utf-8": b"1,2,3,\xff\n",
    "blank line": b"\n",
    "bom on 300 lines": None,  # some of them start a chunk, where Arrow alone would drop it
}


def _blocks(path: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch, splits: int = 1,
            schema: Schema = SCHEMA, **options: object) -> list[tuple]:
    """Every block of the file as plain values, read in `splits` splits."""
    with monkeypatch.context() as patch:
        patch.setattr(CsvReader, "FAST_BLOCK_BYTES", 4096)
        if not compiled:
            patch.setattr(CsvReader, "_plain_start", lambda self, fh, split: None)
        reader = make_reader({"format": "csv", "paths": [str(path)], "block_rows": 700,
                              **options}, str(path.parent), "test")
        reader.prepare(schema, 64 << 20)
        parts = reader.splits(str(path), max(1, path.stat().st_size // splits))
        out = []
        for split in parts:
            for block in reader.read_split(split):
                out.append(({k: v.to_pylist() for k, v in block.columns.items()},
                            np.asarray(block.positions).tolist(),
                            np.asarray(block.lines).tolist(),
                            [b.message() for b in block.bad]))
        return out


def _count_compiled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    taken = [0]
    parse = csv_compiled.ChunkParser.parse

    def counting(self: csv_compiled.ChunkParser, buf: bytes, size: int) -> pa.RecordBatch | None:
        batch = parse(self, buf, size)
        taken[0] += batch is not None
        return batch

    monkeypatch.setattr(csv_compiled.ChunkParser, "parse", counting)
    return taken


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("splits", [1, 3])
def test_reader_gives_the_same_blocks_with_the_loop_as_with_arrow_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, splits: int) -> None:
    _parser()
    rows = _plain_rows(5000, seed=len(case))
    if CASES[case] is not None:
        rows[2500] = CASES[case]
    if case == "bom on 300 lines":
        rows[2500:2800] = [csv_compiled.BOM + row for row in rows[2500:2800]]
    path = tmp_path / "in.csv"
    path.write_bytes(b"f,d,i,s\n" + b"".join(rows))
    taken = _count_compiled(monkeypatch)
    expected = _blocks(path, False, monkeypatch, splits)
    assert taken[0] == 0
    got = _blocks(path, True, monkeypatch, splits)
    assert taken[0] > 10  # the loop read most chunks
    assert got == expected
    assert sum(len(b[1]) for b in got) >= 4999 - (case == "unterminated quote") * 2500


def test_no_chunk_handed_to_arrow_alone_starts_with_a_bom(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line but the first starts with a BOM and holds a number past the loop's reach:
    Arrow alone on a chunk would drop the BOM of its first line; the streaming reader keeps
    it, and so does the reader with the loop (as text: the value holds U+FEFF)."""
    schema = schema_from_dict({"name": "t", "kind": "example", "features": {
        "s": {"dtype": "string", "shape": []}, "f": {"dtype": "float32", "shape": []}}})
    path = tmp_path / "in.csv"
    rows = [csv_compiled.BOM + b"w%d,1.00000000000000000001\n" % i for i in range(3000)]
    path.write_bytes(b"s,f\nw,1\n" + b"".join(rows))  # (a first BOM is Arrow's: no loop)
    expected = _blocks(path, False, monkeypatch, schema=schema)
    got = _blocks(path, True, monkeypatch, schema=schema)
    assert got == expected
    assert sum(len(b[1]) for b in got) == 3001


@pytest.mark.parametrize("options,head,tail,records", [
    ({"header": False, "columns": ["f", "d", "i", "s"]}, b"", b"1,2,3,last-no-newline", 3001),
    ({"skip_rows": 2}, b"skipped 1\nskipped 2\nf,d,i,s\n", b"", 3000),
    # a quote in the skipped lines: Arrow's reader does the skipping, the loop is not used
    ({"skip_rows": 1}, b'"quoted\nskip"\nf,d,i,s\n', b"", None),
    # a BOM first: Arrow's streaming reader drops it, the loop is not used
    ({"header": False, "columns": ["f", "d", "i", "s"]}, b"\xef\xbb\xbf", b"", None),
    ({"quote_char": None}, b"f,d,i,s\n", b'1,2,3,a"b\n', 3001),
    ({"delimiter": ";"}, b"f;d;i;s\n", b"", 3000),
])
def test_reader_edges_of_the_file_match_arrow_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict, head: bytes,
        tail: bytes, records: int | None) -> None:
    _parser()
    body = b"".join(_plain_rows(3000, seed=5))
    if options.get("delimiter") == ";":
        body = body.replace(b",", b";")
    path = tmp_path / "in.csv"
    path.write_bytes(head + body + tail)
    expected = _blocks(path, False, monkeypatch, 1, **options)
    taken = _count_compiled(monkeypatch)
    got = _blocks(path, True, monkeypatch, 1, **options)
    assert got == expected
    if records is not None:
        assert sum(len(b[1]) for b in got) == records
        assert taken[0] > 10


def test_float_text_stored_as_the_reader_reads_it_bit_for_bit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of float32 midpoints and long decimals: the same float32 bits either way."""
    _parser()
    rng = random.Random(11)
    rows = [f"{_float32_midpoint(rng)},{rng.uniform(-1, 1):.9f},{i},x\n".encode()
            for i in range(4000)]
    path = tmp_path / "in.csv"
    path.write_bytes(b"f,d,i,s\n" + b"".join(rows))
    expected = _blocks(path, False, monkeypatch)
    got = _blocks(path, True, monkeypatch)

    def bits(blocks: list[tuple]) -> Iterator[int]:
        for columns, *_ in blocks:
            yield from (struct.unpack("<I", struct.pack("<f", v))[0] for v in columns["f"])

    assert list(bits(got)) == list(bits(expected)) and len(list(bits(got))) == 4000
