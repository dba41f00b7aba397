"""What a command loads before it does its work (issue 29, goal 3: the fixed cost of a run).

Each command runs as a user runs it, in a fresh interpreter, and the modules it loaded are read
from `sys.modules` at exit. The figures (seconds) are in benchmarks/README.md, "Fixed cost of
a run: where it goes"; these tests keep what made them smaller, without timing anything:
`--help` and `history` load no NumPy, pyarrow, YAML or Beam; `import etl` loads none of its
public names until one is used; `run --dry-run` loads no Beam and no report code; a run loads
no TensorFlow and no MongoDB client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import launch
from tests.helpers import IDS_SCHEMA, ROOT, RUN

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

# run_pipeline.py as __main__ (signals, exit code and all), then sys.modules written at exit
_LOADED = ("import atexit, json, runpy, sys\n"
           "out = sys.argv[1]\n"
           "sys.argv = sys.argv[2:]\n"
           "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
           "runpy.run_path(sys.argv[0], run_name='__main__')\n")
HEAVY = {"numpy", "pyarrow", "pyarrow.compute", "pandas", "yaml", "apache_beam", "tensorflow",
         "tfx_bsl", "torch", "etl.contract.schema", "etl.tools.report"}


def loaded(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`run_pipeline.py ARGS` in a fresh interpreter: its result and the modules it loaded."""
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", _LOADED, str(out), RUN, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    return proc, set(json.loads(out.read_text()))


def write_job(folder: Path, rows: int = 20) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    (folder / "ids.csv").write_text("id,a,b\n" + "".join(f"{i},{i}.5,{-i}\n" for i in range(rows)))
    job = folder / "job.yaml"
    job.write_text("schema: schema.yaml\nsources:\n  train: {format: csv, paths: [ids.csv]}\n"
                   f"output: {folder / 'out'}\nshards: 2\n")
    return job


def test_help_loads_no_numpy_pyarrow_yaml_or_beam(tmp_path: Path) -> None:
    proc, modules = loaded(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "run_pipeline.py" in proc.stdout
    assert modules & HEAVY == set()


def test_history_loads_no_numpy_pyarrow_yaml_or_beam(tmp_path: Path) -> None:
    proc, modules = loaded(tmp_path, "history", str(tmp_path))
    assert (proc.returncode, proc.stdout) == (0, f"no runs recorded in {tmp_path}\n"), proc.stderr
    assert modules & HEAVY == set()


def test_a_dry_run_loads_no_beam_no_report_and_no_tensorflow(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    proc, modules = loaded(tmp_path, "run", str(job), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    # no pandas either: pyarrow loads it for a pa.scalar, which nothing makes at import
    assert modules & HEAVY == {"numpy", "pyarrow", "pyarrow.compute", "yaml",
                               "etl.contract.schema"}


def test_a_small_run_loads_beam_but_no_tensorflow(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    proc, modules = loaded(tmp_path, "run", str(job), "--progress", "none",
                           "--runner=FnApiRunner")
    assert proc.returncode == 0, proc.stderr
    assert "20 records" in proc.stdout
    # nor pandas: a run of file sources in the CLI's own process (cli.lean_imports.without_pandas)
    assert modules & HEAVY == HEAVY - {"tensorflow", "tfx_bsl", "torch", "pandas"}
    assert modules & {"pymongo", "bson"} == set()  # Beam without its MongoDB client (cli.lean_imports)
    # nor, on a local runner, Google's BigQuery, Pub/Sub and Dataflow API clients
    assert {m for m in modules if m.startswith(("google.cloud.bigquery", "google.cloud.pubsub",
                                                "google.pubsub", "google.cloud.dataflow"))} == set()
    # nor Beam's own cloud IO, in the CLI's process with no store named (cli.lean_imports)
    assert modules & {"apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.pubsub",
                      "apache_beam.io.gcp.gcsio", "apache_beam.io.gcp.gcsfilesystem",
                      "apitools", "google.cloud.storage"} == set()
    assert "apache_beam.io.filesystems" in modules  # every other Beam module it imports
    assert proc.stderr == ""


def test_import_etl_loads_a_public_name_only_when_it_is_used() -> None:
    code = ("import sys, etl\n"
            "print(sorted(m for m in ('numpy', 'pyarrow', 'yaml', 'etl.contract.schema') "
            "if m in sys.modules))\n"
            "from etl import load_schema\n"
            "from etl.contract.schema import Schema\n"
            "print(etl.Schema is Schema, load_schema.__module__, 'Schema' in dir(etl))\n"
            "try:\n"
            "    etl.nothing\n"
            "except AttributeError as e:\n"
            "    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "True etl.contract.schema True",
                                        "module 'etl' has no attribute 'nothing'"]


# run_pipeline.py as __main__, with gc.isenabled() written when `apache_beam` is first looked up
_GC_AT_BEAM = ("import gc, importlib.abc, runpy, sys\n"
               "out = sys.argv[1]\n"
               "sys.argv = sys.argv[2:]\n"
               "class Seen(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name == 'apache_beam':\n"
               "            open(out, 'w').write(str(gc.isenabled()))\n"
               "            sys.meta_path.remove(self)\n"
               "        return None\n"
               "sys.meta_path.insert(0, Seen())\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def _seen_by_a_run(tmp_path: Path, wrapper: str, env: dict[str, str] | None = None) -> str:
    """What `wrapper` (run_pipeline.py run as __main__ under it) wrote to its file during a
    20-record run of the CLI."""
    job = write_job(tmp_path / "job")
    out = tmp_path / "seen.txt"
    proc = subprocess.run([sys.executable, "-c", wrapper, str(out), RUN, "run", str(job),
                           "--progress", "none", "--runner=FnApiRunner"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "20 records" in proc.stdout
    return out.read_text()


def test_beam_is_imported_with_the_gc_off(tmp_path: Path) -> None:
    """The GC rescans Beam's objects while it imports (0.1-0.2 s of a run: benchmarks/README.md,
    "Fixed cost of a run"); one span's run imports Beam only once it knows it converts."""
    assert _seen_by_a_run(tmp_path, _GC_AT_BEAM) == "False"


def _at_exit(seen: str) -> str:
    """A wrapper that runs run_pipeline.py as __main__ and writes `seen` (an expression) to
    its file at exit."""
    return ("import atexit, runpy, sys\n"
            "out = sys.argv[1]\n"
            "sys.argv = sys.argv[2:]\n"
            f"atexit.register(lambda: open(out, 'w').write(str({seen})))\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")


# OpenBLAS's thread count (threadpoolctl)
_BLAS_THREADS = _at_exit("[p['num_threads'] for p in __import__('threadpoolctl')"
                         ".threadpool_info() if p['internal_api'] == 'openblas']")


_THP_AT_EXIT = _at_exit("open('/proc/self/status').read().split('THP_enabled:')[1].split()[0]")
REPORTING = "0110010100000000"  # bits 1, 2, 5 (free page reporting) and 7: this VM's balloon
NOT_REPORTING = "0110000100000000"


def _virtio_devices(root: Path, devices: dict[str, tuple[str, str]]) -> str:
    """A stand-in for /sys/bus/virtio/devices: each device's id and feature bits."""
    root.mkdir()
    for name, (device, features) in devices.items():
        (root / name).mkdir()
        (root / name / "device").write_text(device + "\n")
        (root / name / "features").write_text(features + "\n")
    return str(root)


@pytest.mark.parametrize(("devices", "takes"), [
    ({"virtio0": ("0x0005", REPORTING), "virtio2": ("0x0001", NOT_REPORTING)}, True),
    ({"virtio0": ("0x0005", NOT_REPORTING)}, False),
    ({"virtio2": ("0x0002", "1" * 64)}, False),  # bit 5 of a block device: no balloon
    ({}, False)])
def test_huge_pages_go_off_only_where_the_host_takes_free_memory_back(
        tmp_path: Path, devices: dict[str, tuple[str, str]], takes: bool) -> None:
    """A balloon that reports free pages makes every new huge page one the host faults in
    again (cli.launch.no_cold_huge_pages): the process, in a fresh interpreter, has them off
    exactly then."""
    root = _virtio_devices(tmp_path / "devices", devices)
    assert launch.host_takes_free_memory(root) is takes
    code = ("import sys\nfrom cli.launch import no_cold_huge_pages\n"
            "print(no_cold_huge_pages(sys.argv[1]))\n"
            "print(open('/proc/self/status').read().split('THP_enabled:')[1].split()[0])\n")
    proc = subprocess.run([sys.executable, "-c", code, root], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(takes), "0" if takes else "1"]
    assert launch.host_takes_free_memory(str(tmp_path / "no-such-folder")) is False


def test_a_run_has_huge_pages_off_where_this_host_takes_free_memory_back(tmp_path: Path) -> None:
    want = "0" if launch.host_takes_free_memory() else "1"
    assert _seen_by_a_run(tmp_path, _THP_AT_EXIT) == want


@pytest.mark.parametrize(("env", "threads"), [({}, "[1]"), ({"OMP_NUM_THREADS": "2"}, "[2]"),
                                              ({"OPENBLAS_NUM_THREADS": "2"}, "[2]")])
def test_openblas_gets_one_thread_unless_the_user_set_a_count(
        tmp_path: Path, env: dict[str, str], threads: str) -> None:
    """OpenBLAS's threads spin ~0.1 CPU-s after NumPy's import, and nothing of ours multiplies
    matrices (cli.launch.one_blas_thread); a count the user set is theirs."""
    base = {k: v for k, v in os.environ.items() if k not in
            ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    assert _seen_by_a_run(tmp_path, _BLAS_THREADS, {**base, **env}) == threads
