"""Quiet by default: the demo (what `make run` shows a newcomer) and `inspect` print our
summary and the sample record, none of TensorFlow's absl/oneDNN/CUDA start-up lines;
`--verbose` brings them back."""

from __future__ import annotations

import re

import pytest

from tests.helpers import cli

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

START_UP = re.compile(r"absl::InitializeLog|^[IWE]0000 |oneDNN custom operations|cuInit|"
                      r"cuda drivers", re.M)


def test_demo_and_inspect_show_no_tensorflow_start_up_lines(tmp_path) -> None:
    out = str(tmp_path / "demo")
    proc = cli("demo", "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert not START_UP.search(proc.stdout)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"Wrote {out} in ")
    assert lines[1:4] == ["  train             1,500 records in 4 shard(s),  169.5 KB",
                          "  test                297 records in 4 shard(s),   33.6 KB",
                          "  total             1,797 records in 8 shard(s),  203.1 KB"]
    assert lines[4].startswith("  read 1,797 records (44.7 KB of input), written 1,797, "
                               "rejected 0 in ")
    assert lines[5] == "Sample record (train):"
    assert lines[-1] == f"Read it back: etl.make_dataset({out!r}, split='train')"
    proc = cli("inspect", f"{out}/train-00000-of-00004.tfrecord", "--limit", "1")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "-- record 0 (offset 0, 97 bytes)" in proc.stdout


def test_verbose_brings_the_start_up_lines_back(tmp_path) -> None:
    out = str(tmp_path / "demo")
    proc = cli("demo", "--output", out, "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert START_UP.search(proc.stderr)  # this TensorFlow build prints them on every start
