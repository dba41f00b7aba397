"""Run history (issue 12, point 5): one entry per run beside the outputs.

What is pinned: where the history lives; the exact entries of an ok, a skipped and a failed
run (exit code, one-line error); a misconfigured first run creates nothing, a failure once a
history exists is recorded; 2 processes x 50 concurrent appends give 100 whole lines; broken
lines are left out; the table's exact text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.run import run_job
from etl.base.errors import BadInputError, ConfigError
from etl.job.config import load_job
from etl.schedule import history, idempotence
from tests.helpers import IDS_SCHEMA, ROOT

BEAM = ["--runner=FnApiRunner"]
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"


def project(folder: Path, rows: str, max_bad: float = 0.0) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(IDS_SCHEMA)
    (folder / "d.csv").write_text("id,a,b\n" + rows)
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"]},
        "output": "out/daily/day1", "shards": 1, "max_bad_fraction": max_bad}))
    return str(folder / "job.yaml")


def test_history_root() -> None:
    assert history.history_root("out/daily/2026-11-21") == os.path.abspath("out/daily")
    assert history.history_root("/x/out/daily/2026-11-21/") == "/x/out/daily"
    assert history.history_root("gs://b/out/daily/2026-11-21") == "gs://b/out/daily"
    assert history.history_root("gs://b/day") == "gs://b"


@pytest.mark.slow
def test_entries_of_ok_skipped_and_failed_runs(tmp_path: Path) -> None:
    good = "".join(f"{i},{i * 0.5},{-i}\n" for i in range(40))
    path = project(tmp_path, good)
    job = load_job(path)
    root = str(tmp_path / "out" / "daily")
    first = run_job(job, BEAM)
    second = run_job(job, BEAM)
    (tmp_path / "d.csv").write_text("id,a,b\n" + good + "x,1,2\n")  # one bad row, none allowed
    with pytest.raises(BadInputError) as err:
        run_job(job, BEAM)
    entries = history.read(root)
    assert len(entries) == 3 and all(list(e) == list(history.FIELDS) for e in entries)
    for e in entries:
        assert re.fullmatch(ISO, e["start"]) and re.fullmatch(ISO, e["end"])
        assert e["end"] >= e["start"]
        assert re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{6}-" + e["run_key"], e["run_id"])
    ok, skipped, failed = ({k: v for k, v in e.items() if k not in ("start", "end")}
                           for e in entries)
    common = {"span": None, "output": str(tmp_path / "out" / "daily" / "day1"),
              "runner": "FnApiRunner", "dataflow_job_id": None, "rebuilt_reason": None,
              "checks": None, "accepted": None}
    assert ok == {**common, "run_id": first.run_id, "run_key": first.run_key, "status": "ok",
                  "skipped_reason": None, "exit_code": 0, "error": None,
                  "counts": {"read": 40, "written": 40, "rejected": 0}}
    assert skipped == {**common, "run_id": second.run_id, "run_key": first.run_key,
                       "status": "skipped", "skipped_reason": idempotence.SKIPPED,
                       "exit_code": 0, "error": None,
                       "counts": {"read": 0, "written": 0, "rejected": 0}}
    assert failed["status"] == "failed" and failed["exit_code"] == 3 and failed["counts"] is None
    assert failed["run_key"] != first.run_key and failed["skipped_reason"] is None
    assert failed["error"] == str(err.value).splitlines()[0] and "\n" not in failed["error"]
    assert failed["error"].startswith("1 of 41 records rejected")
    # a config failure once the history exists: recorded with exit code 2
    (tmp_path / "d.csv").unlink()
    with pytest.raises(ConfigError):
        run_job(job, BEAM)
    last = history.read(root)[-1]
    assert (last["status"], last["exit_code"], last["run_id"]) == ("failed", 2, None)
    assert "matched no input files" in last["error"] or "no input files match" in last["error"]


@pytest.mark.slow
def test_a_misconfigured_first_run_creates_nothing(tmp_path: Path) -> None:
    path = project(tmp_path, "1,2,3\n")
    (tmp_path / "d.csv").unlink()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ConfigError):
        run_job(load_job(path), BEAM)
    assert sorted(os.listdir(tmp_path)) == before


APPENDER = """
import sys, time
from etl.schedule import history
who, root, at = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(max(0.0, at - time.time()))  # both start together
for i in range(50):
    history.append(root, history.entry(run_id=f"{who}-{i}", output="x" * 20000, status="ok"))
"""


@pytest.mark.slow
def test_concurrent_appends_keep_every_line_whole(tmp_path: Path) -> None:
    root = str(tmp_path / "h")
    at = str(time.time() + 2)
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, who, root, at], cwd=ROOT)
             for who in ("a", "b")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    lines = (tmp_path / "h" / history.RUNS_FILE).read_bytes().splitlines()
    assert len(lines) == 100
    parsed = [json.loads(line) for line in lines]
    assert sorted(e["run_id"] for e in parsed) == sorted(f"{w}-{i}" for w in "ab" for i in range(50))
    assert all(e["output"] == "x" * 20000 for e in parsed)


def test_read_leaves_out_broken_lines_and_sorts(tmp_path: Path, caplog) -> None:
    history.append(str(tmp_path), history.entry(run_id="2", start="2026-11-22T00:00:00.000+00:00"))
    with open(tmp_path / history.RUNS_FILE, "ab") as fh:
        fh.write(b'{"run_id": "cut sh\n[1, 2]\n')
    history.append(str(tmp_path), history.entry(run_id="1", start="2026-11-21T00:00:00.000+00:00"))
    assert [e["run_id"] for e in history.read(str(tmp_path))] == ["1", "2"]
    assert f"{tmp_path / history.RUNS_FILE}: 2 damaged lines skipped" in caplog.text
    assert history.read(str(tmp_path / "none")) == []


def test_format_table() -> None:
    entries = [
        history.entry(run_id="20261122T010000-aaaaaa-2026-11-21-0123456789ab", span="2026-11-21",
                      start="2026-11-22T01:00:00.000+00:00", end="2026-11-22T01:00:12.340+00:00",
                      status="ok", exit_code=0, output="out/daily/2026-11-21",
                      counts={"read": 1200, "written": 1190, "rejected": 10}),
        history.entry(run_id="20261122T020000-bbbbbb-2026-11-21-0123456789ab", span="2026-11-21",
                      start="2026-11-22T02:00:00.000+00:00", end="2026-11-22T02:00:00.050+00:00",
                      status="skipped", exit_code=0, skipped_reason=idempotence.SKIPPED,
                      output="out/daily/2026-11-21", counts={"read": 0, "written": 0, "rejected": 0}),
        history.entry(run_id=None, span="2026-11-22", start="2026-11-22T03:00:00.000+00:00",
                      end="2026-11-22T03:00:01.000+00:00", status="failed", exit_code=2,
                      error="job.yaml: source 'train' matched no input files (paths: "
                            "['raw/2026-11-22/*.csv'])", output="out/daily/2026-11-22"),
    ]
    run_id = "run id" + " " * 40
    assert history.format_table(entries) == "\n".join([
        f"span        status     written  rejected  seconds  {run_id}  output                note",
        "2026-11-21  ok           1,190        10     12.3  20261122T010000-aaaaaa-2026-11-21-"
        "0123456789ab  out/daily/2026-11-21",
        "2026-11-21  skipped          0         0      0.1  20261122T020000-bbbbbb-2026-11-21-"
        "0123456789ab  out/daily/2026-11-21  already published and current (inputs, schema and "
        "job unchanged)",
        "2026-11-22  failed(2)        -         -      1.0  " + " " * 46 + "  out/daily/2026-11-22  "
        "job.yaml: source 'train' matched no input files (paths: ['raw/2026-...",
    ])


def test_a_torn_last_line_loses_only_itself(tmp_path: Path, caplog) -> None:
    """A run killed mid-write leaves a last line without its newline: the next append starts
    on a fresh line, so it is not glued onto the torn one and lost with it."""
    root = str(tmp_path)
    old = history.entry(run_id="1", start="2026-11-21T00:00:00.000+00:00", status="ok")
    new = history.entry(run_id="3", start="2026-11-23T00:00:00.000+00:00", status="failed",
                        exit_code=3, error="bad")
    history.append(root, old)
    torn = json.dumps(history.entry(run_id="2", start="2026-11-22T00:00:00.000+00:00"))
    with open(tmp_path / history.RUNS_FILE, "ab") as fh:
        fh.write(torn[:40].encode())  # killed mid-write: no newline
    history.append(root, new)
    assert history.read_counted(root) == ([old, new], 1)
    assert history.read(root) == [old, new]
    assert f"{tmp_path / history.RUNS_FILE}: 1 damaged line skipped" in caplog.text
    assert (tmp_path / history.RUNS_FILE).read_bytes().splitlines()[1] == torn[:40].encode()

    # a whole entry whose newline alone is missing: both it and the next one are kept
    whole = history.entry(run_id="4", start="2026-11-24T00:00:00.000+00:00", status="ok")
    with open(tmp_path / history.RUNS_FILE, "ab") as fh:
        fh.write(json.dumps(whole).encode())
    last = history.entry(run_id="5", start="2026-11-25T00:00:00.000+00:00", status="ok")
    history.append(root, last)
    assert history.read_counted(root) == ([old, new, whole, last], 1)
    assert (tmp_path / history.RUNS_FILE).read_bytes().endswith(b"\n")


@pytest.mark.slow
def test_history_command_says_how_many_lines_it_skipped(tmp_path: Path) -> None:
    entry = history.entry(run_id="r1", span="2026-11-21", start="2026-11-21T00:00:00.000+00:00",
                          end="2026-11-21T00:00:01.000+00:00", status="ok", exit_code=0,
                          output="out/2026-11-21", counts={"read": 2, "written": 2, "rejected": 0})
    history.append(str(tmp_path), entry)
    with open(tmp_path / history.RUNS_FILE, "ab") as fh:
        fh.write(b'{"run_id": "r2", "sp')
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "run_pipeline.py"), "history",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == history.format_table([entry]) + "\n"
    assert proc.stderr == f"WARNING {tmp_path / history.RUNS_FILE}: 1 damaged line skipped\n"


def test_error_is_bounded_in_the_history(tmp_path: Path) -> None:
    history.append(str(tmp_path), history.entry(run_id="1", error="e" * 5000))
    history.append(str(tmp_path), history.entry(run_id="2", error="e" * 1000))
    assert [e["error"] for e in history.read(str(tmp_path))] == [
        "e" * 970 + "… (5000 bytes)", "e" * 1000]


@pytest.mark.slow
def test_gs_history_skips_a_damaged_object_and_keeps_the_others(gcs_bucket, gcs_emulator) -> None:
    """On gs:// each run writes its own object, whole or not at all: nothing can be glued.
    An object that is not JSON (written by hand, another tool) is skipped and counted."""
    root = f"{gcs_bucket}/out"
    old = history.entry(run_id="20261121T000000-aaaaaa-k", start="2026-11-21T00:00:00.000+00:00")
    gcs_emulator.upload_bytes(b'{"run_id": "cut', f"{root}/_runs/20261122T000000-bbbbbb-k.json")
    new = history.entry(run_id="20261123T000000-cccccc-k", start="2026-11-23T00:00:00.000+00:00",
                        error="e" * 1500)
    history.append(root, old)
    history.append(root, new)
    assert history.read_counted(root) == ([old, {**new, "error": "e" * 970 + "… (1500 bytes)"}], 1)
