"""Idempotent reruns by content (issue 12, point 2) and the run key (point 3).

What is pinned: a rerun of a published, current output is skipped in well under a second
(no lock, no pipeline: the output is not touched) with its reason; `force` rebuilds with a
new run id and the same shards; a changed input of the same size and mtime, a changed schema
or a changed job rebuilds; the manifest records every input's path, size and crc32c plus the
job hash, run key and run id; a second submit of a run whose lock is held exits 4 naming the
same run; on gs:// the fingerprints come from object metadata (nothing downloaded).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

import google_crc32c
import pytest

from cli.run import run_job
from etl.base.errors import LockedError
from etl.contract.schema import load_schema
from etl.job.config import job_from_dict, load_job
from etl.job.read_plan import plan_units
from etl.output.layout import MANIFEST, MARKER, work_dir
from etl.output.lock import LOCK, RunInfo, process_start
from etl.output.manifest import load_manifest, verify
from etl.schedule import fingerprint, idempotence
from etl.storage import fs
from tests.gcs_emulator import GcsEmulator
from tests.helpers import IDS_SCHEMA, cli

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

BEAM = ["--runner=FnApiRunner"]


def make_project(folder: Path, rows: int = 200, shards: int = 2) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(IDS_SCHEMA)
    (folder / "d.csv").write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n"
                                                     for i in range(rows)))
    write_job(folder, shards)
    return str(folder / "job.yaml")


def write_job(folder: Path, shards: int) -> None:
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"]},
        "output": "out/day", "shards": shards, "shuffle": {"seed": 7}}))


def shard_digests(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return {k: [s["sha256"] for s in v["shards"]] for k, v in manifest["splits"].items()}


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file below `path` with its size and mtime (ns): 'not touched' means equal."""
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_rerun_skipped_fast_force_rebuilds_same_shards(tmp_path: Path) -> None:
    job = load_job(make_project(tmp_path))
    assert idempotence.verdict(job) == idempotence.Verdict(False, "not published yet (no _SUCCESS)")
    first = run_job(job, BEAM)
    assert first.skipped == "" and first.splits == {"train": {"num_records": 200, "shards": 2}}
    out = tmp_path / "out" / "day"
    before = tree(out)

    again = run_job(job, BEAM)  # how fast a skip is: benchmarks.fixed_cost, not a timed test
    assert again.skipped == "already published and current (inputs, schema and job unchanged)"
    assert tree(out) == before  # nothing rewritten
    assert not (tmp_path / "out" / ".day.etl" / LOCK).exists()
    assert again.run_key == first.run_key and again.run_id != first.run_id
    assert again.splits == first.splits and again.manifest == load_manifest(str(out))
    assert idempotence.current_reason(job) == idempotence.SKIPPED

    forced = run_job(job, BEAM, force=True)
    assert forced.skipped == "" and forced.run_id not in (first.run_id, again.run_id)
    manifest = load_manifest(str(out))
    assert manifest["run_id"] == forced.run_id != first.manifest["run_id"]
    assert shard_digests(manifest) == shard_digests(first.manifest)
    assert verify(str(out))["records"] == 200


def test_manifest_records_inputs_fingerprints_job_and_run_key(tmp_path: Path) -> None:
    path = make_project(tmp_path)
    job = load_job(path)
    result = run_job(job, BEAM)
    m = load_manifest(str(tmp_path / "out" / "day"))
    data = (tmp_path / "d.csv").read_bytes()
    crc = google_crc32c.Checksum(data).digest().hex()
    assert m["input_files"] == [{"path": str(tmp_path / "d.csv"), "num_bytes": len(data),
                                 "fingerprint": crc, "fingerprint_kind": "crc32c"}]
    assert m["job_sha256"] == hashlib.sha256(json.dumps(
        {"job": json.loads(Path(path).read_text()), "span": ""}, sort_keys=True).encode()).hexdigest()
    assert m["schema_sha256"] == load_schema(str(tmp_path / "s.yaml")).sha256()
    assert re.fullmatch(r"[0-9a-f]{12}", m["run_key"]) and m["span"] is None
    assert re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{6}-" + m["run_key"], m["run_id"])
    assert (result.run_key, result.run_id) == (m["run_key"], m["run_id"])
    # the run key is what the run was made from: the same job and data elsewhere differ only
    # by path; the same files give the same key
    inputs = fingerprint.with_fingerprints(plan_units(job.sources, job.base_dir).inputs)
    assert idempotence.identity(job, m["schema_sha256"], inputs).run_key == m["run_key"]


def test_same_size_same_mtime_other_bytes_rebuilds(tmp_path: Path) -> None:
    job = load_job(make_project(tmp_path))
    first = run_job(job, BEAM)
    csv = tmp_path / "d.csv"
    st = csv.stat()
    text = csv.read_text()
    changed = text.replace("\n17,8.5,-17\n", "\n71,8.5,-71\n")  # same length, other bytes
    assert changed != text and len(changed) == len(text)
    csv.write_text(changed)
    os.utime(csv, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (csv.stat().st_size, csv.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)

    reason = idempotence.verdict(job).reason
    old = first.manifest["input_files"][0]["fingerprint"]
    new = google_crc32c.Checksum(changed.encode()).digest().hex()
    assert reason == f"input {csv} changed content (crc32c {old} -> {new})"
    rebuilt = run_job(job, BEAM)
    assert rebuilt.skipped == "" and rebuilt.run_key != first.run_key
    assert shard_digests(rebuilt.manifest) != shard_digests(first.manifest)
    assert rebuilt.manifest["input_files"][0]["fingerprint"] == new
    assert run_job(job, BEAM).skipped == idempotence.SKIPPED


def test_changed_schema_or_job_or_old_manifest_rebuilds(tmp_path: Path) -> None:
    path = make_project(tmp_path)
    run_job(load_job(path), BEAM)
    schema = tmp_path / "s.yaml"
    schema.write_text(IDS_SCHEMA.replace("source: [a, b]", "source: [b, a]"))
    job = load_job(path)
    assert idempotence.verdict(job).reason == "the schema changed"
    assert run_job(job, BEAM).skipped == ""
    assert run_job(job, BEAM).skipped == idempotence.SKIPPED

    write_job(tmp_path, shards=3)
    job = load_job(path)
    assert idempotence.verdict(job).reason == "the job file changed (or its span)"
    result = run_job(job, BEAM)
    assert result.skipped == "" and result.splits["train"]["shards"] == 3

    # a manifest written before fingerprints existed: rebuilt once, then current
    out = tmp_path / "out" / "day"
    m = load_manifest(str(out))
    for key in ("job_sha256", "inputs_sha256", "run_key", "run_id", "span"):
        del m[key]
    (out / MANIFEST).write_text(json.dumps(m))
    assert idempotence.verdict(job).reason == idempotence.OLD_MANIFEST
    assert run_job(job, BEAM).skipped == ""
    assert idempotence.verdict(job) == idempotence.Verdict(True, idempotence.SKIPPED)


def test_verdict_lists_input_changes_without_fingerprinting(tmp_path: Path, monkeypatch) -> None:
    path = make_project(tmp_path)
    run_job(load_job(path), BEAM)
    with (tmp_path / "d.csv").open("a") as fh:
        fh.write("200,100.0,-200\n")
    monkeypatch.setattr(fingerprint, "crc32c_of", lambda p: pytest.fail("read " + p))
    size = (tmp_path / "d.csv").stat().st_size
    assert idempotence.verdict(load_job(path)).reason == (
        f"input {tmp_path / 'd.csv'} changed size ({size - 15} -> {size} bytes)")


def _hold_lock(job_output: str, run_id: str) -> None:
    workdir = work_dir(job_output)
    os.makedirs(workdir, exist_ok=True)
    info = RunInfo(run_id, socket.gethostname(), os.getpid(), process_start(os.getpid()),
                   time.time())
    Path(workdir, LOCK).write_text(json.dumps(info.to_json()))


def test_same_run_submitted_twice_exits_4_naming_it(tmp_path: Path) -> None:
    path = make_project(tmp_path)
    job = load_job(path)
    inputs = fingerprint.with_fingerprints(plan_units(job.sources, job.base_dir).inputs)
    key = idempotence.identity(job, load_schema(job.schema_path).sha256(), inputs).run_key
    _hold_lock(job.output, f"20261121T000000-abcdef-{key}")  # this very run, still alive
    with pytest.raises(LockedError) as err:
        run_job(job, BEAM)
    assert err.value.exit_code == 4
    assert str(err.value).endswith(f"; it is the same run (run key {key}: same job, span and "
                                   "inputs) submitted again: let that one finish")
    _hold_lock(job.output, "20261121T000000-abcdef-0123456789ab")  # another run
    with pytest.raises(LockedError) as err:
        run_job(job, BEAM)
    assert "same run" not in str(err.value) and "is locked by run 20261121T000000" in str(err.value)
    # through the command line: exit 4, one line
    proc = cli("run", path)
    assert proc.returncode == 4, proc.stderr
    assert "is locked by run 20261121T000000-abcdef-0123456789ab" in proc.stderr


def test_cli_rerun_exits_0(tmp_path: Path) -> None:
    path = make_project(tmp_path, rows=50)
    assert cli("run", path).returncode == 0
    before = tree(tmp_path / "out" / "day")
    proc = cli("run", path)
    assert proc.returncode == 0, proc.stderr
    assert tree(tmp_path / "out" / "day") == before


def test_gcs_fingerprints_from_metadata_skip_and_history(tmp_path: Path, gcs_emulator: GcsEmulator,
                                                         gcs_bucket: str, monkeypatch) -> None:
    make_project(tmp_path)
    data = (tmp_path / "d.csv").read_bytes()
    gcs_emulator.upload_bytes(data, f"{gcs_bucket}/raw/d.csv")
    gcs_emulator.upload_bytes(IDS_SCHEMA.encode(), f"{gcs_bucket}/raw/s.yaml")
    doc = {"schema": f"{gcs_bucket}/raw/s.yaml", "output": f"{gcs_bucket}/out/day",
           "source": {"format": "csv", "paths": [f"{gcs_bucket}/raw/d.csv"]}, "shards": 2}
    job = job_from_dict(doc, path="job.yaml", base_dir=str(tmp_path))
    # metadata only: reading an object's bytes to fingerprint it would fail here
    real_open = fs.open_read
    monkeypatch.setattr(fingerprint.fs, "open_read", lambda p: pytest.fail(f"read {p}")
                        if p.startswith("gs://") else real_open(p))
    crc = google_crc32c.Checksum(data).digest().hex()
    assert fingerprint.fingerprints([f"{gcs_bucket}/raw/d.csv"]) == {
        f"{gcs_bucket}/raw/d.csv": {"kind": "crc32c", "value": crc}}
    monkeypatch.undo()

    first = run_job(job, BEAM)
    assert first.manifest["input_files"] == [{"path": f"{gcs_bucket}/raw/d.csv",
                                              "num_bytes": len(data), "fingerprint": crc,
                                              "fingerprint_kind": "crc32c"}]
    t0 = time.perf_counter()
    again = run_job(job, BEAM)
    assert again.skipped == idempotence.SKIPPED and time.perf_counter() - t0 < 1.0
    # other bytes, same size: the object's crc32c changes, the span is rebuilt
    gcs_emulator.upload_bytes(data.replace(b"\n17,8.5,-17\n", b"\n71,8.5,-71\n"),
                              f"{gcs_bucket}/raw/d.csv")
    assert idempotence.verdict(job).reason.startswith(f"input {gcs_bucket}/raw/d.csv changed content")
    rebuilt = run_job(job, BEAM)
    assert rebuilt.skipped == "" and rebuilt.run_key != first.run_key

    from etl.schedule import history  # noqa: PLC0415

    entries = history.read(f"{gcs_bucket}/out")
    assert [(e["status"], e["run_id"]) for e in entries] == [
        ("ok", first.run_id), ("skipped", again.run_id), ("ok", rebuilt.run_id)]
    assert sorted(gcs_emulator.list(f"{gcs_bucket}/out/_runs")) == sorted(
        f"{gcs_bucket}/out/_runs/{r.run_id}.json" for r in (first, again, rebuilt))


def test_current_output_with_a_dead_runs_leftovers_is_cleared_then_skipped(tmp_path: Path) -> None:
    job = load_job(make_project(tmp_path))
    run_job(job, BEAM)
    out = tmp_path / "out" / "day"
    before = tree(out)
    leftover = Path(work_dir(job.output)) / "run-20200101T000000-dead00-x"
    (leftover / "spill").mkdir(parents=True)
    (leftover / "spill" / "s0.spill").write_bytes(b"x" * 1000)
    dead = RunInfo("20200101T000000-dead00-x", socket.gethostname(), 2**22 + 17, None, time.time())
    (leftover / MARKER).write_text(json.dumps(dead.to_json()))
    result = run_job(job, BEAM)
    assert result.skipped == idempotence.SKIPPED
    assert not leftover.exists() and tree(out) == before
