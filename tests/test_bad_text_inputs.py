"""Bad text inputs (CSV, JSON Lines, plain text): exact accounting, 1-based lines, reason codes.

Each case is one bad record among good ones, generated in a tmp dir: the readers must reject
exactly that record, with one reason code and the line an editor shows, let every good
neighbour through with its own line, and never raise. A CSV row is one record whatever
happens to its neighbours (positions stay the same as if each rejected row were one record).
The 300 MB cases run in a subprocess that reports its peak RSS.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from cli.run import run_job
from etl.base.errors import BadInputError
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.job.config import job_from_dict
from etl.sources import make_reader
from etl.sources.base import Block

MiB = 1 << 20
NUMBERS = schema_from_dict({"name": "t", "kind": "example", "features": {
    "id": {"dtype": "int64", "shape": []},
    "name": {"dtype": "string", "shape": []},
    "score": {"dtype": "float32", "shape": []},
}})
TOKENS = schema_from_dict({"name": "t", "kind": "example", "features": {
    "id": {"dtype": "int64", "shape": []},
    "tokens": {"dtype": "string", "shape": [None]},
}})


def read(path: Path, fmt: str, schema: Any = None, limit: int = 64 * MiB, **opts: Any) -> list[Block]:
    reader = make_reader({"format": fmt, "paths": [path.name], **opts}, str(path.parent), "t")
    if schema is not None:
        reader.prepare(schema, limit)
    reader.max_record_bytes = limit
    return list(reader.read(str(path)))


def summary(blocks: list[Block]) -> tuple[int, list[tuple[int | None, str]], list[int], list[int]]:
    """(good rows, [(line, code)] of rejected ones, positions, lines of the good rows)."""
    for b in blocks:
        assert b.lines is not None and len(b.lines) == b.num_rows
    return (sum(b.num_rows for b in blocks),
            [(r.line, r.code) for b in blocks for r in b.bad],
            [int(p) for b in blocks for p in b.positions],
            [int(n) for b in blocks for n in b.lines])


def csv_rows(n: int = 1000) -> list[str]:
    """Header + n rows `i,name i,i.5`; row i is on line i + 2."""
    return ["id,name,score"] + [f'{i},"name {i}",{i}.5' for i in range(n)]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


# ---- CSV ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("bad_row", ['900,"name 900,900.5', '900,name 900,"900.5'])
def test_csv_unterminated_quote_rejects_one_row(tmp_path: Path, fast: bool, bad_row: str) -> None:
    # a quote in a middle field (pyarrow: a wrong field count) or in the last one (pyarrow
    # alone would take the rest of the file as one good value)
    rows = csv_rows()
    rows[901] = bad_row  # record 900, line 902
    path = write_lines(tmp_path / "q.csv", rows)
    good, bad, positions, lines = summary(read(path, "csv", NUMBERS if fast else None))
    assert (good, bad) == (999, [(902, "unterminated_quote")])
    assert positions == [i for i in range(1000) if i != 900]
    assert lines == [p + 2 for p in positions]


def test_csv_unterminated_quote_is_closed_by_a_later_one(tmp_path: Path) -> None:
    # the next row's opening quote closes the bad one: pyarrow reads lines 6-7 as one good row
    # `4 | x,4\n5,v5" | 5`; its odd number of quotes gives it away, line 7 is parsed again
    rows = ["a,b,c"] + [f'{i},"v{i}",{i}' for i in range(20)]
    rows[5] = '4,"x,4'
    rows[12] = '11,"v11,11'  # and again, further on
    path = write_lines(tmp_path / "q.csv", rows)
    blocks = read(path, "csv")
    good, bad, positions, lines = summary(blocks)
    assert bad == [(6, "unterminated_quote"), (13, "unterminated_quote")]
    assert good == 18 and positions == [i for i in range(20) if i not in (4, 11)]
    assert lines == [p + 2 for p in positions]
    assert [b.columns["b"].to_pylist() for b in blocks][0][4] == "v5"


def test_csv_wrong_field_count_rejects_one_row(tmp_path: Path) -> None:
    rows = csv_rows()
    rows[501] = "500,too,many,fields"
    path = write_lines(tmp_path / "f.csv", rows)
    blocks = read(path, "csv", NUMBERS)
    good, bad, positions, lines = summary(blocks)
    assert (good, bad) == (999, [(502, "wrong_field_count")])
    assert [r.reason for b in blocks for r in b.bad] == ["wrong number of fields (expected 3, found 4)"]
    assert positions == [i for i in range(1000) if i != 500] and lines == [p + 2 for p in positions]


def test_csv_encoder_errors_name_the_line_not_the_record(tmp_path: Path) -> None:
    # quoted newlines before the bad value: record 3 starts on line 7
    path = tmp_path / "pos.csv"
    path.write_text('id,name,score\n0,"a\nb",1\n1,"c\nd",2\n2,e,3\noops,f,4\n')
    blocks = read(path, "csv", NUMBERS)
    encoder = Encoder(NUMBERS)
    rejected = [b for block in blocks
                for b in encoder.encode(block.columns, str(path), block.positions,
                                        lines=block.lines).bad]
    assert [(b.line, b.feature, b.code) for b in rejected] == [(7, "id", "unparsable_number")]
    assert rejected[0].message().startswith(f"{path}:7: feature 'id':")


@pytest.mark.parametrize("chunk", [64, 1000, 1 << 24])
def test_csv_results_do_not_depend_on_where_regions_end(tmp_path: Path, chunk: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # rows with quoted newlines cross the (small) scan chunks: they are carried, not split
    rows = ["a,b"] + [f'{i},"line {i}\nmore {i}"' if i % 3 else f"{i},x" for i in range(300)]
    rows[150] = '149,"never closed'  # i=149 would have had two lines
    path = write_lines(tmp_path / "m.csv", rows)
    monkeypatch.setattr("etl.sources.lines._CHUNK_BYTES", chunk)
    good, bad, positions, lines = summary(read(path, "csv"))
    assert bad == [(2 + 149 + 99, "unterminated_quote")]  # 99 two-line rows before it
    expected, line = [], 2
    for i in range(300):
        if i != 149:
            expected.append(line)
        line += 2 if i % 3 and i != 149 else 1
    assert lines == expected
    # positions: 0-based line index of the row's first line after the header (split-invariant)
    assert good == 299 and positions == [x - 2 for x in lines]


@pytest.mark.parametrize("fast", [False, True])
def test_csv_oversized_field_is_one_record(tmp_path: Path, fast: bool) -> None:
    rows = csv_rows(100)
    rows[51] = f'50,"{"x" * (3 * MiB)}",50.5'  # line 52, over the 1 MiB limit
    path = write_lines(tmp_path / "big.csv", rows)
    blocks = read(path, "csv", NUMBERS if fast else None, limit=1 * MiB)
    good, bad, positions, lines = summary(blocks)
    assert (good, bad) == (99, [(52, "oversized_record")])
    assert positions == [i for i in range(100) if i != 50] and lines == [p + 2 for p in positions]
    assert blocks[0].columns["name"].to_pylist()[:2] == ["name 0", "name 1"]


def test_csv_quote_open_beyond_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an unterminated quote with no quote after it: carried region by region until it passes
    # max_record_bytes, then rejected at its line, and every line after it parsed again
    rows = ["a,b"] + [f"{i},{'y' * 50}" for i in range(5000)]
    rows[11] = '10,"open'
    path = write_lines(tmp_path / "open.csv", rows)
    monkeypatch.setattr("etl.sources.lines._CHUNK_BYTES", 20_000)
    good, bad, positions, _ = summary(read(path, "csv", NUMBERS, limit=100_000))
    assert bad == [(12, "unterminated_quote")] and good == 4999
    assert positions == [i for i in range(5000) if i != 10]


# ---- JSON Lines --------------------------------------------------------------------------------
def test_jsonl_scalar_for_list_rejects_only_that_line(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "tokens": [f"t{i}", "u"]}) for i in range(1000)]
    lines[700] = json.dumps({"id": 700, "tokens": "oops"})  # line 701
    path = write_lines(tmp_path / "s.jsonl", lines)
    blocks = read(path, "jsonl", TOKENS)
    good, bad, positions, block_lines = summary(blocks)
    assert (good, bad) == (1000, [])  # JSON is valid: the schema decides, in the encoder
    encoder = Encoder(TOKENS)
    rejected, written = [], 0
    for block in blocks:
        out = encoder.encode(block.columns, str(path), block.positions, lines=block.lines)
        rejected += out.bad
        written += len(out.rows)
    assert written == 999
    assert [(r.line, r.feature, r.code) for r in rejected] == [(701, "tokens", "wrong_type")]


def test_jsonl_invalid_line(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "tokens": ["a"]}) for i in range(1000)]
    lines[41] = '{"id": 41, "tokens": ["a"'  # line 42
    path = write_lines(tmp_path / "i.jsonl", lines)
    blocks = read(path, "jsonl", TOKENS)
    good, bad, positions, block_lines = summary(blocks)
    assert (good, bad) == (999, [(42, "invalid_json")])
    assert positions == [i for i in range(1000) if i != 41]
    assert block_lines == [p + 1 for p in positions]


def test_jsonl_oversized_line(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "tokens": ["a"]}) for i in range(10)]
    lines[3] = json.dumps({"id": 3, "tokens": ["z" * (2 * MiB)]})
    path = write_lines(tmp_path / "o.jsonl", lines)
    good, bad, positions, block_lines = summary(read(path, "jsonl", TOKENS, limit=MiB))
    assert (good, bad) == (9, [(4, "oversized_record")])
    assert positions == [0, 1, 2, 4, 5, 6, 7, 8, 9] and block_lines == [p + 1 for p in positions]


# ---- text --------------------------------------------------------------------------------------
def test_text_bad_utf8_and_oversized(tmp_path: Path) -> None:
    data = b"".join(b"line %d\n" % i for i in range(1000)).split(b"\n")
    data[99] = b"bad \xff\xfe byte"  # line 100
    data[199] = b"w " * MiB  # line 200: 2 MiB
    path = tmp_path / "t.txt"
    path.write_bytes(b"\n".join(data))
    good, bad, positions, lines = summary(read(path, "text", TOKENS, limit=MiB))
    assert bad == [(100, "not_utf8"), (200, "oversized_record")]
    assert good == 998 and positions == [i for i in range(1000) if i not in (99, 199)]
    assert lines == [p + 1 for p in positions]


@pytest.mark.parametrize("fmt, body", [
    ("text", b"".join(b"word %d\n" % i for i in range(200_000))),
    ("jsonl", b"".join(b'{"id": %d}\n' % i for i in range(200_000))),
])
def test_truncated_gzip_fails_naming_file_and_line(tmp_path: Path, fmt: str, body: bytes) -> None:
    packed = gzip.compress(body, mtime=0)
    path = tmp_path / f"cut.{fmt}.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(BadInputError, match=rf"{path.name}: the compressed stream breaks off near "
                                            rf"line \d+ \(uncompressed byte \d+\)"):
        read(path, fmt)


# ---- one huge record, for real: bounded memory -------------------------------------------------
HUGE = textwrap.dedent("""
    import resource, sys
    from etl.contract.schema import schema_from_dict
    from etl.sources import make_reader
    fmt, path = sys.argv[1], sys.argv[2]
    schema = schema_from_dict({"name": "t", "kind": "example", "features": {
        "id": {"dtype": "int64", "shape": []}}})
    reader = make_reader({"format": fmt, "paths": [path]}, "/", "t")
    reader.prepare(schema, 64 << 20)
    good, bad = 0, []
    for block in reader.read(path):
        good += block.num_rows
        bad += [(b.line, b.code) for b in block.bad]
    print(good, bad, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
""")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_300mb_record_is_rejected_with_bounded_memory(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"huge.{fmt}"
    with open(path, "wb") as fh:
        fh.write(b"id,name\n" if fmt == "csv" else b"")
        for i in range(1000):
            if i == 500:  # line 502 (csv) / 501 (jsonl): a 300 MB field
                fh.write(b'500,"' if fmt == "csv" else b'{"id": 500, "name": "')
                for _ in range(300):
                    fh.write(b"x" * MiB)
                fh.write(b'"\n' if fmt == "csv" else b'"}\n')
            else:
                fh.write(b"%d,n%d\n" % (i, i) if fmt == "csv" else b'{"id": %d, "name": "n"}\n' % i)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", HUGE, fmt, str(path)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = 502 if fmt == "csv" else 501
    assert out.stdout.startswith(f"999 [({line}, 'oversized_record')] ")
    peak_mib = int(out.stdout.split()[-1])
    assert peak_mib < 1536, f"peak RSS {peak_mib} MiB"


# ---- through the pipeline: read = written + rejected -------------------------------------------
@pytest.mark.slow
def test_pipeline_counts_every_bad_csv_row(tmp_path: Path) -> None:
    import yaml  # noqa: PLC0415

    rows = csv_rows()
    rows[301] = '300,"name 300,300.5'  # line 302: unterminated quote
    rows[601] = "600,x"  # line 602: too few fields
    rows[801] = "oops,y,1.5"  # line 802: not a number
    write_lines(tmp_path / "in.csv", rows)
    schema = tmp_path / "schema.yaml"
    schema.write_text(yaml.safe_dump({"name": "t", "kind": "example", "features": {
        "id": {"dtype": "int64", "shape": []}, "name": {"dtype": "string", "shape": []},
        "score": {"dtype": "float32", "shape": []}}}))
    doc = {"schema": str(schema), "output": str(tmp_path / "out"), "shards": 2,
           "shuffle": {"seed": 1}, "max_bad_fraction": 0.5,
           "sources": {"train": {"format": "csv", "paths": ["in.csv"]}}}
    out = run_job(job_from_dict(doc, path="job.yaml", base_dir=str(tmp_path)),
                  ["--runner=FnApiRunner"]).output
    with open(os.path.join(out, "manifest.json")) as fh:
        manifest = json.load(fh)
    assert manifest["splits"]["train"]["num_records"] == 997
    assert manifest["rejected"]["num_records"] == 3
    assert manifest["rejected"]["by_reason"] == {"unterminated_quote": 1, "wrong_field_count": 1,
                                                 "unparsable_number": 1}
    (inputs,) = manifest["inputs"]
    assert (inputs["read"], inputs["written"], inputs["rejected"]) == (1000, 997, 3)
    with open(os.path.join(out, "rejected", "rejected.jsonl")) as fh:
        dead = sorted((d["line"], d["code"]) for d in map(json.loads, fh))
    assert dead == [(302, "unterminated_quote"), (602, "wrong_field_count"),
                    (802, "unparsable_number")]
