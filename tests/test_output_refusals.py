"""Refusals an unattended run needs before it writes anything (issue 20), through
`run_pipeline.py run` in subprocesses, locally and against the GCS emulator:

- an output inside another published output of ours, or one that holds such an output: one
  line naming both, exit 2, and the published one still verifies byte for byte;
- a bucket that does not exist (output, input, temp location): one line naming the bucket and
  the path that needs it, exit 2, nothing created (no bucket, no marker, no history entry);
- local inputs with a runner whose workers run elsewhere (Dataflow): refused, exit 2;
- the summary of a gs:// run names the version folder it published, and where its rejected
  records went (inside that version, where the manifest lists them)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from etl.output.manifest import SUCCESS
from tests.gcs_emulator import GcsEmulator, split_url
from tests.helpers import IDS_SCHEMA, cli, error_lines, listing

PRODUCER = "tfrecord-etl"
MISSING = "no-such-bucket"  # never created by any test


def make_job(folder: Path, output: str, rows: int = 60, bad: int = 0, **extra: Any) -> str:
    """job.yaml + schema.yaml + ids.csv (`bad` rows at the end whose id is not a number)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    (folder / "ids.csv").write_text("id,a,b\n" + "".join(
        f"{i},{i * 0.5},{-i}\n" for i in range(rows)) + "".join(
        f"x{i},1,2\n" for i in range(bad)))
    doc = {"schema": "schema.yaml", "output": output, "shards": 2, "shuffle": {"seed": 7},
           "sources": {"train": {"format": "csv", "paths": ["ids.csv"]}}, **extra}
    (folder / "job.yaml").write_text(json.dumps(doc))  # JSON is YAML
    return str(folder / "job.yaml")


def objects(emulator: GcsEmulator, bucket: str) -> dict[str, tuple[int, str]]:
    """Every object of a bucket: name -> (generation, md5): what changed, and whether."""
    name, _ = split_url(bucket + "/")
    return {b.name: (int(b.generation), b.md5_hash)
            for b in emulator.client().list_blobs(name)}


def buckets(emulator: GcsEmulator) -> list[str]:
    return sorted(b.name for b in emulator.client().list_buckets())


def refused(proc: Any, line: str) -> None:
    """Exit 2, nothing on stdout, exactly `line` on stderr."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert error_lines(proc.stderr) == [line], proc.stderr


# ------------------------------------------------------- outputs inside outputs (local)


@pytest.mark.slow
def test_output_inside_a_published_output_is_refused_and_the_outer_still_verifies(
        tmp_path: Path) -> None:
    outer = tmp_path / "data" / "outer"
    job = make_job(tmp_path / "job", str(outer))
    assert cli("run", job).returncode == 0
    before = listing(tmp_path)
    for inner in (outer / "inner", outer / "deep" / "er" / "inner"):
        proc = cli("run", job, "--output", str(inner))
        refused(proc, f"error: refusing output {inner}: it is inside {outer}, a published "
                      f"output of {PRODUCER}, which would then hold files its manifest.json "
                      "does not list; choose a path outside it")
        assert listing(tmp_path) == before  # not a byte changed, no work dir, no history line
    checked = cli("verify", str(outer))
    assert (checked.returncode, checked.stdout) == (0, f"OK {outer}: 60 records train=60\n")


@pytest.mark.slow
def test_output_holding_a_published_output_is_refused(tmp_path: Path) -> None:
    """Refused before this fix too (as a folder without a manifest of ours); now the line
    names the dataset inside."""
    inner = tmp_path / "data" / "inner"
    job = make_job(tmp_path / "job", str(inner))
    assert cli("run", job).returncode == 0
    before = listing(tmp_path)
    outer = tmp_path / "data"
    refused(cli("run", job, "--output", str(outer)),
            f"error: refusing output {outer}: it holds {inner}, a published output of "
            f"{PRODUCER}; it is replaced as a whole, so choose a directory that holds no dataset")
    assert listing(tmp_path) == before
    checked = cli("verify", str(inner))
    assert (checked.returncode, checked.stdout) == (0, f"OK {inner}: 60 records train=60\n")


@pytest.mark.slow
def test_a_polluted_output_names_the_dataset_inside_it(tmp_path: Path) -> None:
    """An outer output already holding another one (made before this fix, or by hand) is
    refused by its next run naming what is inside, not only "a file its manifest lacks"."""
    outer = tmp_path / "outer"
    job = make_job(tmp_path / "job", str(outer))
    assert cli("run", job).returncode == 0
    assert cli("run", job, "--output", str(tmp_path / "elsewhere")).returncode == 0
    os.replace(tmp_path / "elsewhere", outer / "inner")  # what a run without the check made
    refused(cli("run", job, "--force"),
            f"error: refusing output {outer}: it holds {outer / 'inner'}, a published output "
            f"of {PRODUCER}; it is replaced as a whole, so choose a directory that holds no "
            "dataset")


# ------------------------------------------------------ outputs inside outputs (gs://)


@pytest.mark.slow
def test_gcs_output_inside_or_around_a_published_output_is_refused(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    env = gcs_emulator.env()
    outer = f"{gcs_bucket}/data/outer"
    job = make_job(tmp_path / "job", outer)
    assert cli("run", job, env=env).returncode == 0
    before = objects(gcs_emulator, gcs_bucket)
    for inner in (f"{outer}/inner", f"{outer}/deep/er/inner"):
        refused(cli("run", job, "--output", inner, env=env),
                f"error: refusing output {inner}: it is inside {outer}, a published output of "
                f"{PRODUCER}, which would then hold objects its runs did not create; choose a "
                "prefix outside it")
    around = f"{gcs_bucket}/data"
    refused(cli("run", job, "--output", around, env=env),
            f"error: refusing output {around}: it holds {outer}, a published output of "
            f"{PRODUCER}; choose a prefix that holds no dataset")
    assert objects(gcs_emulator, gcs_bucket) == before  # no marker, lock, history or shard
    checked = cli("verify", outer, env=env)
    version = json.loads(gcs_emulator.download(f"{outer}/{SUCCESS}"))["version"]
    assert (checked.returncode, checked.stdout) == (
        0, f"OK {outer}/{version}: 60 records train=60\n")
    ran = cli("run", job, "--force", env=env)  # and its own next run still takes it
    assert ran.returncode == 0, ran.stderr


# ------------------------------------------------------------------- missing buckets


def _output(bucket: str) -> tuple[dict[str, Any], list[str], str]:
    out = f"gs://{MISSING}/out"
    return {"output": out}, [], f"output {out}"


def _input(bucket: str) -> tuple[dict[str, Any], list[str], str]:
    path = f"gs://{MISSING}/in/ids.csv"
    return ({"output": f"{bucket}/out",
             "sources": {"train": {"format": "csv", "paths": [path]}}}, [], f"input {path}")


def _input_glob(bucket: str) -> tuple[dict[str, Any], list[str], str]:
    path = f"gs://{MISSING}/in/*.csv"
    return ({"output": f"{bucket}/out",
             "sources": {"train": {"format": "csv", "paths": [path]}}}, [], f"input {path}")


def _temp_in_job(bucket: str) -> tuple[dict[str, Any], list[str], str]:
    temp = f"gs://{MISSING}/tmp"
    return {"output": f"{bucket}/out", "temp_location": temp}, [], f"temp location {temp}"


def _temp_option(bucket: str) -> tuple[dict[str, Any], list[str], str]:
    temp = f"gs://{MISSING}/tmp"
    return {"output": f"{bucket}/out"}, [f"--temp_location={temp}"], f"temp location {temp}"


@pytest.mark.slow
@pytest.mark.parametrize("case", [_output, _input, _input_glob, _temp_in_job, _temp_option],
                         ids=["output", "input", "input_glob", "temp_in_job", "temp_option"])
def test_a_missing_bucket_is_one_line_and_creates_nothing(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str, case: Any) -> None:
    """Before: exit 1 "unexpected Conflict" (output, temp location: the latter after its
    marker and a history entry were written in the output's bucket), or exit 2 "no input
    files match" (input)."""
    env = gcs_emulator.env()
    extra, args, needs = case(gcs_bucket)
    job = make_job(tmp_path / "job", **extra)
    before = (listing(tmp_path), buckets(gcs_emulator))
    refused(cli("run", job, *args, env=env),
            f"error: bucket gs://{MISSING} does not exist ({needs}); create it or fix the path")
    assert (listing(tmp_path), buckets(gcs_emulator)) == before
    assert objects(gcs_emulator, gcs_bucket) == {}


@pytest.mark.slow
def test_a_range_with_inputs_in_a_missing_bucket_fails_each_span(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    """Dated inputs in a bucket that does not exist are not "no input files for the span":
    not even --allow-missing skips them; every span fails with the bucket's line, exit 2."""
    path = f"gs://{MISSING}/in/{{date}}.csv"
    job = make_job(tmp_path / "job", f"{gcs_bucket}/out/{{date}}",
                   sources={"train": {"format": "csv", "paths": [path]}})
    proc = cli("run", job, "--from", "2026-11-01", "--to", "2026-11-02", "--allow-missing",
               env=gcs_emulator.env())
    assert proc.returncode == 2, proc.stderr
    lines = proc.stdout.splitlines()
    for day, line in zip(("01", "02"), lines, strict=False):
        assert line.startswith(f"2026-11-{day}  failed (exit 2)"), line
        assert line.endswith(f"bucket gs://{MISSING} does not exist (input gs://{MISSING}/in/"
                             f"2026-11-{day}.csv); create it or fix the path"), line
    assert lines[-1] == "2 span(s): 0 ok, 0 skipped, 2 failed (exit 2)"
    assert objects(gcs_emulator, gcs_bucket) == {}


# ------------------------------------------------ local inputs to a gs:// output


@pytest.mark.slow
def test_local_inputs_are_refused_when_workers_run_elsewhere(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    """Already so before issue 20 (cli.run.check_worker_access): pinned here. Dataflow
    options are only parsed: the refusal comes before anything is submitted or staged."""
    job = make_job(tmp_path / "job", f"{gcs_bucket}/out")
    proc = cli("run", job, "--runner=DataflowRunner", "--project=my-project-123",
               "--region=us-central1", f"--temp_location={gcs_bucket}/tmp",
               env=gcs_emulator.env())
    refused(proc, f"error: {job}: runner DataflowRunner runs on other machines, which cannot "
                  f"read 1 local input file(s), e.g. {tmp_path / 'job' / 'ids.csv'}; copy the "
                  "inputs to a bucket (gs://...) and point the job's paths there")
    assert objects(gcs_emulator, gcs_bucket) == {}


# ------------------------------------------------------------------------ the summary


@pytest.mark.slow
def test_summary_names_the_published_version_and_its_rejected_records(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    env = gcs_emulator.env()
    out = f"{gcs_bucket}/data/out"
    job = make_job(tmp_path / "job", out, bad=1, max_bad_fraction=0.1)
    proc = cli("run", job, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(rf"Wrote {re.escape(out)} in \d+\.\ds", lines[0]), lines[0]
    shown = re.fullmatch(r"  published    version (\S+): (\S+)", lines[1])
    assert shown, lines[1]
    version, folder = shown.groups()
    assert re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{6}-[0-9a-f]{12}", version), version
    assert folder == f"{out}/{version}"
    pointer = json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))
    assert (pointer["version"], pointer["manifest"]) == (version, f"{version}/manifest.json")
    manifest = json.loads(gcs_emulator.download(f"{folder}/manifest.json"))
    assert manifest["run_id"] == version and manifest["splits"]["train"]["num_records"] == 60
    assert f"{folder}/{SUCCESS}" in gcs_emulator.list(folder + "/")
    dead = f"{folder}/rejected/rejected.jsonl"
    assert lines[5] == f"  rejected              1 records (see {dead}): {{'unparsable_number': 1}}"
    [record] = [json.loads(x) for x in gcs_emulator.download(dead).decode().splitlines()]
    assert (record["line"], record["code"]) == (62, "unparsable_number")
    assert lines[-1] == f"Read it back: etl.make_dataset({out!r}, split='train')"


@pytest.mark.slow
def test_summary_of_a_local_run_names_its_rejected_file(tmp_path: Path) -> None:
    """Local outputs have no versions: no `published` line; the rejected file is named whole."""
    out = tmp_path / "out"
    proc = cli("run", make_job(tmp_path / "job", str(out), bad=1, max_bad_fraction=0.1))
    assert proc.returncode == 0, proc.stderr
    assert not any("published" in line for line in proc.stdout.splitlines())
    assert (f"  rejected              1 records (see {out}/rejected/rejected.jsonl): "
            "{'unparsable_number': 1}") in proc.stdout.splitlines()
    assert (out / "rejected" / "rejected.jsonl").is_file()


def test_a_bucket_we_may_not_list_is_not_called_missing() -> None:
    """The emulator answers no 403: a stand-in client does. Real GCS answers 404 for a bucket
    that does not exist whoever asks, 403 for one that exists but may not be listed (a read-
    only grant on objects): the run goes on and meets its real permission, if any."""
    from google.api_core import exceptions  # noqa: PLC0415

    from etl.storage.object_store import Store  # noqa: PLC0415

    class Client:
        def __init__(self, error: Exception):
            self.error = error

        def list_blobs(self, *args: Any, **kwargs: Any) -> list[Any]:
            raise self.error

    store = Store(deadline=1)
    store._made = Client(exceptions.Forbidden("no storage.objects.list"))
    assert store.bucket_exists("theirs") is True
    store._made = Client(exceptions.NotFound("The specified bucket does not exist."))
    assert store.bucket_exists("typo") is False
