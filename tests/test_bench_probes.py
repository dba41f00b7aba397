"""The small benchmark probes of issue 29 run and report what they measured (the figures
themselves are in benchmarks/README.md; nothing here is timed)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from benchmarks import disk_write, fresh_memory, machine_speed, stage_bench
from benchmarks.data import CSV_HEADER, csv_chunk


def test_machine_speed_reports_each_figure(capsys: pytest.CaptureFixture[str]) -> None:
    assert machine_speed.main(["--rows", "2000", "--mib", "1"]) == 0
    line = capsys.readouterr().out
    figures = re.fullmatch(
        r"machine speed: Python loop (\S+) ns/iteration, CSV parse (\S+)M rows/s on one thread "
        r"and (\S+)M on two, a crc32c call (\S+) ns, crc32c (\S+) GB/s, sha256 (\S+) GB/s, "
        r"copy (\S+) GB/s\n", line)
    assert figures, line
    assert all(float(f) > 0 for f in figures.groups())


def test_machine_speed_times_crc_calls_on_whole_records(monkeypatch) -> None:
    seen: list[int] = []
    monkeypatch.setattr(machine_speed.tfrecord, "crc32c", lambda data: seen.append(len(data)))
    machine_speed.measure(rows=100, mib=1)
    calls = [n for n in seen if n != 1 << 20]  # the 1 MiB buffer's own checksum aside
    assert len(calls) == machine_speed.CALLS * machine_speed.TRIES
    assert set(calls) == {machine_speed.RECORD}


def test_machine_speed_parses_the_whole_reference_csv() -> None:
    text = (CSV_HEADER + "\n" + csv_chunk(0, 1234)).encode("ascii")
    assert machine_speed.parse_rows(text) == 1234
    assert machine_speed.parse_rows(text[: text.rindex(b"\n", 0, -1) + 1]) == 1233


def test_fresh_memory_reports_each_kind_of_page(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert fresh_memory.main(["--mib", "8", "--idle", "0", "--dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "first write of 8 MiB, GB/s (0 s idle before the second column)"
    assert [line.split("just freed")[0].strip() for line in lines[1:]] == list(
        fresh_memory.KINDS.values())
    for line in lines[1:]:
        warm, cold = map(float, re.findall(r"(\d+\.\d+)", line))
        assert warm > 0 and cold > 0
    assert list(tmp_path.iterdir()) == []  # its file is gone


def test_stage_bench_reads_every_idx_image(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert stage_bench.main(["read-idx", "--images", "3000", "--busy",
                             "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^read-idx \(with a busy thread\): 3000 images \d+\.\d\d s wall", out, re.M)


def test_stage_bench_merges_every_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert stage_bench.main(["merge", "--runs", "5", "--records", "3000",
                             "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"merge \(8 shards of 5 spills\): 15000 records in 8 rounds, "
                        r"\d+\.\d\d CPU-s\n", out), out


def test_disk_write_reports_each_writer_count(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert disk_write.main(["--mib", "16", "--dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "O_DIRECT writes of 4 MiB buffers, 16 MiB per line, fsynced"
    assert [line.split(":")[0] for line in lines[1:]] == ["1 writer(s)", "2 writer(s)",
                                                         "4 writer(s)"]
    assert all(float(re.search(r"(\d+\.\d\d) GB/s$", line)[1]) > 0 for line in lines[1:])
    assert os.listdir(tmp_path) == []  # its files and folder removed
