"""Outputs never replace another job's output silently (etl.output.origin).

The manifest records which job published it (`published_by`: each source's format and paths,
the schema's name). A run of another job into that output is refused in one line naming both
(exit 2, nothing written: no file, no history entry), `--force` replaces it; the same job with
new input content rebuilds as before; an output of an older version (no `published_by`) is
taken as ours. The real case: palmerpenguins' penguins-raw.csv and a Parquet copy of it, both
inferred with infer-schema and both pointed at `out/penguins_raw`. Also with date spans, a
gs:// output (GCS emulator) and `quarantine release`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import palmerpenguins
import pandas as pd
import pytest

from etl.output.manifest import dataset_dir
from etl.storage import fs
from tests.gcs_emulator import GcsEmulator
from tests.helpers import IDS_SCHEMA, cli

PENGUINS_RAW = os.path.join(os.path.dirname(palmerpenguins.__file__), "data", "penguins-raw.csv")


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below `folder` (the output, its work dir, the history beside it): size and
    mtime, so a refused run is seen to write nothing."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def manifest(out: str) -> dict[str, Any]:
    return json.loads(fs.read_bytes(fs.join(dataset_dir(out), "manifest.json")))


def refused_line(proc: Any) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def penguins(tmp_path: Path) -> Path:
    """penguins-raw.csv and its Parquet copy (pandas), each inferred into a job and schema
    of its own. infer-schema proposes two outputs (named after each input and its format);
    both jobs are then pointed at one `out/penguins_raw`, as a user who picks the name does
    (and as infer-schema itself proposed before it named outputs apart)."""
    shutil.copy(PENGUINS_RAW, tmp_path / "penguins-raw.csv")
    pd.read_csv(PENGUINS_RAW).to_parquet(tmp_path / "penguins_raw.parquet")
    proposed = []
    for data, job, schema in (("penguins-raw.csv", "csv_job.yaml", "csv_schema.yaml"),
                              ("penguins_raw.parquet", "parquet_job.yaml",
                               "parquet_schema.yaml")):
        done = cli("infer-schema", str(tmp_path / data), "--job", str(tmp_path / job),
                   "-o", str(tmp_path / schema))
        assert done.returncode == 0, done.stderr
        text = (tmp_path / job).read_text()
        line = next(ln for ln in text.splitlines() if ln.startswith("output: "))
        proposed.append(line)
        (tmp_path / job).write_text(text.replace(line, "output: out/penguins_raw"))
    assert proposed[0] != proposed[1] and all(
        p.startswith("output: out/penguins_raw_") for p in proposed), proposed
    return tmp_path


@pytest.mark.slow
def test_penguins_csv_and_parquet_jobs_never_replace_each_other(penguins: Path) -> None:
    out = penguins / "out" / "penguins_raw"
    first = cli("run", str(penguins / "csv_job.yaml"))
    assert first.returncode == 0, first.stderr
    published = manifest(str(out))
    assert published["published_by"] == {
        "schema": "penguins_raw",
        "sources": {"*": {"format": "csv", "paths": ["penguins-raw.csv"],
                          "resolved": [str(penguins / "penguins-raw.csv")]}}}
    before = tree(penguins / "out")

    refused = cli("run", str(penguins / "parquet_job.yaml"))
    assert refused.returncode == 2, refused.stderr
    assert refused_line(refused) == (
        f"error: {out} holds the output of penguins-raw.csv (csv, schema penguins_raw); this "
        "job reads penguins_raw.parquet (parquet): use another output, or --force to replace "
        "it")
    assert refused.stdout == ""
    assert tree(penguins / "out") == before  # no file, no history entry, no run directory

    forced = cli("run", str(penguins / "parquet_job.yaml"), "--force")
    assert forced.returncode == 0, forced.stderr
    assert manifest(str(out))["published_by"]["sources"]["*"]["format"] == "parquet"
    back = cli("run", str(penguins / "csv_job.yaml"))
    assert back.returncode == 2, back.stderr
    assert refused_line(back) == (
        f"error: {out} holds the output of penguins_raw.parquet (parquet, schema "
        "penguins_raw); this job reads penguins-raw.csv (csv): use another output, or --force "
        "to replace it")


@pytest.mark.slow
def test_new_content_in_the_same_inputs_rebuilds(penguins: Path) -> None:
    out = str(penguins / "out" / "penguins_raw")
    assert cli("run", str(penguins / "csv_job.yaml")).returncode == 0
    again = cli("run", str(penguins / "csv_job.yaml"))
    assert again.returncode == 0 and again.stdout.startswith("Skipped "), again.stderr
    data = penguins / "penguins-raw.csv"
    lines = data.read_text().splitlines(keepends=True)
    data.write_text("".join(lines[:-1]))  # one record less: same job, new content
    rebuilt = cli("run", str(penguins / "csv_job.yaml"))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.startswith(f"Wrote {out} in ")
    assert sum(s["num_records"] for s in manifest(out)["splits"].values()) == 343


@pytest.mark.slow
def test_an_output_of_an_older_version_is_taken_as_ours(penguins: Path) -> None:
    """No `published_by` (published before this check existed): nothing to compare, no
    refusal; the run records its own."""
    out = penguins / "out" / "penguins_raw"
    assert cli("run", str(penguins / "csv_job.yaml")).returncode == 0
    doc = manifest(str(out))
    del doc["published_by"]
    (out / "manifest.json").write_text(json.dumps(doc, indent=1))  # not listed in itself
    done = cli("run", str(penguins / "parquet_job.yaml"))
    assert done.returncode == 0, done.stderr
    assert manifest(str(out))["published_by"]["sources"]["*"]["format"] == "parquet"


def ids_job(folder: Path, output: str, data: str = "data/*.csv", schema_name: str = "ids",
            extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA.replace("name: ids", f"name: {schema_name}"))
    job = folder / "job.yaml"
    job.write_text(f"schema: schema.yaml\nsource: {{format: csv, paths: [\"{data}\"]}}\n"
                   f"output: {output}\nshards: 1\n{extra}")
    return job


def write_ids(path: Path, n: int, start: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id,a,b\n" + "".join(f"{i},{i}.5,{-i}\n" for i in range(start, start + n)))


@pytest.mark.slow
def test_another_schema_name_is_another_job(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    write_ids(tmp_path / "a" / "data" / "x.csv", 5)
    assert cli("run", str(ids_job(tmp_path / "a", out))).returncode == 0
    # the same input files (given another way), a schema of another name
    second = ids_job(tmp_path / "b", out, str(tmp_path / "a" / "data" / "*.csv"),
                     schema_name="ids_v2")
    refused = cli("run", str(second))
    assert refused.returncode == 2, refused.stderr
    assert refused_line(refused) == (
        f"error: {out} holds the output of *.csv (csv, schema ids); this job reads *.csv "
        "(csv, schema ids_v2): use another output, or --force to replace it")


@pytest.mark.slow
def test_same_file_names_in_other_folders_are_named_in_full(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    for name in ("a", "b"):
        write_ids(tmp_path / name / "data" / "x.csv", 5)
    assert cli("run", str(ids_job(tmp_path / "a", out, "data/x.csv"))).returncode == 0
    refused = cli("run", str(ids_job(tmp_path / "b", out, "data/x.csv")))
    assert refused.returncode == 2, refused.stderr
    assert refused_line(refused) == (
        f"error: {out} holds the output of {tmp_path}/a/data/x.csv (csv, schema ids); this job "
        f"reads {tmp_path}/b/data/x.csv (csv, schema ids): use another output, or --force to "
        "replace it")


@pytest.mark.slow
def test_date_spans_are_one_job_and_another_job_is_refused_per_span(tmp_path: Path) -> None:
    """Every span of a dated job is that job (its paths before the date is filled): spans
    into one output replace each other as before; another job into a span's output is
    refused, and other spans' outputs are untouched."""
    for day, n in (("2024-01-01", 3), ("2024-01-02", 4)):
        write_ids(tmp_path / "job" / "raw" / day / "x.csv", n)
        write_ids(tmp_path / "other" / "raw" / day / "x.csv", 7)
    dated = ids_job(tmp_path / "job", "out/{date}", "raw/{date}/*.csv")
    shared = ids_job(tmp_path / "shared", str(tmp_path / "job" / "out" / "all"),
                     str(tmp_path / "job" / "raw" / "{date}" / "*.csv"))
    other = ids_job(tmp_path / "other", str(tmp_path / "job" / "out" / "{date}"),
                    "raw/{date}/*.csv")
    done = cli("run", str(dated), "--from", "2024-01-01", "--to", "2024-01-02")
    assert done.returncode == 0, done.stderr
    for day in ("2024-01-01", "2024-01-02"):  # one output per span: never refused
        assert cli("run", str(shared), "--date", day).returncode == 0
    assert manifest(str(tmp_path / "job" / "out" / "all"))["splits"]["train"][
        "num_records"] == 4
    before = tree(tmp_path / "job" / "out")
    refused = cli("run", str(other), "--date", "2024-01-02")
    assert refused.returncode == 2, refused.stderr
    day_out = tmp_path / "job" / "out" / "2024-01-02"
    assert refused_line(refused) == (
        f"error: {day_out} holds the output of {tmp_path}/job/raw/{{date}}/*.csv (csv, schema "
        f"ids); this job reads {tmp_path}/other/raw/{{date}}/*.csv (csv, schema ids): use "
        "another output, or --force to replace it")
    assert tree(tmp_path / "job" / "out") == before
    ranged = cli("run", str(other), "--from", "2024-01-01", "--to", "2024-01-02")
    assert ranged.returncode == 2, ranged.stdout + ranged.stderr
    assert ranged.stdout.count("holds the output of") == 2, ranged.stdout
    assert tree(tmp_path / "job" / "out") == before


@pytest.mark.slow
def test_a_gs_output_of_another_job_is_refused(tmp_path: Path, gcs_emulator: GcsEmulator,
                                               gcs_bucket: str) -> None:
    env = gcs_emulator.env()
    out = f"{gcs_bucket}/out/ids"
    write_ids(tmp_path / "a" / "data" / "x.csv", 5)
    write_ids(tmp_path / "b" / "data" / "y.csv", 6)
    first = ids_job(tmp_path / "a", out, "data/x.csv")
    done = cli("run", str(first), f"--temp_location={gcs_bucket}/tmp", env=env)
    assert done.returncode == 0, done.stderr
    listed = gcs_emulator.list(f"{gcs_bucket}/out/")
    second = ids_job(tmp_path / "b", out, "data/y.csv")
    refused = cli("run", str(second), f"--temp_location={gcs_bucket}/tmp", env=env)
    assert refused.returncode == 2, refused.stderr
    assert refused_line(refused) == (
        f"error: {out} holds the output of x.csv (csv, schema ids); this job reads y.csv (csv): "
        "use another output, or --force to replace it")
    assert gcs_emulator.list(f"{gcs_bucket}/out/") == listed
    forced = cli("run", str(second), "--force", f"--temp_location={gcs_bucket}/tmp", env=env)
    assert forced.returncode == 0, forced.stderr
    assert manifest(out)["published_by"]["sources"]["*"]["paths"] == ["data/y.csv"]
    assert manifest(out)["splits"]["train"]["num_records"] == 6


@pytest.mark.slow
def test_quarantine_release_publishes_the_job_it_holds(tmp_path: Path) -> None:
    """Another job blocked by a check is refused before its checks run (nothing quarantined);
    forced, it is quarantined, and `quarantine release` publishes it with its own
    `published_by`, which the first job is then refused against."""
    out = str(tmp_path / "out")
    write_ids(tmp_path / "a" / "data" / "x.csv", 5)
    write_ids(tmp_path / "b" / "data" / "y.csv", 6)
    first = ids_job(tmp_path / "a", out, "data/x.csv")
    assert cli("run", str(first)).returncode == 0
    blocked = ids_job(tmp_path / "b", out, "data/y.csv",
                      extra="checks: {block: {records: {min: 100}}}\n")
    refused = cli("run", str(blocked))
    assert refused.returncode == 2, refused.stderr
    assert "holds the output of x.csv (csv, schema ids)" in refused.stderr
    assert not os.path.exists(out + ".quarantine")
    forced = cli("run", str(blocked), "--force")
    assert forced.returncode == 6, forced.stderr
    assert manifest(out)["published_by"]["sources"]["*"]["paths"] == ["data/x.csv"]
    released = cli("quarantine", "release", out)
    assert released.returncode == 0, released.stderr
    assert manifest(out)["published_by"]["sources"]["*"]["paths"] == ["data/y.csv"]
    back = cli("run", str(first))
    assert back.returncode == 2, back.stderr
    assert refused_line(back) == (
        f"error: {out} holds the output of y.csv (csv, schema ids); this job reads x.csv (csv):"
        " use another output, or --force to replace it")


def test_check_same_job_compares_formats_paths_and_schema_only() -> None:
    from etl.output.origin import OtherJobsOutput, check_same_job, describe  # noqa: PLC0415

    ours = {"schema": "s", "sources": {"train": {"format": "csv", "paths": ["a.csv"],
                                                 "resolved": ["/d/a.csv"]}}}
    check_same_job("out", None, ours)  # nothing published
    check_same_job("out", {"splits": {}}, ours)  # an older version's manifest
    check_same_job("out", {"published_by": json.loads(json.dumps(ours))}, ours)
    moved = {"schema": "s", "sources": {"train": {"format": "csv", "paths": ["a.csv"],
                                                  "resolved": ["/e/a.csv"]}}}
    with pytest.raises(OtherJobsOutput) as e:
        check_same_job("out", {"published_by": moved}, ours)
    assert e.value.exit_code == 2
    many = {"schema": "t", "sources": {
        "train": {"format": "jsonl", "paths": ["x/1.jsonl", "x/2.jsonl", "x/3.jsonl"]},
        "test": {"format": "jsonl", "paths": ["x/4.jsonl"]}}}
    assert describe(many) == "1.jsonl, 2.jsonl (+2 more) (jsonl, schema t)"
