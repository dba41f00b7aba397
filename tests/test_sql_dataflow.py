"""`format: sql` off this machine: a PostgreSQL source translated for Dataflow (a template
build against the GCS emulator, nothing submitted) carries the URL without its password, the
name of the variable workers read it from, the launcher's snapshot id and its survey, and no
trace of the password in anything the translation writes: the template's job JSON, the staged
pipeline, the read plan, pickled DoFns decoded. And a local run with the password in the URL
leaves it in no file under the job folder and in nothing it prints."""

from __future__ import annotations

import base64
import bz2
import json
import os
import re
import tempfile
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from etl.base.errors import ConfigError
from tests.gcs_emulator import offline_dataflow
from tests.helpers import cli

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# a password whose URL-quoted form differs from it: both are searched for
PASSWORD = "p@ss:w/rd%é ~+"
ROLE = "leaky"
SCHEMA = ("name: t\nkind: example\nfeatures:\n  id: {dtype: int64, shape: []}\n"
          "  x: {dtype: float32, shape: []}\n")
ROWS = 300
_BASE64 = re.compile(rb"[A-Za-z0-9+/]{40,}={0,2}")


@pytest.fixture(scope="module")
def leaky(postgres) -> str:
    """A table readable by a role whose password has characters a URL quotes; its URL with
    the password written in it."""
    with postgres.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS flow_rows")
        conn.execute("CREATE TABLE flow_rows (id bigint PRIMARY KEY, x real)")
        conn.execute("INSERT INTO flow_rows SELECT i, i / 4.0 FROM generate_series(0, %s) i",
                     (ROWS - 1,))
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}")
        conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"GRANT SELECT ON flow_rows TO {ROLE}")
    return (f"postgresql://{ROLE}:{quote(PASSWORD, safe='')}@{postgres.host}:{postgres.port}/"
            f"{postgres.dbname}")


def forms(password: str) -> set[bytes]:
    """Every way the password could be written: plain, URL-quoted (both quoting styles)."""
    return {f.encode() for f in (password, quote(password, safe=""), quote(password),
                                 quote(password, safe="").replace("%20", "+"))}


def expand(blob: bytes, depth: int = 2) -> list[bytes]:
    """`blob` and what is serialized inside it: base64 runs decoded, bz2/zlib streams (Beam's
    pickled DoFns: base64 of bz2 of a pickle) decompressed, recursively."""
    out = [blob]
    if depth == 0:
        return out
    for run in _BASE64.findall(blob):
        try:
            raw = base64.b64decode(run + b"=" * (-len(run) % 4))
        except ValueError:
            continue
        inner = [raw]
        for unpack in (bz2.decompress, zlib.decompress):
            try:
                inner.append(unpack(raw))
            except (OSError, ValueError, zlib.error):
                pass
        for part in inner:
            out += expand(part, depth - 1)
    return out


def leaks(blob: bytes) -> list[bytes]:
    found = []
    for part in expand(blob):
        found += [f for f in forms(PASSWORD) if f in part]
    return found


def write_job(folder: Path, url: str, output: str, **source: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(SCHEMA)
    job = {"schema": "schema.yaml", "output": output, "shards": 2,
           "source": {"format": "sql", "url": url, "query": "SELECT id, x FROM flow_rows",
                      "split_by": "id", "split_rows": 100, **source},
           "split": {"train": 0.75, "test": 0.25}, "shuffle": {"seed": 3}, "compression": "none"}
    (folder / "job.yaml").write_text(json.dumps(job))
    return folder / "job.yaml"


def test_the_search_finds_a_password_inside_a_pickled_dofn() -> None:
    from apache_beam.internal import pickler

    blob = b"graph " + pickler.dumps({"url": f"postgresql://u:{quote(PASSWORD, safe='')}@h/d"})
    assert PASSWORD.encode() not in blob and quote(PASSWORD, safe="").encode() not in blob
    assert leaks(blob) == [quote(PASSWORD, safe="").encode()]


@pytest.fixture
def emulated_gcs(gcs_emulator, monkeypatch, tmp_path):
    """The emulator's variables in this process, no credential lookup (Beam would retry for
    ~25 s), our wheel built into this test's folder."""
    from transforms import staging

    offline_dataflow(gcs_emulator, monkeypatch)
    monkeypatch.setattr(staging, "_cache_dir", lambda _: str(tmp_path / "staging"))
    monkeypatch.setenv("MY_PG_SECRET", PASSWORD)
    return gcs_emulator


def dataflow_args(where: str, *more: str) -> list[str]:
    return ["--runner=DataflowRunner", f"--temp_location={where}/tmp",
            f"--staging_location={where}/staging", "--project=my-project-123",
            "--region=us-central1", "--no_auth", *more]


def settings_in(pipeline_pb: bytes) -> list[dict[str, Any]]:
    """The sql source's settings in every DoFn of a staged pipeline that carries the job's
    ConvertSpec, unpickled as a worker unpickles them."""
    from apache_beam.internal import pickler
    from apache_beam.portability.api import beam_runner_api_pb2

    pipeline = beam_runner_api_pb2.Pipeline.FromString(pipeline_pb)
    found = []
    for t in pipeline.components.transforms.values():
        if t.spec.urn == "beam:transform:pardo:v1":
            payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            spec = getattr(pickler.loads(payload.do_fn.payload)[0], "spec", None)
            if spec is not None:
                (source,) = spec.sources.values()
                found.append(source)
    return found


CASES = [("in_url", True, {}, "ETL_SQL_PASSWORD"),
         ("by_env", False, {"password_env": "MY_PG_SECRET"}, "MY_PG_SECRET")]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "in_url", "extra", "variable"), CASES)
def test_dataflow_translation_carries_no_password(postgres, leaky, emulated_gcs, gcs_bucket,
                                                  tmp_path, monkeypatch, name, in_url, extra,
                                                  variable) -> None:
    """The job as Dataflow would get it, written to the emulator as a template build writes
    it (the job request JSON, the staged pipeline, our wheel and pins, the read plan) from the
    settings `held` gives the run: no password in any of it, pickled DoFns decoded; the
    workers' settings name the variable, the snapshot and the survey."""
    import apache_beam as beam

    from cli.run import convert_settings as convert_spec
    from cli.run import plan_reads
    from etl.contract.schema import load_schema
    from etl.job.config import load_job
    from etl.shuffle import engine
    from etl.sources import sql_source
    from transforms import staging
    from transforms.convert import ConvertToShards

    plain = leaky.replace(f":{quote(PASSWORD, safe='')}@", "@")
    where = f"{gcs_bucket}/{name}"
    job = load_job(str(write_job(tmp_path / name, leaky if in_url else plain, f"{where}/out",
                                 **extra)))
    schema = load_schema(job.schema_path)
    options = staging.pipeline_options(dataflow_args(
        where, f"--template_location={where}/template.json"))
    with sql_source.held(job.sources, job.base_dir, job.path, schema) as sources:
        read_plan = plan_reads(job, sources)
        assert [u.num_bytes for u in read_plan.units] == [0]
        spec = convert_spec(job, schema, read_plan, options, engine.NAME, f"{where}/tmp/run",
                            False, sources)
        read_plan.save(spec.read_plan)
        p = beam.Pipeline(options=options)
        _ = p | "Convert" >> ConvertToShards(spec)
        p.run()
    objects = emulated_gcs.list(f"{where}/")
    staged = [o.rsplit("/", 1)[1] for o in objects if "/staging/" in o]
    assert {"pipeline.pb", "requirements.txt", "extra_packages.txt"} <= set(staged)
    assert f"{where}/template.json" in objects and f"{where}/tmp/run/read_plan.json" in objects
    for o in objects:
        assert leaks(emulated_gcs.download(o)) == [], o
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.name != "job.yaml":  # the user's own file has it
            assert leaks(f.read_bytes()) == [], f
    pipeline_pb = emulated_gcs.download(next(o for o in objects if o.endswith("/pipeline.pb")))
    settings = settings_in(pipeline_pb)
    assert len(settings) >= 2  # the split planner and the readers at least
    for source in settings:
        assert source["url"] == plain
        assert source["password_env"] == variable
        assert isinstance(source["snapshot"], str) and source["snapshot"]
        survey = source["survey"]
        assert (survey["rows"], survey["key"], survey["split_range"], survey["held"]) \
            == (ROWS, "id", [0, ROWS - 1], True)
    # a worker without the variable: one line naming it (the launcher's copy of the
    # password left its environment with the run)
    if in_url:
        with pytest.raises(ConfigError) as err:
            sql_source.SqlReader(dict(settings[0]), job.base_dir, "sources.*")
        assert str(err.value) == ("sources.*: password_env ETL_SQL_PASSWORD is not set in the "
                                  "environment")
    # a worker with it (a custom container, a secret): the work units are the split ranges
    # (300 rows, 100 per range), read in the launcher's snapshot
    monkeypatch.setenv(variable, PASSWORD)
    reader = sql_source.SqlReader(dict(settings[0]), job.base_dir, "sources.*")
    assert [(s.start, s.stop) for s in reader.splits(read_plan.units[0].path, 0)] \
        == [(0, 100), (100, 200), (200, None)]
    # the snapshot is the launcher's: once it has stopped, a read says so in one line
    with pytest.raises(ConfigError) as err:
        list(reader.read_split(reader.splits(read_plan.units[0].path, 0)[0]))
    snapshot = settings[0]["snapshot"]
    assert str(err.value) == (f"{plain}: the run's snapshot {snapshot} is gone: the launcher "
                              "holds it only while it runs, and it stopped before this read; "
                              "nothing was published, run the job again")


@pytest.mark.slow
def test_dataflow_dry_run_holds_the_snapshot_and_writes_no_password(
        postgres, leaky, emulated_gcs, gcs_bucket, tmp_path, caplog, capfd) -> None:
    """The user's run with `--dry_run=True` (translated, nothing submitted): the run's log,
    the history beside the output and the job folder carry no password; off the local runner
    a PostgreSQL source is something workers reach (a DuckDB file would not be)."""
    from cli.run import run_job
    from etl.job.config import load_job
    from etl.schedule import history

    where = f"{gcs_bucket}/dry"
    job = load_job(str(write_job(tmp_path, leaky, f"{where}/out")))
    logs = Path(tempfile.gettempdir(), "tfrecord-etl", "logs")  # a remote output's run logs
    before = set(logs.glob("*")) if logs.exists() else set()
    result = run_job(job, dataflow_args(where, "--dry_run=True"))
    assert result.launched == "dry run: the job was translated, not submitted; nothing was published"
    new_logs = set(logs.glob("*")) - before
    assert new_logs
    for f in new_logs:
        assert leaks(f.read_bytes()) == [], f
    objects = emulated_gcs.list(f"{where}/")
    assert any(o.startswith(history.history_root(job.output)) for o in objects)
    for o in objects:
        assert leaks(emulated_gcs.download(o)) == [], o
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.name != "job.yaml":
            assert leaks(f.read_bytes()) == [], f
    out, err = capfd.readouterr()
    assert leaks((out + err + caplog.text).encode()) == []
    assert "ETL_SQL_PASSWORD" not in os.environ  # the launcher's copy left with the run


@pytest.mark.slow
def test_a_classic_template_of_a_postgres_source_is_refused(postgres, leaky, tmp_path) -> None:
    """Its job would run after the launcher, and the snapshot with it, are gone."""
    job = write_job(tmp_path, leaky, "gs://my-bucket/out")
    proc = cli("run", str(job), *dataflow_args("gs://my-bucket",
                                              "--template_location=gs://my-bucket/t.json"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {job}: source reads PostgreSQL in a snapshot the launcher holds while the job "
        "runs; a classic template (--template_location) runs after its launcher exits: run the "
        "job directly, or through the Flex Template (templates/)"]
    assert leaks((proc.stdout + proc.stderr).encode()) == []


@pytest.mark.slow
def test_a_local_run_with_the_password_in_the_url_writes_and_prints_it_nowhere(
        postgres, leaky, tmp_path) -> None:
    """A run, a rerun (current: skipped), a forced run with a report, a failing run, and the
    tools that read what runs leave (history, verify, inspect, report): no file under the job
    folder (output, its .out.etl/ logs and run directories, manifest, history, report) and
    nothing printed holds the password, plain or URL-quoted."""
    job = write_job(tmp_path, leaky, "out")
    runs = [cli("run", str(job), "--runner=FnApiRunner"),
            cli("run", str(job), "--runner=FnApiRunner"),
            cli("run", str(job), "--runner=FnApiRunner", "--force", "--report")]
    assert [r.returncode for r in runs] == [0, 0, 0], runs[0].stderr[-2000:]
    bad = write_job(tmp_path / "bad", leaky, str(tmp_path / "out2"))
    doc = json.loads(bad.read_text())
    doc["source"]["query"] = "SELECT id, x FROM no_such_table"
    bad.write_text(json.dumps(doc))
    failed = cli("run", str(bad), "--runner=FnApiRunner")
    assert failed.returncode == 2
    assert "no_such_table" in failed.stderr
    tools = [cli("history", str(tmp_path)), cli("verify", str(tmp_path / "out")),
             cli("report", str(tmp_path / "out"), "--out", str(tmp_path / "report"))]
    for proc in [*runs, failed, *tools]:
        assert leaks((proc.stdout + proc.stderr).encode()) == [], proc.args
    assert [p.returncode for p in tools] == [0, 0, 0], [p.stderr[-500:] for p in tools]
    files = [f for f in tmp_path.rglob("*") if f.is_file() and f.name != "job.yaml"]
    names = {str(f.relative_to(tmp_path)) for f in files}
    assert {"_runs.jsonl", "out/manifest.json", "out/report.html", "report/report.json"} <= names
    assert len([n for n in names if n.startswith(".out.etl/logs/")]) == 2  # a skip logs nothing
    shown = leaky.replace(f":{quote(PASSWORD, safe='')}@", "@")
    # the database as shown is there (so the search looks where the URL is written)
    for name in ("_runs.jsonl", "out/manifest.json"):
        assert shown in (tmp_path / name).read_text()
    for f in files:
        assert leaks(f.read_bytes()) == [], f
