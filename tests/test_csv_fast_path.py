"""The CSV fast path (pyarrow parses the schema's numeric columns with all cores) must give
exactly what the careful, line-tracking path gives, and hand over to it cleanly mid-file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from etl.contract.codec import Encoder
from etl.contract.schema import Schema, schema_from_dict
from etl.sources import make_reader
from etl.sources.base import Split

SCHEMA = schema_from_dict({"name": "t", "kind": "example", "features": {
    "x": {"dtype": "float32", "shape": []},
    "n": {"dtype": "int64", "shape": []},
    "s": {"dtype": "string", "shape": []},
}})


def _read(path: Path, fast: bool, block_rows: int = 4,
          schema: Schema = SCHEMA) -> tuple[list, list, list, list]:
    """(positions, encoded records, rejected messages, lines of the written rows) of a file."""
    reader = make_reader({"format": "csv", "paths": [str(path)], "block_rows": block_rows},
                         str(path.parent), "test")
    if fast:
        reader.prepare(schema, 64 << 20)
    encoder = Encoder(schema)
    positions, records, bad, lines = [], [], [], []
    for block in reader.read(str(path)):
        assert block.lines is not None and len(block.lines) == block.num_rows
        bad += [b.message() for b in block.bad]
        out = encoder.encode(block.columns, source=str(path), positions=block.positions,
                             lines=block.lines)
        bad += [b.message() for b in out.bad]
        positions += np.asarray(block.positions)[out.rows].tolist()
        lines += np.asarray(block.lines)[out.rows].tolist()
        records += out.records
    return positions, records, bad, lines


def _floats(records: list[bytes], name: str) -> list[float]:
    """Each record's first value of float feature `name`, as protobuf reads it."""
    from tensorflow.core.example import example_pb2  # noqa: PLC0415 - protobuf only

    return [example_pb2.Example.FromString(r).features.feature[name].float_list.value[0]
            for r in records]


def test_schema_names_only_single_scalar_numeric_columns() -> None:
    assert SCHEMA.numeric_columns() == {"x": "float32", "n": "int64"}
    half = schema_from_dict({"name": "t", "kind": "example",
                             "features": {"h": {"dtype": "float16", "shape": []}}})
    assert half.numeric_columns() == {"h": "float64"}  # Arrow parses no half floats


def test_fast_path_equals_careful_path_on_clean_tricky_text(tmp_path: Path) -> None:
    path = tmp_path / "clean.csv"
    path.write_text('x,n,s\n1.5,7,a\n" 2.25 ",-3,"b,c"\nnan,0,\n,,\n1e3,9223372036854775807,"q""q"\n'
                    "-0.0,-9223372036854775808,z\n")
    fast = _read(path, fast=True)
    careful = _read(path, fast=False)
    assert fast == careful
    positions, records, bad, lines = fast
    # the blank row 3 is no record, on both paths; row 2 (line 4) holds a NaN the schema forbids
    assert positions == [0, 1, 4, 5]
    assert lines == [2, 3, 6, 7]
    (nan,) = bad
    assert nan.startswith(f"{path}:4: feature 'x':") and nan.endswith("[nan_not_allowed]")
    assert len(records) == 4


def test_text_beyond_the_float_range_is_refused_on_both_paths(tmp_path: Path) -> None:
    """Arrow parses "1e400" and "inf" alike as inf; the fast path must not store the first as
    an infinity where the careful path refuses it (it did: a feature with allow_nan kept it)."""
    schema = schema_from_dict({"name": "t", "kind": "example", "features": {
        "x": {"dtype": "float32", "shape": [], "allow_nan": True},
        "n": {"dtype": "int64", "shape": []},
        "s": {"dtype": "string", "shape": []},
    }})
    path = tmp_path / "big.csv"
    path.write_text("x,n,s\n1.5,1,a\n1e400,2,b\ninf,3,c\n-1e39,4,d\nnan,5,e\n")
    fast = _read(path, fast=True, schema=schema)
    assert fast == _read(path, fast=False, schema=schema)
    positions, records, bad, _ = fast
    assert positions == [0, 2, 4]
    assert bad == [f"{path}:3: feature 'x': value 1e400 overflows float32 [out_of_range]",
                   f"{path}:5: feature 'x': value -1e39 overflows float32 [out_of_range]"]
    x = _floats(records, "x")
    assert x[0] == 1.5 and x[1] == float("inf") and np.isnan(x[2])


def test_float32_text_is_rounded_once_as_tf_decode_csv_does(tmp_path: Path) -> None:
    """A decimal just above a float32 midpoint rounds up when read as float32 directly (strtof,
    tf.io.decode_csv); through a double it lands on the midpoint and rounds to even, a unit
    lower. Both paths, and the careful path's cell-by-cell parse (a batch with a bad cell),
    store the single rounding."""
    cells = ["1.0000000596046448",  # 1 + 2**-24 (the midpoint) + 2.2e-17: up, 0x3f800001
             "0.10000000894069672",  # above the midpoint of 0.1f and its successor
             "3.4028235e38", "1e-50", "-0", "0.1"]
    want = [0x3F800001, 0x3DCCCCCE, 0x7F7FFFFF, 0, 0x80000000, 0x3DCCCCCD]
    path = tmp_path / "round.csv"
    path.write_text("x,n,s\n" + "".join(f"{c},{i},a\n" for i, c in enumerate(cells)))
    bad_cell = tmp_path / "round_bad.csv"  # one unparsable cell: the careful path's slow parse
    bad_cell.write_text("x,n,s\n" + "".join(f"{c},{i},a\n" for i, c in enumerate(cells))
                        + "oops,9,a\n")
    for f, fast in ((path, True), (path, False), (bad_cell, False)):
        _, records, _, _ = _read(f, fast=fast, block_rows=1 << 10)
        got = np.asarray(_floats(records, "x"), np.float32).view(np.uint32)
        assert got.tolist() == want, (f.name, fast)


def test_fast_path_hands_over_mid_file_without_losing_or_repeating_records(tmp_path: Path) -> None:
    n = 300_000  # ~7 MB: more than one 4 MB parser chunk, so blocks go out before the error
    lines = [f"{i}.5,{i},s{i}" for i in range(n)]
    lines[290_000] = "oops,290000,s"  # an unparsable float late in the file
    lines[295_000] = "1.0,295000"  # a row with a missing field
    path = tmp_path / "bad.csv"
    path.write_text("x,n,s\n" + "\n".join(lines) + "\n")
    reader = make_reader({"format": "csv", "paths": [str(path)], "block_rows": 65536},
                         str(tmp_path), "test")
    reader.prepare(SCHEMA, 64 << 20)
    before_error = []
    try:
        for block in reader._read_fast(Split(str(path))):
            before_error.append(block.num_rows)
    except pa.ArrowInvalid:
        pass
    assert sum(before_error) >= 65536  # the fast path really did deliver blocks first

    positions, records, bad, lines = _read(path, fast=True, block_rows=65536)
    assert positions == [i for i in range(n) if i not in (290_000, 295_000)]
    assert lines == [p + 2 for p in positions]
    careful = _read(path, fast=False, block_rows=65536)
    assert (positions, records, lines) == (careful[0], careful[1], careful[3])
    assert len(bad) == 2
    (parse_error,) = [b for b in bad if "oops" in b]
    assert parse_error.startswith(f"{path}:290002: feature 'x':")  # line 290002, not record index
    (short_row,) = [b for b in bad if "fields" in b]
    assert short_row == (f"{path}:295002: wrong number of fields (expected 3, found 2) "
                         f"[wrong_field_count]")


def test_fast_path_rejects_bad_utf8_like_the_careful_path(tmp_path: Path) -> None:
    path = tmp_path / "utf8.csv"
    path.write_bytes(b"x,n,s\n1,1,ok\n2,2,\xff\xfe\n3,3,fine\n")
    fast = _read(path, fast=True)
    assert fast == _read(path, fast=False)
    assert fast[0] == [0, 2] and fast[2] == [
        f"{path}:3: not valid UTF-8 text (a file in another encoding: set encoding:, e.g. cp1252 "
        f"or latin-1) [not_utf8]"]


def test_fast_path_columns_are_arrow_numbers(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,n,s\n1.5,2,a\n")
    reader = make_reader({"format": "csv", "paths": [str(path)]}, str(tmp_path), "test")
    reader.prepare(SCHEMA, 64 << 20)
    (block,) = list(reader.read(str(path)))
    assert block.columns["x"].type == pa.float32() and block.columns["n"].type == pa.int64()
    assert block.columns["s"].to_pylist() == ["a"]


def test_any_newline_looks_only_at_the_batchs_own_text_values() -> None:
    """The fast path's check for a quoted newline (etl.sources.csv_source._any_newline): one
    scan of each text column's value bytes, of the batch's own slice only."""
    from etl.sources.csv_source import _any_newline  # noqa: PLC0415 - one private helper

    def batch(*cols: pa.Array) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(list(cols), names=[f"c{i}" for i in range(len(cols))])

    nums = pa.array([1.5, 2.5, 3.5])
    plain = pa.array([b"a", b"b", b"c"])
    assert not _any_newline(batch(nums, plain))
    assert _any_newline(batch(nums, pa.array([b"a", b"x\ny", b"c"])))
    for kind in (pa.string(), pa.large_string(), pa.large_binary()):
        assert _any_newline(batch(pa.array(["a", "b", "c\n"], kind)))
        assert not _any_newline(batch(pa.array(["a", None, ""], kind)))
    both = pa.array([b"x\ny", b"ok", b"fine", b"z\n"])
    assert not _any_newline(batch(both.slice(1, 2)))  # the newlines are outside the slice
    assert _any_newline(batch(both.slice(1, 3)))
    assert not _any_newline(batch(pa.array([None, None], pa.binary())))
