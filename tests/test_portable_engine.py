"""The engine shuffle on a real multi-process engine: Beam's PortableRunner sending work to a
worker pool, how a cluster runs Python workers (and how the README rehearses a Dataflow job
on one machine).

The pool (`python -m apache_beam.runners.worker.worker_pool_main`, started here as its own
process) starts every SDK worker as a subprocess of its own; every element crosses gRPC and
the declared coders between the job service (in the launcher) and the workers. The shards
must equal the local runner's `via: files` shards, byte for byte.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from benchmarks.worker_pool import portable_flags
from benchmarks.worker_pool import worker_pool as start_pool
from tests.helpers import cli
from tests.pipelines import write_yaml

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory):
    """A worker pool on 127.0.0.1 (its workers run the venv's `python`); the whole process
    group is killed afterwards, whatever happened."""
    log = tmp_path_factory.mktemp("pool") / "pool.log"
    with start_pool(sys.executable, ROOT, dict(os.environ), log) as port:
        yield port, log


def _shards(out: Path) -> dict[str, str]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {s["path"]: s["sha256"] for split in manifest["splits"].values()
            for s in split["shards"]}


def _both(folder: Path, job: dict, port: int) -> dict[str, str]:
    """The job on the worker pool with `via: engine`, and on the local runner with `via:
    files`: returns the shards after checking they are the same bytes."""
    got = {}
    for via, args in (("files", []), ("engine", portable_flags(port))):
        path = write_yaml(str(folder / f"{via}.yaml"),
                          {**job, "output": f"out-{via}",
                           "shuffle": {**job["shuffle"], "via": via}})
        proc = cli("run", path, "--progress", "none", *args, cwd=str(folder), timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
        got[via] = _shards(folder / f"out-{via}")
    assert got["engine"] == got["files"] and got["files"]
    return got["files"]


def test_csv_with_split_reads_on_a_worker_pool_equals_local_files(tmp_path, worker_pool) -> None:
    port, log = worker_pool
    with open(tmp_path / "data.csv", "w", newline="") as fh:
        fh.write("n,x,s\n")
        fh.writelines(f'{i},{i * 0.5},"a ""quoted"",\nfield {i}"\n' if i % 7 == 0
                      else f"{i},{i * 0.5},w{i}\n" for i in range(60_000))
    write_yaml(str(tmp_path / "schema.yaml"), {"name": "s", "kind": "example", "features": {
        "n": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
        "s": {"dtype": "string", "shape": []}}})
    job = {"schema": "schema.yaml", "source": {"format": "csv", "paths": ["data.csv"],
                                                "block_rows": 5000},
           "split": {"train": 0.8, "test": 0.2}, "shards": 3, "split_bytes": "300KiB",
           "shuffle": {"seed": 11}}
    shards = _both(tmp_path, job, port)
    assert len(shards) == 6
    manifest = json.loads((tmp_path / "out-engine" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["num_records"] + manifest["splits"]["test"][
        "num_records"] == 60_000
    assert manifest["inputs"][0]["read"] == manifest["inputs"][0]["written"] == 60_000
    # the SDK workers ran as processes of the pool, not in the launcher
    assert "Starting worker with command" in log.read_text()


def test_sequence_examples_on_a_worker_pool_equal_local_files(tmp_path, worker_pool) -> None:
    port, _ = worker_pool
    with open(tmp_path / "s.jsonl", "w") as fh:
        fh.writelines(json.dumps({"id": i, "length": i % 6, "tokens": list(range(i, i + i % 6))})
                      + "\n" for i in range(3000))
    job = {"schema": str(ROOT / "schemas" / "sentences.yaml"),
           "source": {"format": "jsonl", "paths": ["s.jsonl"], "block_rows": 700},
           "split": {"train": 0.9, "validation": 0.1}, "shards": 2,
           "shuffle": {"seed": 1}, "compression": "gzip"}
    assert len(_both(tmp_path, job, port)) == 4


def test_a_pool_on_another_host_still_needs_inputs_in_a_bucket(tmp_path) -> None:
    (tmp_path / "a.csv").write_text("id\n1\n")
    write_yaml(str(tmp_path / "s.yaml"), {"name": "s", "kind": "example",
                                          "features": {"id": {"dtype": "int64", "shape": []}}})
    job = write_yaml(str(tmp_path / "job.yaml"), {
        "schema": "s.yaml", "source": {"format": "csv", "paths": ["a.csv"]}, "output": "out"})
    proc = cli("run", job, "--runner=PortableRunner", "--job_endpoint=embed",
               "--environment_type=EXTERNAL", "--environment_config=10.20.30.40:50000",
               cwd=str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "runs on other machines, which cannot read 1 local input file(s)" in proc.stderr
    assert not (tmp_path / "out").exists()
