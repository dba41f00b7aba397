"""Issue 20, unattended runs: four cases a scheduled job met, as a user meets them.

1. `report` / `verify` while another run publishes the same output: exit 4 ("another run is
   publishing OUT"), or a report of the new version when the publish replaced the output
   under the report; never a false "corrupt" (exit 3).
2. A run stopped (SIGSTOP) long enough that another run took its lock over: when it goes on
   it exits 4 naming the taker and publishes nothing (it used to exit 5 on its removed run
   directory, and the taker's warning read "0.0 h ago, more than the 0.000277778 h allowed").
3. An error line names the run's log only when the log is there to read.
4. `ulimit -n 20`: one line naming the limit, exit 5, instead of gRPC's "Channel closed
   prematurely"; a run that runs out of descriptors later says the same about its file.

Every run is a real `run_pipeline.py` subprocess; runs stop at named phases (etl/base/pause.py),
never at a moment picked by a sleep.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etl.base.errors import EXIT_LOCKED, EXIT_STORAGE, StorageError
from etl.base.worker_errors import fds_ran_out, original_error
from etl.output.manifest import verify
from etl.schedule import history
from tests.helpers import ROOT, RUN, cli, digest, leftovers
from tests.jobs import csv_job, paused_run, resume, write_rows


def work(out: str) -> Path:
    """The output's work dir (`.NAME.etl` beside it)."""
    return Path(os.path.dirname(out)) / f".{os.path.basename(out)}.etl"


def lock_holder(out: str) -> dict[str, object]:
    return json.loads((work(out) / "lock.json").read_text())


def published(tmp_path: Path, rows: int = 300) -> tuple[str, str]:
    """A job whose output holds `rows` records, published: (job file, output)."""
    out = str(tmp_path / "out")
    job = csv_job(tmp_path / "job", out, "ids.csv")
    write_rows(tmp_path / "job" / "ids.csv", rows)
    first = cli("run", job)
    assert first.returncode == 0, first.stderr
    return job, out


def report_lines(out: str, records: int) -> list[str]:
    return [f"report of {out}: {records} records in 1 split(s), 2 feature(s)",
            f"  wrote {out}/report.json", f"  wrote {out}/report.html"]


# ------------------------------------------------ 1. report and verify during a publish


def publishing_line(out: str, proc: subprocess.Popen[str], run_id: object) -> str:
    return (f"error: another run is publishing {out} (run {run_id}, pid {proc.pid}); try "
            "again when it has finished")


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["publish:start", "publish:aside", "publish:renamed",
                                   "publish:success"])
def test_report_and_verify_while_a_run_publishes_the_output(tmp_path: Path, phase: str) -> None:
    """Before the first rename readers see the old version whole, after `_SUCCESS` the new
    one; in between (old one aside, new one without `_SUCCESS`) exit 4 naming the run."""
    job, out = published(tmp_path, 300)
    write_rows(tmp_path / "job" / "ids.csv", 500)  # the next day's data: the rerun publishes it
    proc = paused_run(["run", job], phase, tmp_path / "pause")
    run_id = lock_holder(out)["run_id"]

    report, check = cli("report", out), cli("verify", out)
    if phase in ("publish:aside", "publish:renamed"):
        for done in (report, check):
            assert (done.returncode, done.stdout) == (EXIT_LOCKED, ""), done.stderr
            assert done.stderr.splitlines() == [publishing_line(out, proc, run_id)]
    else:
        records = 300 if phase == "publish:start" else 500
        assert (report.returncode, report.stderr) == (0, ""), report.stderr
        assert report.stdout.splitlines() == report_lines(out, records)
        assert (check.returncode, check.stderr) == (0, ""), check.stderr
        assert check.stdout.splitlines() == [f"OK {out}: {records} records train={records}"]

    err = resume(proc, phase, tmp_path / "pause")
    assert proc.returncode == 0, err
    assert verify(out)["records"] == 500  # published normally, a report beside it or not
    assert json.loads(Path(out, "manifest.json").read_text())["run_id"] == run_id
    assert leftovers(out) == []


@pytest.mark.slow
def test_a_report_whose_output_was_replaced_under_it_reads_the_new_version(
        tmp_path: Path) -> None:
    """The report read the old manifest, then a run published (same shard names, other
    records): it used to fail `split 'train' holds 500 records, its manifest says 300 (run
    verify)` with exit 3 on a sound output."""
    job, out = published(tmp_path, 300)
    report = paused_run(["report", out], "report:read", tmp_path / "pause")
    write_rows(tmp_path / "job" / "ids.csv", 500)
    rerun = cli("run", job)
    assert rerun.returncode == 0, rerun.stderr
    (tmp_path / "pause" / "report-read.go").write_text("")
    stdout, err = report.communicate(timeout=120)
    assert (report.returncode, err) == (0, "")
    assert stdout.splitlines() == report_lines(out, 500)
    doc = json.loads(Path(out, "report.json").read_text())
    manifest = json.loads(Path(out, "manifest.json").read_text())
    assert doc["run_id"] == manifest["run_id"] and doc["splits"]["train"]["num_records"] == 500
    assert cli("verify", out).returncode == 0


@pytest.mark.slow
def test_a_report_that_finds_the_output_half_published_exits_4(tmp_path: Path) -> None:
    job, out = published(tmp_path, 300)
    report = paused_run(["report", out], "report:read", tmp_path / "report-pause")
    write_rows(tmp_path / "job" / "ids.csv", 500)
    run = paused_run(["run", job], "publish:aside", tmp_path / "run-pause")
    run_id = lock_holder(out)["run_id"]
    err = resume(report, "report:read", tmp_path / "report-pause")
    assert report.returncode == EXIT_LOCKED, err
    assert err.splitlines() == [publishing_line(out, run, run_id)]
    err = resume(run, "publish:aside", tmp_path / "run-pause")
    assert run.returncode == 0, err
    assert verify(out)["records"] == 500 and leftovers(out) == []


@pytest.mark.slow
def test_an_incomplete_output_nobody_publishes_is_still_reported_as_such(
        tmp_path: Path) -> None:
    """No live run holds the lock: what is missing is missing (exit 2 / 3 as before)."""
    _, out = published(tmp_path, 300)
    os.remove(os.path.join(out, "_SUCCESS"))
    report, check = cli("report", out), cli("verify", out)
    assert report.returncode == 2 and report.stderr.splitlines() == [
        f"error: {out}: not a published output (no _SUCCESS and manifest.json in {out}); "
        "give the output directory of a run"]
    assert check.returncode == 3 and check.stderr.splitlines() == [
        f"error: {out}: no _SUCCESS marker: the output is incomplete or absent"]


# ----------------------------------------------------- 2. a lock taken over from a stopped run


def stopped_at(job: str, phase: str, pause: Path) -> tuple[subprocess.Popen[str], str]:
    """A run paused at `phase`, then stopped with SIGSTOP and let go of the pause: it goes on
    exactly when it gets SIGCONT. Returns it and its run id."""
    proc = paused_run(["run", job], phase, pause)
    out = json.loads(Path(job).read_text())["output"]
    run_id = str(lock_holder(out)["run_id"])
    proc.send_signal(signal.SIGSTOP)
    (pause / (phase.replace(":", "-") + ".go")).write_text("")
    return proc, run_id


def taken_over_line(out: str, taker: dict[str, object], reason: str) -> str:
    return (f"error: the lock on {out} was taken over by run {taker['run_id']} (pid "
            f"{taker['pid']}) while this run was stopped or busy ({reason}); nothing was "
            "published by this run")


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["write", "publish:start"])
def test_a_stopped_run_whose_lock_went_stale_exits_4_and_publishes_nothing(
        tmp_path: Path, phase: str) -> None:
    job, out = published(tmp_path, 300)
    write_rows(tmp_path / "job" / "ids.csv", 400)
    stopped, victim = stopped_at(job, phase, tmp_path / "pause")
    started = float(lock_holder(out)["started"])  # type: ignore[arg-type]
    while time.time() < started + 1.5:  # the lock ages past --lock-stale-after 1s
        time.sleep(0.05)
    taker = cli("run", job, "--lock-stale-after", "1s")
    assert taker.returncode == 0, taker.stderr
    warnings = [line for line in taker.stderr.splitlines() if line.startswith("WARNING")]
    assert re.fullmatch(
        rf"WARNING recovered the stale lock of run {victim} \(host {os.uname().nodename}, pid "
        rf"{stopped.pid}, started \S+\): it started \d+ s ago, more than the 1 s "
        r"--lock-stale-after allows", warnings[0]), warnings
    after = digest(out)
    note = json.loads((work(out) / "logs" / f"{victim}.lock-taken.json").read_text())

    stopped.send_signal(signal.SIGCONT)
    err = stopped.communicate(timeout=120)[1]
    assert stopped.returncode == EXIT_LOCKED, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    log = work(out) / "logs" / f"{victim}.log"
    assert re.fullmatch(re.escape(taken_over_line(out, note["by"], "@")).replace(
        "@", r"this run started \d+ s ago, more than the 1 s --lock-stale-after allows")
        + re.escape(f" (full log: {log})"), lines[0]), lines[0]
    assert digest(out) == after  # the taker's output, untouched
    manifest = json.loads(Path(out, "manifest.json").read_text())
    assert manifest["run_id"] == note["by"]["run_id"] and verify(out)["records"] == 400
    assert leftovers(out) == []
    [entry] = [e for e in history.read(str(tmp_path)) if e["run_id"] == victim]
    assert (entry["status"], entry["exit_code"]) == ("failed", EXIT_LOCKED)


@pytest.mark.slow
def test_a_stopped_run_whose_lock_was_broken_exits_4_at_publish(tmp_path: Path) -> None:
    """Stopped inside the publish, after its last lock check: the publish checks again."""
    job, out = published(tmp_path, 300)
    write_rows(tmp_path / "job" / "ids.csv", 400)
    stopped, victim = stopped_at(job, "publish:start", tmp_path / "pause")
    taker = cli("run", job, "--break-lock")
    assert taker.returncode == 0, taker.stderr
    after = digest(out)
    note = json.loads((work(out) / "logs" / f"{victim}.lock-taken.json").read_text())
    stopped.send_signal(signal.SIGCONT)
    err = stopped.communicate(timeout=120)[1]
    assert stopped.returncode == EXIT_LOCKED, err
    log = work(out) / "logs" / f"{victim}.log"
    assert err.splitlines() == [
        taken_over_line(out, note["by"], "--break-lock was given") + f" (full log: {log})"]
    assert digest(out) == after and leftovers(out) == []
    assert json.loads(Path(out, "manifest.json").read_text())["run_id"] == note["by"]["run_id"]


# ------------------------------------------------------------- 3. the log an error names


def gzip_job(folder: Path) -> str:
    """A job whose input breaks off inside the pipeline's read: exit 3 after the log opened."""
    data = gzip.compress(b"id,a,b\n" + b"".join(b"%d,%d,%d\n" % (i, i, i)
                                                for i in range(20000)))
    folder.mkdir(parents=True)
    (folder / "ids.csv.gz").write_bytes(data[: len(data) // 2])
    return csv_job(folder, "../out", "ids.csv.gz")


@pytest.mark.slow
def test_an_error_names_the_run_log_only_when_it_is_there(tmp_path: Path) -> None:
    job = gzip_job(tmp_path / "job")
    out = str(tmp_path / "out")
    broken = (f"error: {tmp_path / 'job' / 'ids.csv.gz'}: the compressed stream breaks off near "
              "line 1 (uncompressed byte 0): Compressed file ended before the end-of-stream "
              "marker was reached; the records after it cannot be read (is the file "
              "truncated?)")
    first = cli("run", job)
    assert first.returncode == 3
    [line] = first.stderr.splitlines()
    logs = work(out) / "logs"
    [log] = os.listdir(logs)
    assert line == f"{broken} (full log: {logs / log})"
    assert "FAILED:" in (logs / log).read_text()

    # ten runs whose ids sort later (a host whose clock is ahead shares the output): the
    # failed run's own log used to be pruned before its error line was printed; the current
    # run's files are always kept now (etl.output.guard.prune_logs), so the line names it,
    # and the first run's log is the one pruned
    ahead = [f"20990101T0000{i:02d}-a{i:05x}-ids-0123456789ab.log" for i in range(10)]
    for name in ahead:
        (logs / name).write_text("a later run\n")
    second = cli("run", job)
    assert second.returncode == 3
    [line] = second.stderr.splitlines()
    [own] = set(os.listdir(logs)) - set(ahead)
    assert line == f"{broken} (full log: {logs / own})"
    assert own != log and "FAILED:" in (logs / own).read_text()
    assert sorted(os.listdir(logs)) == sorted([*ahead, own])


# ----------------------------------------------------------- 4. too few file descriptors


def limited(limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`run_pipeline.py ARGS` under `ulimit -n LIMIT` (soft and hard), as a user's shell."""
    return subprocess.run(["bash", "-c", f'ulimit -n {limit} && exec "$0" "$@"', sys.executable,
                           RUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


REFUSED = ("error: too many open files: the limit is 20 (ulimit -n), below the 64 a run "
           "needs; raise it (e.g. ulimit -n 4096) and run again")


@pytest.mark.slow
def test_ulimit_20_is_one_line_and_exit_5_before_any_work(tmp_path: Path) -> None:
    demo = limited(20, "demo", "--output", str(tmp_path / "demo"))
    assert (demo.returncode, demo.stderr.splitlines(), demo.stdout) == (EXIT_STORAGE,
                                                                        [REFUSED], "")
    out = str(tmp_path / "csv" / "out")
    job = csv_job(tmp_path / "csv", out, "ids.csv")
    write_rows(tmp_path / "csv" / "ids.csv", 200)
    run = limited(20, "run", job)
    assert (run.returncode, run.stderr.splitlines(), run.stdout) == (EXIT_STORAGE, [REFUSED], "")
    assert sorted(os.listdir(tmp_path)) == ["csv"]  # no demo output, nothing beside it
    assert sorted(os.listdir(tmp_path / "csv")) == ["ids.csv", "job.yaml", "schema.yaml"]
    dry = limited(20, "run", job, "--dry-run")  # launches nothing: not refused
    assert dry.returncode == 0, dry.stderr


@pytest.mark.slow
def test_running_out_of_descriptors_mid_run_names_the_limit(tmp_path: Path) -> None:
    """150 inputs: a shard's merge opens each input's spill file at once, more than 64."""
    folder = tmp_path / "job"
    folder.mkdir()
    for f in range(150):
        (folder / f"p{f:03d}.csv").write_text(
            "id,a,b\n" + "".join(f"{f * 100 + i},{i},{i}\n" for i in range(20)))
    out = str(tmp_path / "out")
    job = csv_job(folder, out, "p*.csv", spill_in_memory=0)
    done = limited(64, "run", job, "--direct_num_workers=1")
    assert done.returncode == EXIT_STORAGE, done.stderr
    [line] = done.stderr.splitlines()
    w = re.escape(str(work(out)))
    assert re.fullmatch(
        rf"error: {w}/run-[^/]+/spill/train/[0-9a-f]+\.spill: reading or writing failed: too "
        r"many open files: the limit is 64 \(ulimit -n\); raise it \(e\.g\. ulimit -n 4096\) "
        rf"and run again \[errno EMFILE\] \(full log: {w}/logs/\S+\.log\)", line), line
    assert not os.path.exists(out) and leftovers(out) == []


def test_grpc_out_of_descriptors_is_named_from_its_words_or_the_log(tmp_path: Path) -> None:
    """Beam says only "Channel closed prematurely"; gRPC's own words, in the error or in the
    run's log (its stderr), say why."""
    advice = "the limit is {} (ulimit -n)".format(
        __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[0])
    grpc = RuntimeError('details = "failed to connect to all addresses; last error: INTERNAL: '
                        'ipv6:%5B::1%5D:45449: socket: Too many open files"')
    err = original_error(grpc)
    assert isinstance(err, StorageError) and str(err).startswith(
        f"too many open files: {advice}; raise it (e.g. ulimit -n ")
    log = tmp_path / "run.log"
    log.write_text("E1125 posix_interface_posix.cc:168] socket(10, 1, 0) returned -1 with error:"
                   " |Too many open files|.\nRuntimeError: Channel closed prematurely.\n")
    assert fds_ran_out(str(log)) and not fds_ran_out(str(tmp_path / "absent.log"))
    from cli.run import user_error  # noqa: PLC0415 - Beam: only this test needs it

    closed = RuntimeError("Traceback ...\nRuntimeError: Channel closed prematurely.")
    assert original_error(closed) is None
    named = user_error(closed, str(log))
    assert isinstance(named, StorageError) and str(named) == (
        f"{err} (full log: {log})")
    log.write_text("nothing about descriptors\n")
    assert str(user_error(closed, str(log))) == (
        f"unexpected error: RuntimeError: Channel closed prematurely. (full log: {log})")
