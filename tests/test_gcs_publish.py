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

from etl.manifest import SUCCESS, dataset_dir, verify
from etl.run_lock import RunInfo
from tests.gcs_emulator import GcsEmulator
from tests.gcs_proxy import GcsProxy
from tests.helpers import IDS_SCHEMA, ROOT, RUN, cli

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

    ok(cli("run", job, env=e))
    second = pointer(gcs_emulator, out)
    assert second["previous"] == first["version"] != second["version"]
    assert versions(gcs_emulator, out) == {first["version"], second["version"]}
    assert verify(f"{out}/{first['version']}")["records"] == 120  # a reader in it keeps going
    assert verify(dataset_dir(out))["records"] == 120
    # same job, same seed: the same shards (the run id does not leak into the data)
    a = json.loads(gcs_emulator.download(f"{out}/{first['version']}/manifest.json"))
    b = json.loads(gcs_emulator.download(f"{out}/{second['version']}/manifest.json"))
    assert a["splits"] == b["splits"]

    ok(cli("run", job, env=e))
    third = pointer(gcs_emulator, out)
    assert versions(gcs_emulator, out) == {second["version"], third["version"]}
    assert sorted(work(gcs_emulator, out)) == sorted(
        f"runs/{v}.json" for v in (second["version"], third["version"]))  # lock released
    assert verify(dataset_dir(out))["records"] == 120

    # an object we did not create, beside the versions or inside one: refused, nothing touched
    for foreign in (f"{out}/notes.txt", f"{out}/{third['version']}/extra.bin"):
        gcs_emulator.upload_bytes(b"mine", foreign)
        before = {u: generation(gcs_emulator, u) for u in gcs_emulator.list(out + "/")}
        proc = cli("run", job, env=e)
        assert proc.returncode == 2, proc.stderr
        name = foreign[len(out) + 1:]
        assert proc.stderr.strip().splitlines()[-1] == (
            f"error: refusing output {out}: it holds {name}, which no run of tfrecord-etl "
            "created; choose a new prefix (or remove it yourself)")
        assert {u: generation(gcs_emulator, u) for u in gcs_emulator.list(out + "/")} == before
        gcs_emulator.client().bucket(out[5:].split("/")[0]).blob(
            foreign.split("/", 3)[3]).delete()
