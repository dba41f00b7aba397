"""`run JOB --estimate`: the launch estimate against what the run then really does, on this
machine; and that it launches and writes nothing, also for Dataflow with local inputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.data import write_csv
from benchmarks.engine_bytes import runs_of
from etl.contract.schema import load_schema
from etl.job.config import load_job
from etl.job.estimate import estimate
from etl.job.read_plan import plan_units
from etl.shuffle import engine
from tests.pipelines import write_yaml

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

ROOT = Path(__file__).resolve().parent.parent
ROWS = 300_000
DATAFLOW = ["--runner=DataflowRunner", "--project=my-project-123", "--region=us-central1",
            "--temp_location=gs://b/tmp"]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """The benchmark CSV (11 columns; not the data the rates were measured on: other size)."""
    folder = tmp_path_factory.mktemp("estimate")
    write_csv(str(folder / "data.csv"), ROWS)
    return Path(write_yaml(str(folder / "job.yaml"), {
        "schema": str(ROOT / "schemas" / "bench_csv.yaml"),
        "source": {"format": "csv", "paths": ["data.csv"]}, "split": {"train": 0.8, "test": 0.2},
        "output": "out", "shards": 4, "shuffle": {"seed": 3}}))


def _estimate(job: Path, local: bool = True, **kw):
    cfg = load_job(str(job))
    return estimate(cfg, plan_units(cfg.sources, cfg.base_dir, cfg.path),
                    load_schema(cfg.schema_path), runner="test", via="files" if local else "engine",
                    split_bytes=0, local=local, **kw)


def test_the_estimate_matches_the_run_it_estimates(job) -> None:
    est = _estimate(job)
    cpu_before = os.times()
    proc = subprocess.run([sys.executable, str(ROOT / "run_pipeline.py"), "run", str(job),
                           "--progress", "none"], cwd=job.parent, capture_output=True, text=True,
                          timeout=600)
    cpu_after = os.times()
    assert proc.returncode == 0, proc.stderr
    measured_cpu = ((cpu_after.children_user - cpu_before.children_user)
                    + (cpu_after.children_system - cpu_before.children_system))
    manifest = json.loads((job.parent / "out" / "manifest.json").read_text())
    records = sum(s["num_records"] for s in manifest["splits"].values())
    written = sum(s["num_bytes"] for s in manifest["splits"].values())
    assert records == ROWS
    assert abs(est.records - ROWS) / ROWS < 0.05, est.records
    assert abs(est.framed_bytes - written) / written < 0.10, (est.framed_bytes, written)
    assert abs(est.per_split["train"] / est.records - 0.8) < 1e-9
    # CPU: the measured per-core rate applied to this input, start-up included, is within 2x
    # of what the run took on this machine (a vCPU of the machine type counts as one core)
    estimated_cpu = est.cpu_seconds + est.startup_cpu_seconds
    assert measured_cpu / 2 <= estimated_cpu <= measured_cpu * 2, (estimated_cpu, measured_cpu)
    dataflow = _estimate(job, local=False, workers=2, machine_type="n2-standard-4")
    assert dataflow.cpu_seconds == est.cpu_seconds  # the same work, priced on other machines
    low, high = dataflow.hours
    work_hours = low - 4 / 60
    assert work_hours * 2 * 4 * 0.7 == pytest.approx(est.cpu_seconds / 3600)  # 2 × 4 vCPU at 70%
    assert high > low and dataflow.cost[1] > dataflow.cost[0] > 0
    # engine on Dataflow: the records packed (compressed) go through Dataflow Shuffle; the
    # sample's ratio is within 10% of this file's runs packed as chunks, and under 0.6x
    packed = sum(len(engine.Chunk.of(r.keys, r.ids, r.offsets, r.payload).data)
                 for r in runs_of(str(job.parent / "data.csv"), 3))
    assert abs(dataflow.shuffle_bytes - packed) / packed < 0.10, (dataflow.shuffle_bytes, packed)
    assert dataflow.shuffle_bytes < 0.6 * est.framed_bytes


def test_dataflow_estimate_with_local_inputs_launches_and_writes_nothing(job, tmp_path) -> None:
    output = job.parent / "out-dataflow"
    proc = subprocess.run([sys.executable, str(ROOT / "run_pipeline.py"), "run", str(job),
                           "--estimate", "--output", str(output), *DATAFLOW,
                           "--machine_type=n2-standard-4", "--num_workers=3"],
                          cwd=job.parent, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_GCE_CHECK": "true"})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "Estimate for" in text and "on DataflowRunner (nothing was launched or written)" in text
    assert "3 × n2-standard-4 (4 vCPU, 16 GB)" in text
    assert "cost              $" in text and "us-central1" in text
    assert "1 input(s) are on this machine: copy them to a bucket" in text
    shown = int(re.search(r"records +~([\d,]+)", text).group(1).replace(",", ""))
    assert abs(shown - ROWS) / ROWS < 0.05, shown
    assert not output.exists() and not (job.parent / ".out-dataflow.etl").exists()
    # the same command without --estimate is refused: workers cannot read local files
    refused = subprocess.run([sys.executable, str(ROOT / "run_pipeline.py"), "run", str(job),
                              "--output", str(output), *DATAFLOW], cwd=job.parent,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "cannot read 1 local input file" in refused.stderr


def test_local_estimate_names_this_machine_and_the_rates(job) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "run_pipeline.py"), "run", str(job),
                           "--estimate", "--output", "never"], cwd=job.parent,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"on this machine ({os.cpu_count()} cores)" in proc.stdout
    assert "etl/job/estimate_rates.json" in proc.stdout and "cost" not in proc.stdout
    assert not (job.parent / "never").exists()
