"""cli.lean_imports: Beam imported by a run without the MongoDB client (issue 29, goal 3), and
on a local runner without Google's BigQuery, Pub/Sub and Dataflow API clients; each client
still importable afterwards, for a user's generator that reads MongoDB or BigQuery."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from cli.lean_imports import (
    BEAM_CLOUD_IO,
    UNUSED_BY_LOCAL_RUNS,
    UNUSED_BY_RUNS,
    cloud_io_needed,
    unused_by,
)
from etl.job.config import JobConfig
from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # a subprocess importing Beam (make test-fast skips it)

# a fresh interpreter: the test process may have imported Beam, and with it pymongo, already
_SCRIPT = """
import sys
from cli.lean_imports import without_unused_extras
with without_unused_extras():
    import apache_beam
import apache_beam.io.mongodbio as mongo
print("beam's mongo io:", mongo.MongoClient, "pymongo" in sys.modules, "bson" in sys.modules)
import pymongo
print("then imported:", pymongo.MongoClient.__name__)
with without_unused_extras():
    import pymongo as again
    print("an imported module is kept:", again is pymongo)
"""


def test_beam_imports_without_pymongo_which_loads_normally_afterwards() -> None:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "beam's mongo io: None False False",  # as where pymongo is not installed
        "then imported: MongoClient",
        "an imported module is kept: True",
    ]
    assert proc.stderr == ""  # not Beam's "Could not find a compatible bson package."


def test_only_a_runner_on_this_machine_goes_without_googles_clients() -> None:
    """A Dataflow run needs its API client; a local run's pipeline is our transforms only."""
    for local in (None, "FnApiRunner", "DirectRunner", "apache_beam.runners.DirectRunner"):
        assert unused_by(local) == UNUSED_BY_LOCAL_RUNS
    for remote in ("DataflowRunner", "PortableRunner"):
        assert unused_by(remote) == UNUSED_BY_RUNS
    assert set(UNUSED_BY_LOCAL_RUNS) - set(UNUSED_BY_RUNS) == {
        "google.cloud.bigquery", "google.cloud.bigquery_storage_v1", "google.cloud.pubsub",
        "google.cloud.pubsub_v1", "google.pubsub_v1", "google.cloud.dataflow",
        "google.cloud.dataflow_v1beta3"}


_LOCAL_SCRIPT = """
import sys
from cli.lean_imports import unused_by, without_unused_extras
with without_unused_extras(unused_by("FnApiRunner")):
    import apache_beam
import apache_beam.io.gcp.bigquery_tools as bq_tools
import apache_beam.runners.dataflow.dataflow_runner as dataflow_runner
loaded = sorted(m for m in sys.modules if m.startswith(("google.cloud.bigquery",
                "google.cloud.pubsub", "google.pubsub", "google.cloud.dataflow")))
print("beam's modules:", dataflow_runner.DataflowRunner.__name__, "clients:", loaded)
from google.cloud import bigquery, dataflow_v1beta3
print("then imported:", bigquery.Client.__name__, dataflow_v1beta3.JobsV1Beta3Client.__name__)
"""


def test_beam_imports_on_a_local_runner_without_googles_clients_which_load_afterwards() -> None:
    proc = subprocess.run([sys.executable, "-c", _LOCAL_SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "beam's modules: DataflowRunner clients: []",  # every Beam module, none of the clients
        "then imported: Client JobsV1Beta3Client",
    ]
    assert proc.stderr == ""


def test_beams_cloud_io_is_left_out_only_of_a_local_run_in_its_own_process_naming_no_store(
) -> None:
    assert unused_by("FnApiRunner", cloud_io=False) == (*UNUSED_BY_LOCAL_RUNS, *BEAM_CLOUD_IO)
    assert unused_by(None, cloud_io=False) == (*UNUSED_BY_LOCAL_RUNS, *BEAM_CLOUD_IO)
    assert unused_by("DataflowRunner", cloud_io=False) == UNUSED_BY_RUNS
    sources = [{"format": "csv", "paths": ["/data/a.csv", "/data/b.csv"]},
               {"format": "idx", "images": "/data/i.gz", "labels": "/data/l.gz"}]
    local = (sources, "/out/ds", "/schemas/s.yaml", None)
    args = ["--direct_num_workers=2"]
    assert cloud_io_needed(True, [_job(*local)], args) is False
    assert cloud_io_needed(False, [_job(*local)], args) is True  # a notebook or test process
    in_store = [{"format": "csv", "paths": ["/data/a.csv", "gs://b/data/b.csv"]}]
    assert cloud_io_needed(True, [_job(in_store, "/out/ds", "/s.yaml", None)], []) is True
    assert cloud_io_needed(True, [_job(sources, "gs://b/out", "/s.yaml", None)], []) is True
    assert cloud_io_needed(True, [_job(sources, "/out/ds", "gs://b/s.yaml", None)], []) is True
    assert cloud_io_needed(True, [_job(sources, "/out/ds", "/s.yaml", "gs://b/tmp")], []) is True
    assert cloud_io_needed(True, [_job(*local)], ["--temp_location=gs://b/tmp"]) is True
    assert cloud_io_needed(True, [_job(*local)], ["--temp_location", "s3://b/tmp"]) is True
    # a user's generator may use Beam's IO itself
    generator = [{"format": "python", "generator": "mine.records"}]
    assert cloud_io_needed(True, [_job(generator, "/out/ds", "/s.yaml", None)], []) is True
    # several jobs (a date range's spans): one naming a store is enough
    assert cloud_io_needed(True, [_job(*local), _job(in_store, "/o", "/s.yaml", None)],
                           []) is True


def _job(sources: list[dict[str, Any]], output: str, schema: str, temp: str | None) -> JobConfig:
    return JobConfig(path="/jobs/job.yaml", base_dir="/jobs", schema_path=schema,
                     sources={f"s{i}": source for i, source in enumerate(sources)},
                     fractions={}, output=output, temp_location=temp)

_CLOUD_SCRIPT = """
import sys
from cli.lean_imports import unused_by, without_unused_extras
with without_unused_extras(unused_by("FnApiRunner", cloud_io=False)):
    import apache_beam as beam
loaded = sorted(m for m in sys.modules if m.startswith(("apitools", "google.cloud.storage",
                "apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.gcs")))
print("cloud io:", loaded)
with beam.Pipeline("FnApiRunner") as p:
    _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2) | beam.Map(print)
from apache_beam.io.filesystems import FileSystems
try:
    FileSystems.get_filesystem("gs://bucket/a")
except ValueError:
    print("gs:// before etl.storage: unknown")
from etl.storage import fs
print("gs:// through etl.storage:", type(fs._fs().get_filesystem("gs://bucket/a")).__name__)
"""


def test_beam_runs_without_its_cloud_io_and_gs_paths_still_reach_its_gcs_file_system() -> None:
    proc = subprocess.run([sys.executable, "-c", _CLOUD_SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "cloud io: []", "2", "4", "6", "gs:// before etl.storage: unknown",
        "gs:// through etl.storage: GCSFileSystem"]
    assert proc.stderr == ""
