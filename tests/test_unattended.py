"""Unattended runs: inputs that change while they are read, outputs damaged after they
were published, and the one-line refusals a scheduled job needs (issue 20).

Inputs are pinned (etl/schedule/input_pin.py): a run paused while reading (ETL_PAUSE_AT=read) has
its input truncated, appended to, rewritten with the same size and the old mtime, or its
gs:// object overwritten; it must fail with exit 2 naming the file, publish nothing, and the
next run must publish the final bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import google_crc32c
import pytest

from etl.output.manifest import verify
from etl.schedule import history
from tests.gcs_emulator import GcsEmulator
from tests.helpers import cli, digest, leftovers
from tests.jobs import csv_job, paused_run, resume, write_rows

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: data.index(b"\n", len(data) // 2) + 1])  # whole lines


def _append(p: Path) -> None:
    with p.open("a") as fh:
        fh.write("".join(f"{i},{i * 0.5},{-i}\n" for i in range(9000, 9100)))


def _replace_same_size(p: Path) -> None:
    st = p.stat()
    data = p.read_bytes()
    p.write_bytes(data.replace(b",-1\n", b",-9\n", 1))  # same size, other bytes
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime put back
    assert p.stat().st_size == st.st_size


@pytest.mark.parametrize("change", [_truncate, _append, _replace_same_size],
                         ids=["truncate", "append", "replace-same-size"])
def test_an_input_changed_while_read_fails_and_the_next_run_reads_it_again(
        tmp_path: Path, change) -> None:
    out = str(tmp_path / "out")
    src = tmp_path / "job" / "ids.csv"
    job = csv_job(tmp_path / "job", out, "ids.csv")
    write_rows(src, 300)
    assert cli("run", job).returncode == 0
    before = digest(out)
    write_rows(src, 4000)  # today's file: the run reads it, an upstream writer touches it
    proc = paused_run(["run", job], "read", tmp_path / "pause")
    change(src)
    err = resume(proc, "read", tmp_path / "pause")
    assert proc.returncode == 2, err
    assert err.startswith(f"error: input {src} changed while being read ("), err
    assert "nothing was published: the next run reads it again" in err
    assert len(err.splitlines()) == 1
    assert digest(out) == before and leftovers(out) == []
    assert history.read(str(tmp_path))[-1]["exit_code"] == 2

    again = cli("run", job)  # the final bytes, published
    assert again.returncode == 0, again.stderr
    lines = src.read_bytes().count(b"\n") - 1
    assert verify(out)["records"] == lines
    manifest = json.loads(Path(out, "manifest.json").read_text())
    assert manifest["input_files"][0]["fingerprint"] == google_crc32c.Checksum(
        src.read_bytes()).digest().hex()


def test_a_gcs_input_overwritten_while_read_fails(tmp_path: Path, gcs_emulator: GcsEmulator,
                                                  gcs_bucket: str) -> None:
    src = f"{gcs_bucket}/in/ids.csv"
    gcs_emulator.upload_bytes(b"id,a,b\n" + b"".join(b"%d,%d,%d\n" % (i, i, i)
                                                     for i in range(500)), src)
    out = str(tmp_path / "out")
    job = csv_job(tmp_path / "job", out, src)
    proc = paused_run(["run", job], "read", tmp_path / "pause", dict(os.environ))
    gcs_emulator.upload_bytes(b"id,a,b\n" + b"".join(b"%d,%d,%d\n" % (i, i, i)
                                                     for i in range(400)), src)
    err = resume(proc, "read", tmp_path / "pause")
    assert proc.returncode == 2, err
    assert err.startswith(f"error: input {src} changed while being read (generation "), err
    assert not os.path.exists(out)
    again = cli("run", job)
    assert again.returncode == 0, again.stderr
    assert verify(out)["records"] == 400
