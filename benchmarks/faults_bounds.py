"""Issue 28's bounded-work and hostile-config cases (points 6 and 7), for the fault table.

Each case builds its inputs in the temp dir it is given, drives the CLI of `Runner.code` in a
subprocess (so the old checkout can be measured too: there it may hang, crash or time out,
which is its "before"), and returns the facts that differ before/after: exit code, first
stderr line, wall seconds, peak RSS, whether a sentinel was made or a directory created.

    python -m benchmarks.fault_cases --group faults_bounds [--code /path/to/old]
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.fault_cases import Runner, _outcome

ID_SCHEMA = "name: t\nkind: example\nfeatures:\n  id: {dtype: int64, shape: []}\n"


def _job(d: Path, source: dict[str, Any], output: str = "out", **extra: Any) -> Path:
    (d / "schema.yaml").write_text(ID_SCHEMA)
    path = d / "job.yaml"
    path.write_text(json.dumps({"schema": "schema.yaml", "sources": {"train": source},
                                "output": output, "shards": 2, **extra}))
    return path


def _cli(r: Runner, cwd: Path, args: list[str], timeout: float = 300,
         env: dict[str, str] | None = None) -> dict[str, Any]:
    """`run_pipeline.py ARGS` of the runner's checkout: the outcome plus wall seconds and the
    process's peak RSS (MiB, from wait4's rusage); killed after `timeout` s ("timed out")."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([r.python, str(r.code / "run_pipeline.py"), *args], cwd=cwd,
                                stdout=subprocess.DEVNULL, stderr=err, text=True,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})})
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout and not timed_out:
                proc.kill()
                timed_out = True
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        res = _outcome(proc.returncode, err.read(), cwd / "out")
    res["seconds"] = round(time.monotonic() - t0, 1)
    res["peak_rss_mib"] = usage.ru_maxrss // 1024
    if timed_out:
        res["timed_out"] = f"after {timeout:.0f} s"
    return res


def estimate_100k_files(r: Runner, d: Path) -> dict[str, Any]:
    """`--estimate` over a glob of 100k one-row CSV files (was 489 s: quadratic)."""
    (d / "data").mkdir()
    for i in range(100_000):
        fd = os.open(d / "data" / f"f{i:06d}.csv", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"id\n1\n")
        os.close(fd)
    job = _job(d, {"format": "csv", "paths": ["data/*.csv"]})
    return _cli(r, d, ["run", str(job), "--estimate", "--runner=FnApiRunner"], timeout=120)


def schema_100k_features(r: Runner, d: Path) -> dict[str, Any]:
    """`load_schema` of a 100k-feature schema (was quadratic: 40k features 46 s)."""
    (d / "schema.yaml").write_text("name: t\nkind: example\nfeatures:\n" + "".join(
        f"  f{i}: {{dtype: int64, shape: []}}\n" for i in range(100_000)))
    t0 = time.monotonic()
    try:
        proc = subprocess.run([r.python, "-c", "import sys; from etl.contract.schema import "
                               "load_schema; print(len(load_schema(sys.argv[1]).features))",
                               str(d / "schema.yaml")], cwd=r.code, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(r.code)})
        res = _outcome(proc.returncode, proc.stderr, d / "out")
        res["features"] = proc.stdout.strip()
    except subprocess.TimeoutExpired:
        res = {"exit": None, "timed_out": "after 120 s"}
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def _sparse(d: Path, name: str, size: int = 1 << 30) -> None:
    with open(d / name, "wb") as fh:
        fh.truncate(size)  # NULs, no disk used


def csv_1gb_first_line_estimate(r: Runner, d: Path) -> dict[str, Any]:
    """`--estimate` of a CSV that is one 1 GB line of NULs (was 1.8-16 GB, unexpected
    ArrowInvalid)."""
    _sparse(d, "nul.csv")
    job = _job(d, {"format": "csv", "paths": ["nul.csv"]})
    return _cli(r, d, ["run", str(job), "--estimate", "--runner=FnApiRunner"], timeout=300)


def csv_1gb_first_line_run(r: Runner, d: Path) -> dict[str, Any]:
    """`run` of the same file."""
    _sparse(d, "nul.csv")
    job = _job(d, {"format": "csv", "paths": ["nul.csv"]})
    return _cli(r, d, ["run", str(job), "--runner=FnApiRunner"], timeout=300)


def estimate_python_source(r: Runner, d: Path) -> dict[str, Any]:
    """`--estimate` of a `format: python` source: did the user's function run?"""
    (d / "usergen.py").write_text("import pathlib\n\ndef gen():\n    pathlib.Path('CALLED')"
                                  ".write_text('ran')\n    yield {'id': 1}\n")
    job = _job(d, {"format": "python", "function": "usergen:gen"})
    res = _cli(r, d, ["run", str(job), "--estimate", "--runner=FnApiRunner"], timeout=120,
               env={"PYTHONPATH": f"{r.code}{os.pathsep}{d}"})
    res["function_ran"] = (d / "CALLED").exists()
    return res


def fifo_input_estimate(r: Runner, d: Path) -> dict[str, Any]:
    """`--estimate` of a job whose input is a FIFO nobody writes (hung for good)."""
    os.mkfifo(d / "in.csv")
    job = _job(d, {"format": "csv", "paths": ["in.csv"]})
    return _cli(r, d, ["run", str(job), "--estimate", "--runner=FnApiRunner"], timeout=60)


def directory_named_csv(r: Runner, d: Path) -> dict[str, Any]:
    """An input `x.csv` that is a directory (unexpected IsADirectoryError)."""
    (d / "x.csv").mkdir()
    job = _job(d, {"format": "csv", "paths": ["x.csv"]})
    return _cli(r, d, ["run", str(job), "--runner=FnApiRunner"], timeout=120)


def yaml_python_object_tag(r: Runner, d: Path) -> dict[str, Any]:
    """A job file with `!!python/object/apply:os.system`: refused, nothing run."""
    (d / "in.csv").write_text("id\n1\n")
    (d / "schema.yaml").write_text(ID_SCHEMA)
    (d / "job.yaml").write_text("schema: schema.yaml\nsources: {train: {format: csv, paths: "
                                "[in.csv]}}\noutput: !!python/object/apply:os.system "
                                "['touch PWNED']\n")
    res = _cli(r, d, ["run", "job.yaml", "--runner=FnApiRunner"], timeout=120)
    res["pwned"] = (d / "PWNED").exists()
    return res


def _output_estimate(r: Runner, d: Path, output: str) -> dict[str, Any]:
    (d / "in.csv").write_text("id\n1\n")
    job = _job(d, {"format": "csv", "paths": ["in.csv"]}, output=output)
    res = _cli(r, d, ["run", str(job), "--estimate", "--runner=FnApiRunner"], timeout=120)
    res["made"] = sorted(p.name for p in d.iterdir() if p.name not in ("in.csv", "job.yaml",
                                                                       "schema.yaml"))
    return res


def output_root_estimate(r: Runner, d: Path) -> dict[str, Any]:
    """`output: /` under --estimate (accepted without a word before)."""
    return _output_estimate(r, d, "/")


def output_tilde_run(r: Runner, d: Path) -> dict[str, Any]:
    """`output: ~/x`: made a folder named `~` in the job's folder."""
    (d / "in.csv").write_text("id\n1\n")
    job = _job(d, {"format": "csv", "paths": ["in.csv"]}, output="~/x")
    res = _cli(r, d, ["run", str(job), "--runner=FnApiRunner"], timeout=120)
    res["made_tilde_dir"] = (d / "~").exists()
    return res


def output_checkout_estimate(r: Runner, d: Path) -> dict[str, Any]:
    """`output:` the checkout of the program, under --estimate."""
    return _output_estimate(r, d, str(r.code))


def output_newline_run(r: Runner, d: Path) -> dict[str, Any]:
    """`output: "a\\nb"`: a directory whose name holds a line break."""
    (d / "in.csv").write_text("id\n1\n")
    job = _job(d, {"format": "csv", "paths": ["in.csv"]}, output="a\nb")
    res = _cli(r, d, ["run", str(job), "--runner=FnApiRunner"], timeout=120)
    res["made_newline_dir"] = (d / "a\nb").exists()
    return res


def input_name_newline(r: Runner, d: Path) -> dict[str, Any]:
    """A 70 MB NUL input named `new\\nline.csv`: its error message was cut at the line break."""
    (d / "data").mkdir()
    (d / "data" / "a.csv").write_text("id\n1\n")
    _sparse(d / "data", "new\nline.csv", 70 << 20)
    job = _job(d, {"format": "csv", "paths": ["data/*.csv"]})
    return _cli(r, d, ["run", str(job), "--runner=FnApiRunner"], timeout=120)


CASES: dict[str, Callable[[Runner, Path], dict[str, Any]]] = {
    f.__name__: f for f in (estimate_100k_files, schema_100k_features,
                            csv_1gb_first_line_estimate, csv_1gb_first_line_run,
                            estimate_python_source, fifo_input_estimate, directory_named_csv,
                            yaml_python_object_tag, output_root_estimate, output_tilde_run,
                            output_checkout_estimate, output_newline_run, input_name_newline)
}
