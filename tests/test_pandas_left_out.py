"""A run in the CLI's own process leaves pandas out (cli.lean_imports.without_pandas, issue 29:
a quarter of Beam's import): the same shards as a process that has pandas loaded, also for a
Parquet file pandas wrote (categorical, timestamp and string columns, its index, its
metadata); a job with a Python generator keeps pandas, which the generator may use."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli.lean_imports import pandas_unused
from tests.helpers import ROOT, RUN

pytestmark = pytest.mark.slow  # subprocesses running Beam pipelines

# run_pipeline.py as __main__ (as a user runs it), pandas imported first when argv[2] is "1",
# and the modules loaded written at exit
_RUN = ("import atexit, json, runpy, sys\n"
        "out, preload = sys.argv[1], sys.argv[2] == '1'\n"
        "sys.argv = sys.argv[3:]\n"
        "if preload:\n"
        "    import pandas\n"
        "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n")

SCHEMA = textwrap.dedent("""\
    name: frame
    kind: example
    features:
      x: {dtype: float32, shape: []}
      n: {dtype: int64, shape: []}
      cat: {dtype: string, shape: []}
      t: {dtype: timestamp, unit: ms, shape: []}
      s: {dtype: string, shape: []}
    """)


def _run(tmp_path: Path, job: Path, preload: bool, *args: str,
         env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`run JOB --progress none ARGS` as a user runs it: its result and the modules it loaded."""
    out = tmp_path / f"modules-{int(preload)}.json"
    proc = subprocess.run([sys.executable, "-c", _RUN, str(out), "1" if preload else "0", RUN,
                           "run", str(job), "--progress", "none", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    return proc, set(json.loads(out.read_text())) if out.exists() else set()


def _shards(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.glob("train-*"))}


def test_a_pandas_parquet_file_gives_the_same_shards_without_pandas(tmp_path: Path) -> None:
    import pandas as pd  # noqa: PLC0415 - the test's own process: writes the input

    n = 5000
    frame = pd.DataFrame({
        "x": [i / 7 for i in range(n)],
        "n": [i * 1_000_003 - 2**40 for i in range(n)],
        "cat": pd.Categorical([("red", "green", "blue")[i % 3] for i in range(n)]),
        "t": pd.to_datetime([1_600_000_000_000 + 977 * i for i in range(n)], unit="ms", utc=True),
        "s": [f"row {i} é" for i in range(n)],
    }, index=pd.RangeIndex(10, 10 + n, name="row"))
    frame.to_parquet(tmp_path / "frame.parquet", engine="pyarrow", row_group_size=1234)
    (tmp_path / "schema.yaml").write_text(SCHEMA)
    outputs = {}
    for preload in (False, True):
        job = tmp_path / f"job{int(preload)}.yaml"
        job.write_text(f"schema: schema.yaml\nsources:\n  train: {{format: parquet, paths: "
                       f"[frame.parquet]}}\noutput: out{int(preload)}\nshards: 3\n"
                       f"shuffle: {{seed: 5}}\n")
        proc, modules = _run(tmp_path, job, preload)
        assert proc.returncode == 0, proc.stderr
        assert f"read {n:,} records" in proc.stdout and "rejected 0" in proc.stdout, proc.stdout
        assert ("pandas" in modules) is preload
        outputs[preload] = _shards(tmp_path / f"out{int(preload)}")
    assert len(outputs[False]) == 6  # 3 shards and their index files
    assert outputs[False] == outputs[True]


def test_a_python_generator_keeps_pandas(tmp_path: Path) -> None:
    (tmp_path / "gen_pd.py").write_text(textwrap.dedent("""\
        import pandas as pd

        def rows():
            s = pd.Series([0.25, 1.5, 2.75])
            for i, v in enumerate(s):
                yield {"id": i, "a": v, "b": float(s.sum())}
        """))
    (tmp_path / "schema.yaml").write_text(textwrap.dedent("""\
        name: g
        kind: example
        features:
          id: {dtype: int64, shape: []}
          a: {dtype: float32, shape: []}
          b: {dtype: float32, shape: []}
        """))
    job = tmp_path / "job.yaml"
    job.write_text("schema: schema.yaml\nsources:\n  train: {format: python, function: "
                   f"\"gen_pd:rows\"}}\noutput: {tmp_path / 'out'}\nshards: 1\n")
    proc, modules = _run(tmp_path, job, False, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "written 3, rejected 0" in proc.stdout
    assert "pandas" in modules


def test_which_runs_leave_pandas_out() -> None:
    csv, parquet, idx, python = ({"format": f} for f in ("csv", "parquet", "idx", "python"))
    assert pandas_unused([csv, parquet, idx], None)
    assert pandas_unused([csv], "FnApiRunner")
    assert not pandas_unused([csv, python], None)  # a user's generator may use it
    assert not pandas_unused([csv], "DataflowRunner")  # the workers import what they import


def test_inside_the_block_pandas_is_missing_to_python_and_to_pyarrow() -> None:
    """In a fresh process (pyarrow remembers a missing pandas for the process's life)."""
    code = textwrap.dedent("""\
        import sys
        from cli.lean_imports import without_pandas
        with without_pandas(True):
            for name in ("pandas", "pandas.core.frame"):
                try:
                    __import__(name)
                except ModuleNotFoundError as e:
                    print("missing", e.name)
            import pyarrow as pa
            print(pa.array(["a", None]).to_pylist(), "pandas" in sys.modules)
        import pandas
        print("after", pandas.__name__)
        """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["missing pandas", "missing pandas",
                                        "['a', None] False", "after pandas"]


def test_a_range_of_spans_run_here_leaves_pandas_out(tmp_path: Path) -> None:
    """`run JOB --from D1 --to D2` (spans in this process, one after the other)."""
    (tmp_path / "schema.yaml").write_text(textwrap.dedent("""\
        name: d
        kind: example
        features:
          id: {dtype: int64, shape: []}
        """))
    for day in ("2026-11-20", "2026-11-21"):
        (tmp_path / "raw" / day).mkdir(parents=True)
        (tmp_path / "raw" / day / "a.csv").write_text("id\n1\n2\n3\n")
    job = tmp_path / "job.yaml"
    job.write_text('schema: schema.yaml\nsources:\n  train: {format: csv, paths: '
                   '["raw/{date}/*.csv"]}\noutput: out/{date}\nshards: 1\n')
    proc, modules = _run(tmp_path, job, False, "--from", "2026-11-20", "--to", "2026-11-21")
    assert proc.returncode == 0, proc.stderr
    assert [(tmp_path / "out" / day / "manifest.json").exists()
            for day in ("2026-11-20", "2026-11-21")] == [True, True]
    assert "pandas" not in modules
