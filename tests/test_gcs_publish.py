"""Safe publish on gs:// outputs, as a user meets it (`run_pipeline.py run` in subprocesses)
against the real GCS emulator behind a loopback proxy (tests/gcs_proxy.py), which adds the
generation preconditions the emulator ignores, 503s, and a hold at a chosen request.

What is pinned: versions side by side with `_SUCCESS` the one pointer; the previous version
kept, older ones removed, objects we did not create never touched (the run refuses); 503s
retried, a dead store failing in bounded time with exit 5 and nothing changed; a run killed
half way through its publish leaves the old output named and whole, and the next run removes
what it left; two runs at once publish exactly one version; the gs:// lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from etl.output.layout import SUCCESS
from etl.output.lock import RunInfo
from etl.output.manifest import dataset_dir, verify
from tests.gcs_emulator import GcsEmulator
from tests.gcs_proxy import GcsProxy
from tests.helpers import IDS_SCHEMA, ROOT, RUN, cli

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

RETRY = "3"  # ETL_STORAGE_RETRY_SECONDS in these runs: a dead store fails within seconds


@pytest.fixture
def proxy(gcs_emulator: GcsEmulator) -> Iterator[GcsProxy]:
    with GcsProxy(gcs_emulator.endpoint) as p:
        yield p


@pytest.fixture
def out(gcs_bucket: str) -> str:
    return f"{gcs_bucket}/data/out"


def env(emulator: GcsEmulator, proxy: GcsProxy, retry: str = "30") -> dict[str, str]:
    e = emulator.env(endpoint=proxy.url)
    e["ETL_STORAGE_RETRY_SECONDS"] = retry
    return e


def make_job(folder: Any, output: str, rows: int = 120, seed: int = 3) -> str:
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "schema.yaml"), "w") as fh:
        fh.write(IDS_SCHEMA)
    with open(os.path.join(folder, "ids.csv"), "w") as fh:
        fh.write("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n" for i in range(rows)))
    path = os.path.join(folder, "job.yaml")
    with open(path, "w") as fh:
        json.dump({"schema": "schema.yaml", "output": output, "shards": 3,
                   "shuffle": {"seed": seed},
                   "sources": {"train": {"format": "csv", "paths": ["ids.csv"]}}}, fh)
    return path


def start(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, RUN, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pointer(emulator: GcsEmulator, out: str) -> dict[str, Any]:
    return json.loads(emulator.download(f"{out}/{SUCCESS}"))


def generation(emulator: GcsEmulator, url: str) -> int:
    bucket, _, name = url[len("gs://"):].partition("/")
    blob = emulator.client().bucket(bucket).get_blob(name)
    return 0 if blob is None else int(blob.generation)


def versions(emulator: GcsEmulator, out: str) -> set[str]:
    """The version folders under OUT/ (every object's first path part, but the pointer)."""
    base = out + "/"
    return {u[len(base):].split("/", 1)[0] for u in emulator.list(base)} - {SUCCESS}


def work(emulator: GcsEmulator, out: str) -> list[str]:
    """What the work prefix beside OUT holds, relative to it."""
    parent, name = out.rsplit("/", 1)
    base = f"{parent}/.{name}.etl/"
    return [u[len(base):] for u in emulator.list(base)]


def ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------ publish


def test_versions_previous_kept_older_removed_foreign_refused(tmp_path, gcs_emulator, proxy,
                                                              out) -> None:
    job = make_job(tmp_path / "job", out)
    e = env(gcs_emulator, proxy)
    ok(cli("run", job, env=e))
    first = pointer(gcs_emulator, out)
    assert first["manifest"] == f"{first['version']}/manifest.json" and first["previous"] is None
    assert dataset_dir(out) == f"{out}/{first['version']}"
    report = verify(dataset_dir(out))
    assert report["records"] == 120

    ok(cli("run", job, "--force", env=e))  # unchanged job: a rebuild only when forced
    second = pointer(gcs_emulator, out)
    assert second["previous"] == first["version"] != second["version"]
    assert versions(gcs_emulator, out) == {first["version"], second["version"]}
    assert verify(f"{out}/{first['version']}")["records"] == 120  # a reader in it keeps going
    assert verify(dataset_dir(out))["records"] == 120
    # same job, same seed: the same shards (the run id does not leak into the data)
    a = json.loads(gcs_emulator.download(f"{out}/{first['version']}/manifest.json"))
    b = json.loads(gcs_emulator.download(f"{out}/{second['version']}/manifest.json"))
    assert a["splits"] == b["splits"]

    ok(cli("run", job, "--force", env=e))
    third = pointer(gcs_emulator, out)
    assert versions(gcs_emulator, out) == {second["version"], third["version"]}
    assert sorted(work(gcs_emulator, out)) == sorted(
        f"runs/{v}.json" for v in (second["version"], third["version"]))  # lock released
    assert verify(dataset_dir(out))["records"] == 120

    # an object we did not create, beside the versions or inside one: refused, nothing touched
    for foreign in (f"{out}/notes.txt", f"{out}/{third['version']}/extra.bin"):
        gcs_emulator.upload_bytes(b"mine", foreign)
        before = {u: generation(gcs_emulator, u) for u in gcs_emulator.list(out + "/")}
        proc = cli("run", job, "--force", env=e)
        assert proc.returncode == 2, proc.stderr
        name = foreign[len(out) + 1:]
        assert proc.stderr.strip().splitlines()[-1] == (
            f"error: refusing output {out}: it holds {name}, which no run of tfrecord-etl "
            "created; choose a new prefix (or remove it yourself)")
        assert {u: generation(gcs_emulator, u) for u in gcs_emulator.list(out + "/")} == before
        gcs_emulator.client().bucket(out[5:].split("/")[0]).blob(
            foreign.split("/", 3)[3]).delete()


# ------------------------------------------------------------------------------ 503s


def test_503s_are_retried_and_a_dead_store_fails_in_bounded_time(tmp_path, gcs_emulator, proxy,
                                                                 out) -> None:
    job = make_job(tmp_path / "job", out)
    proxy.fail_next(4)  # the run's first four requests
    ok(cli("run", job, env=env(gcs_emulator, proxy)))
    assert proxy.failed == 4
    assert verify(dataset_dir(out))["records"] == 120
    before = {u: generation(gcs_emulator, u) for u in gcs_emulator.list(out + "/")}
    first = pointer(gcs_emulator, out)

    proxy.fail_all()
    t0 = time.monotonic()
    proc = cli("run", job, env=env(gcs_emulator, proxy, retry=RETRY), timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 5, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # the first storage call (the skip check's read of the pointer) is the one that gives up
    assert len(lines) == 1 and lines[0].startswith("error: cannot "), lines
    assert f"the store kept failing for {RETRY} s (HTTP 503" in lines[0], lines
    assert "ETL_STORAGE_RETRY_SECONDS" in lines[0]
    assert took < 25, took  # 3 s of retries + start-up; not the library's 120 s per call
    proxy.heal()
    assert pointer(gcs_emulator, out) == first
    assert {u: generation(gcs_emulator, u) for u in gcs_emulator.list(out + "/")} == before
    assert verify(dataset_dir(out))["records"] == 120


# ------------------------------------------------------------------------ interruptions


def test_run_killed_mid_publish_leaves_old_output_and_next_run_cleans(tmp_path, gcs_emulator,
                                                                     proxy, out) -> None:
    job = make_job(tmp_path / "job", out)
    e = env(gcs_emulator, proxy)
    ok(cli("run", job, env=e))
    old = pointer(gcs_emulator, out)
    old_gen = generation(gcs_emulator, f"{out}/{SUCCESS}")
    bucket, _, key = out[len("gs://"):].partition("/")
    # the third object copied into the new version: the run is killed while it waits there
    proxy.hold(f"rewriteTo/b/{bucket}/o/{key}/", nth=3)
    victim = start("run", job, "--force", env=e)
    assert proxy.held.wait(60), victim.communicate()
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    proxy.release()
    left = versions(gcs_emulator, out) - {old["version"]}
    assert len(left) == 1  # the killed run's partial version: two objects, no _SUCCESS in it
    (dead,) = left
    assert len(gcs_emulator.list(f"{out}/{dead}/")) in (2, 3)
    assert generation(gcs_emulator, f"{out}/{SUCCESS}") == old_gen
    assert dataset_dir(out) == f"{out}/{old['version']}"
    assert verify(dataset_dir(out))["records"] == 120
    assert "lock.json" in work(gcs_emulator, out) and f"runs/{dead}.json" in work(gcs_emulator,
                                                                                     out)

    proc = cli("run", job, "--force", env=e)
    ok(proc)
    assert f"recovered the stale lock of run {dead}" in proc.stderr
    assert f"removed version {dead} of {out}" in proc.stderr
    new = pointer(gcs_emulator, out)
    assert new["previous"] == old["version"]
    assert versions(gcs_emulator, out) == {old["version"], new["version"]}
    assert sorted(work(gcs_emulator, out)) == sorted(
        f"runs/{v}.json" for v in (old["version"], new["version"]))
    assert verify(dataset_dir(out))["records"] == 120


def test_two_runs_at_once_publish_exactly_one_version(tmp_path, gcs_emulator, proxy,
                                                      out) -> None:
    e = env(gcs_emulator, proxy)
    job_a = make_job(tmp_path / "a", out, seed=1)
    job_b = make_job(tmp_path / "b", out, seed=2)  # other shards: a mix would show
    bucket, _, key = out[len("gs://"):].partition("/")
    hold = f"rewriteTo/b/{bucket}/o/{key}/"

    # 1. B starts while A holds the lock (A stopped at its first copy): B exits 4 naming A
    proxy.hold(hold)
    a = start("run", job_a, env=e)
    assert proxy.held.wait(60), a.communicate()
    b = cli("run", job_b, env=e)
    assert b.returncode == 4, b.stderr
    assert "is locked by run " in b.stderr and "--break-lock" in b.stderr
    proxy.release()
    assert a.wait(60) == 0, a.communicate()
    first = pointer(gcs_emulator, out)
    assert versions(gcs_emulator, out) == {first["version"]}
    a_shards = json.loads(gcs_emulator.download(f"{out}/{first['manifest']}"))["splits"]

    # 2. both past the lock (B breaks A's): the pointer admits one; A publishes nothing
    proxy.hold(hold)
    a = start("run", job_a, "--force", env=e)  # A's output is current: rebuild it
    assert proxy.held.wait(60), a.communicate()
    ok(cli("run", job_b, "--break-lock", "--force", env=e))  # another job's inputs: --force
    proxy.release()
    _, err = a.communicate(timeout=60)
    assert a.returncode == 4, err
    assert f"error: {out} was published by another run while this one was working" in err
    won = pointer(gcs_emulator, out)
    assert won["previous"] == first["version"]
    assert versions(gcs_emulator, out) == {first["version"], won["version"]}  # A's removed
    assert verify(dataset_dir(out))["records"] == 120
    b_shards = json.loads(gcs_emulator.download(f"{out}/{won['manifest']}"))["splits"]
    assert b_shards != a_shards  # B's data, not a mix: verify checked every sha256 above
    assert proxy.refused >= 1  # the loser's pointer write was refused (412)


# ---------------------------------------------------------------------------------- lock


def test_gcs_lock_names_holder_stale_after_and_break_lock_take_over(tmp_path, gcs_emulator,
                                                                    proxy, out) -> None:
    job = make_job(tmp_path / "job", out)
    e = env(gcs_emulator, proxy)
    lock = f"{out.rsplit('/', 1)[0]}/.out.etl/lock.json"
    holder = RunInfo("20260101T000000-other001", "another-host", 4242, None,
                     time.time() - 7200)
    gcs_emulator.upload_bytes(json.dumps(holder.to_json()).encode(), lock)
    proc = cli("run", job, env=e)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: output {out} is locked by {holder.describe()}; wait for it to finish, or if "
        f"that run is no longer running rerun with --break-lock (lock file: {lock})")
    proc = cli("run", job, "--lock-stale-after", "1h", env=e)
    ok(proc)
    assert f"recovered the stale lock of {holder.describe()}: it started 2.0 h ago" in proc.stderr

    fresh = RunInfo("20260101T000000-other002", "another-host", 4242, None, time.time())
    gcs_emulator.upload_bytes(json.dumps(fresh.to_json()).encode(), lock)
    # the output is current now: only a forced rebuild needs the lock
    assert cli("run", job, "--force", "--lock-stale-after", "1h", env=e).returncode == 4
    proc = cli("run", job, "--force", "--break-lock", env=e)
    ok(proc)
    assert "--break-lock was given" in proc.stderr
    assert "lock.json" not in work(gcs_emulator, out)
    assert verify(dataset_dir(out))["records"] == 120
