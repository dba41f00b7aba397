"""One worker reading a whole CSV file as several of its splits at once (transforms/prefetch.
read_in_streams): every record, position, line and bad row comes out exactly once, as in the
whole read; blocks arrive in turn from the streams with a progress offset that only rises; an
error in one stream reaches the consumer; files that do not qualify are read as one stream;
and a run gives the same shards and dead-letter records with one stream or three."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import cli.run
import transforms.prefetch
from etl.sources import make_reader
from etl.sources.base import Split
from tests.pipelines import convert, manifest, shard_hashes
from tests.splits import flatten
from tests.test_split_pipeline import IDS
from tests.test_split_reads import WHERE, _csv_rows, _Numbers
from transforms.prefetch import read_in_streams


def _file(tmp_path: Path, rows: int) -> tuple[Path, int]:
    data = b"# a comment line\nn,s,t\n" + b"\n".join(_csv_rows(rows)) + b"\n"
    path = tmp_path / "d.csv"
    path.write_bytes(data)
    return path, len(data)


def _records(blocks: list) -> list[tuple]:
    """Every good row (position, line, values) and bad row, in file order."""
    got = flatten(blocks, as_text=True)
    rows = sorted(zip(got["positions"], got["lines"], got["n"], got["s"], got["t"], strict=True))
    return [*rows, *sorted(got["bad"], key=lambda b: b[3])]


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("streams", [2, 3])
def test_streams_give_every_record_once(tmp_path: Path, monkeypatch, fast: bool,
                                        streams: int) -> None:
    monkeypatch.setattr(transforms.prefetch, "MIN_STREAM_BYTES", 0)
    path, size = _file(tmp_path, 4000)
    reader = make_reader({"format": "csv", "paths": str(path), "skip_rows": 1, "block_rows": 64},
                         str(tmp_path), WHERE)
    if fast:
        reader.prepare(_Numbers({"n": "int64"}), 64 << 20)
    whole = list(reader.read_split(Split(str(path))))
    parts = reader.splits(str(path), -(-size // streams))
    assert len(parts) == streams
    blocks = list(read_in_streams(reader, Split(str(path), size=size), streams))
    assert _records(blocks) == _records(whole)
    assert sum(b.num_read for b in blocks) == sum(b.num_read for b in whole) == 3887
    # in turn: the second block comes from the second stream, past the first cut
    assert int(blocks[1].lines[0]) > int(blocks[0].lines[-1]) + 100
    ends = [b.end_offset for b in blocks]
    assert all(e is not None for e in ends) and ends == sorted(ends) and ends[-1] <= size


def test_what_is_read_as_one_stream(tmp_path: Path, monkeypatch) -> None:
    path, size = _file(tmp_path, 400)
    reader = make_reader({"format": "csv", "paths": str(path), "skip_rows": 1}, str(tmp_path),
                         WHERE)
    whole = _records(list(reader.read_split(Split(str(path)))))
    lines = tmp_path / "d.jsonl"
    lines.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(100)))
    jsonl = make_reader({"format": "jsonl", "paths": str(lines)}, str(tmp_path), WHERE)
    cases = [(reader, Split(str(path), size=size), 1),  # one stream asked
             (reader, Split(str(path), size=size), 2),  # under MIN_STREAM_BYTES a stream
             (reader, reader.splits(str(path), size // 2)[1], 2),  # a split already cut
             (jsonl, Split(str(lines)), 2)]  # a format that does not read in streams
    for source, split, streams in cases:
        assert read_in_streams(source, split, streams).__qualname__.endswith("read_split")
    monkeypatch.setattr(transforms.prefetch, "MIN_STREAM_BYTES", 0)
    assert _records(list(read_in_streams(reader, Split(str(path), size=size), 2))) == whole


def test_an_error_in_one_stream_reaches_the_consumer(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(transforms.prefetch, "MIN_STREAM_BYTES", 0)
    path, size = _file(tmp_path, 2000)
    reader = make_reader({"format": "csv", "paths": str(path), "skip_rows": 1, "block_rows": 64},
                         str(tmp_path), WHERE)
    read_split = reader.read_split

    def failing(split: Split):
        for k, block in enumerate(read_split(split)):
            if split.index == 1 and k == 2:
                raise OSError(f"disk gone at {split.start}")
            yield block

    monkeypatch.setattr(reader, "read_split", failing)
    with pytest.raises(OSError, match="disk gone at"):
        list(read_in_streams(reader, Split(str(path), size=size), 2))


def _run(d: Path, monkeypatch, streams: int) -> tuple[dict[str, str], list[dict], int]:
    monkeypatch.setattr(cli.run, "read_streams", lambda options: streams)
    d.mkdir(parents=True)
    lines = ["id,name"]
    for i in range(6000):
        lines.append(f'{i},"two\nlines, ""{i}"""' if i % 97 == 5 else
                     f'{i},"never closed' if i == 4500 else "" if i % 500 == 7 else f"{i},n{i}")
    (d / "in.csv").write_text("\n".join(lines) + "\n")
    out = convert(d, {"train": {"format": "csv", "paths": ["in.csv"], "block_rows": 300}},
                  schema=IDS, via="files", max_bad_fraction=0.01, shards=3)
    dead = Path(out) / "rejected" / "rejected.jsonl"
    bad = [json.loads(x) for x in dead.read_text().splitlines()]
    for b in bad:
        b["source"] = os.path.basename(b["source"])
    return shard_hashes(out), bad, manifest(out)["inputs"][0]["read"]


def test_a_run_writes_the_same_shards_with_one_stream_or_three(tmp_path: Path,
                                                               monkeypatch) -> None:
    monkeypatch.setattr(transforms.prefetch, "MIN_STREAM_BYTES", 0)
    calls = []
    real = transforms.prefetch._in_turn
    monkeypatch.setattr(transforms.prefetch, "_in_turn",
                        lambda *a: calls.append(len(a[1])) or real(*a))
    one = _run(tmp_path / "one", monkeypatch, 1)
    assert calls == []
    three = _run(tmp_path / "three", monkeypatch, 3)
    assert calls == [3]  # the file really was read in three streams
    assert three == one and len(one[0]) == 3
    assert [b["line"] for b in one[1]] == [4549] and one[2] == 6000 - 12, one[2]
