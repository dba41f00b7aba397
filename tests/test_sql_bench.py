"""benchmarks/sql_bench.py end to end at a small size: its own PostgreSQL, the four variants in
its table, every CLI run wrote every row, `ours` and `ours_split` wrote the same shard bytes,
and nothing of its scratch is left (the figures themselves are in benchmarks/README.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)


def test_the_sql_benchmark_runs_its_four_variants_and_checks_them(tmp_path: Path) -> None:
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        pytest.skip("PostgreSQL server programs (initdb, pg_ctl) are not on PATH")
    workdir = tmp_path / "scratch"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.sql_bench", "--rows", "2000",
                           "--repeat", "1", "--workdir", str(workdir)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \|.*\| ([\d,]+) \|$", out,
                                                          re.M)}
    assert rows == {"ours": "2,000", "ours_split": "2,000", "copy_csv": "2,000",
                    "adbc_raw": "2,000"}
    assert "| - copy |" in out and "| - csv_run |" in out
    assert "identical: yes (ours and ours_split shards, sha256)" in out
    assert "records: all 2,000" in out
    assert re.search(r"^ours vs copy_csv: [\d.]+x records/s \(goal >= 1\)$", out, re.M)
    assert re.search(r"^ours vs adbc_raw: [\d.]+x records/s", out, re.M)
    assert "postgresql://etl:" not in out + proc.stderr  # no password anywhere
    assert not workdir.exists()
