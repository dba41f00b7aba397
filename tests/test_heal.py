"""A rerun heals (issue 20): before a span is skipped as current, its published output is
checked the way `verify --quick` checks it (every listed file there with its manifest size,
nothing unlisted), or every byte with `--verify-full` / `verify: full`; a damaged output is
rebuilt and the history says why. And an empty input is refused unless the job allows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from etl.output.layout import SUCCESS
from etl.output.manifest import dataset_dir, verify
from etl.schedule import history
from tests.gcs_emulator import GcsEmulator
from tests.helpers import ROOT, RUN, cli, flip_byte, shas
from tests.jobs import SHARD, ids_job

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

def test_a_lost_shard_is_rebuilt_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    assert cli("run", job).returncode == 0
    good = shas(out)
    (out / SHARD).unlink()

    quick = cli("verify", str(out), "--quick")
    damage = f"{out / SHARD}: missing shard listed in the manifest"
    assert (quick.returncode, quick.stdout, quick.stderr) == (3, "", f"error: {damage}\n")
    dry = cli("run", job, "--dry-run")
    assert dry.returncode == 0
    assert f"would run   {out}  (the published output is damaged: {damage})" in dry.stdout

    again = cli("run", job, "--progress", "none")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"Wrote {out} in ")
    assert again.stderr == (f"WARNING the published output is damaged: {damage}; "
                            "rebuilding it\n")
    assert shas(out) == good  # the same data again: same seed, same inputs
    assert verify(str(out))["records"] == 300
    entry = history.read(str(tmp_path))[-1]
    assert (entry["status"], entry["rebuilt_reason"]) == (
        "ok", f"the published output is damaged: {damage}")
    # healed: the next run is a skip again
    skip = cli("run", job)
    assert (skip.returncode, skip.stdout) == (
        0, f"Skipped {out}: already published and current (inputs, schema and job "
           "unchanged)\n")


def test_a_truncated_shard_is_damage_a_users_file_is_not(tmp_path: Path) -> None:
    """A shard of another size is rebuilt. A file the user put inside: `verify` fails (the
    output is not only ours), but the data is whole, so the rerun still skips it, warns, and
    touches nothing (a rebuild would refuse to replace it: test_output_safety)."""
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    assert cli("run", job).returncode == 0
    good = shas(out)
    size = (out / SHARD).stat().st_size
    os.truncate(out / SHARD, size - 10)
    quick = cli("verify", str(out), "--quick")
    assert (quick.returncode, quick.stderr) == (
        3, f"error: {out / SHARD}: {size - 10} bytes on disk, manifest says {size}\n")
    assert cli("run", job).returncode == 0
    assert shas(out) == good

    (out / "notes.txt").write_text("mine")  # a user's file: the run refuses, never deletes it
    quick = cli("verify", str(out), "--quick")
    assert (quick.returncode, quick.stderr) == (
        3, f"error: {out}: file(s) not in the manifest: ['notes.txt']\n")
    skipped = cli("run", job)
    assert (skipped.returncode, skipped.stdout) == (
        0, f"Skipped {out}: already published and current (inputs, schema and job "
           "unchanged)\n")
    assert skipped.stderr == (f"WARNING {out}: file(s) not in the manifest: ['notes.txt'] (a "
                              "rebuild of this output would refuse to replace it)\n")
    assert (out / "notes.txt").read_text() == "mine" and shas(out) == good


def test_a_flipped_byte_needs_the_full_check(tmp_path: Path) -> None:
    """Same size, other bytes, and the modification time put back: the quick check cannot see
    it (the skip stays cheap: one stat per file); `verify`, `run --verify-full` and the job
    key `verify: full` do, and the run rebuilds it. (A flip that leaves its modification time
    is seen by the quick check: tests/test_damaged_output.py.)"""
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    assert cli("run", job).returncode == 0
    good = shas(out)
    flip_byte(out / SHARD, keep_mtime=True)
    assert cli("verify", str(out), "--quick").returncode == 0
    full = cli("verify", str(out))
    assert full.returncode == 3
    assert full.stderr.startswith(f"error: {out / SHARD}"), full.stderr
    skipped = cli("run", job)
    assert skipped.returncode == 0 and skipped.stdout.startswith(f"Skipped {out}: ")

    healed = cli("run", job, "--verify-full", "--progress", "none")
    assert healed.returncode == 0, healed.stderr
    assert healed.stderr == (f"WARNING the published output is damaged: {full.stderr[7:-1]}; "
                             "rebuilding it\n")
    assert shas(out) == good

    # the same from the job file, which does not change the run's identity
    job_full = ids_job(tmp_path / "job", str(out), verify="full")
    skip = cli("run", job_full)
    assert skip.returncode == 0 and skip.stdout.startswith(f"Skipped {out}: "), skip.stdout
    flip_byte(out / SHARD, 60, keep_mtime=True)
    assert cli("run", job_full, "--progress", "none").returncode == 0
    assert shas(out) == good
    assert history.read(str(tmp_path))[-1]["rebuilt_reason"].startswith(
        f"the published output is damaged: {out / SHARD}")


def test_verify_key_is_checked(tmp_path: Path) -> None:
    job = ids_job(tmp_path / "job", str(tmp_path / "out"), verify="always")
    bad = cli("run", job)
    assert (bad.returncode, bad.stderr) == (2, (
        f"error: {job}: verify must be 'quick' (sizes) or 'full' (every byte) before a span "
        "is skipped as current, got 'always'\n"))


def test_a_lost_shard_on_gcs_is_rebuilt(tmp_path: Path, gcs_emulator: GcsEmulator,
                                        gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env()
    job = ids_job(tmp_path / "job", out)
    run = [sys.executable, RUN, "run", job, "--progress", "none"]
    assert subprocess.run(run, cwd=ROOT, env=env, capture_output=True,
                          timeout=120).returncode == 0
    version = json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))["version"]
    bucket, key = f"{out}/{version}/{SHARD}"[5:].split("/", 1)
    gcs_emulator.client().bucket(bucket).blob(key).delete()
    again = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    damage = f"{out}/{version}/{SHARD}: missing shard listed in the manifest"
    assert f"WARNING the published output is damaged: {damage}; rebuilding it\n" in again.stderr
    new = json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))["version"]
    assert new != version
    assert verify(dataset_dir(out))["records"] == 300
    skip = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert skip.returncode == 0 and skip.stdout.startswith(f"Skipped {out}: "), skip.stdout


def test_an_empty_input_is_refused_unless_the_job_allows_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    src = tmp_path / "job" / "ids.csv"
    for content in ("", "id,a,b\n"):  # a 0-byte file, a header alone
        src.write_text(content)
        bad = cli("run", job, "--progress", "none")
        assert (bad.returncode, bad.stdout) == (2, "")
        line, log = bad.stderr.rstrip("\n").rsplit(" (full log: ", 1)
        assert line == (f"error: no records read from the input ({src}); nothing published. "
                        "If an empty span is expected, set allow_empty: true in the job file")
        assert os.path.isfile(log[:-1]) and len(bad.stderr.splitlines()) == 1
        assert not (out / SUCCESS).exists()
    job = ids_job(tmp_path / "job", str(out), allow_empty=True)
    src.write_text("")
    ok = cli("run", job, "--progress", "none")
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == (f"WARNING publishing 0 records: the inputs ({src}) hold none "
                         "(allow_empty: true)\n")
    assert verify(str(out))["records"] == 0
