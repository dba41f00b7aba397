"""Every leftover is ours to clean, and only ours (issue 28, G21).

A run deletes only files whose names it made, in directories it made: its log pruning
leaves other programs' logs and a symlinked logs folder alone; a run killed with SIGKILL at
any phase leaves nothing the next run does not remove (its scratch files included, wherever
they are); a signal during start-up gives 130/143 and one line; a worker pool that goes on
writing after its launcher stopped leaves nothing behind either.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.worker_pool import portable_flags, worker_pool
from tests.helpers import IDS_SCHEMA, ROOT, RUN, wait_paused

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

RUN_IDS = [f"20261120T0000{i:02d}-abc{i:03d}-ids-0123456789ab" for i in range(12)]


def write_job(folder: Path, rows: int = 300, **extra: object) -> str:
    """A small CSV job converting into `folder/out`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    (folder / "ids.csv").write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n"
                                                         for i in range(rows)))
    job = folder / "job.yaml"
    job.write_text(json.dumps({"schema": "schema.yaml", "output": str(folder / "out"),
                               "shards": 2, "shuffle": {"seed": 5},
                               "sources": {"train": {"format": "csv", "paths": ["ids.csv"]}},
                               **extra}))
    return str(job)


def run(job: str, *args: str, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, RUN, "run", job, "--progress", "none", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


# ------------------------------------------------------------------------------- log pruning


def test_log_pruning_deletes_only_its_own_logs(tmp_path: Path) -> None:
    """Other programs' `*.log` files in the logs folder are neither deleted nor counted as
    runs (they used to be, and `app1.log`/`app10.log` sorted after every run id: the new
    run's own log was deleted); the newest 10 runs' files are kept, this run's among them."""
    job = write_job(tmp_path)
    logs = tmp_path / ".out.etl" / "logs"
    logs.mkdir(parents=True)
    foreign = ["app1.log", "app10.log", "zz.log", "notes.txt", "20261120T000000.log"]
    for name in foreign:
        (logs / name).write_text("not ours\n")
    for run_id in RUN_IDS:
        (logs / f"{run_id}.log").write_text("old run\n")
    (logs / f"{RUN_IDS[0]}.rejected.jsonl").write_text("{}\n")
    (logs / f"{RUN_IDS[11]}.rejected.jsonl").write_text("{}\n")

    proc = run(job)
    assert proc.returncode == 0, proc.stderr
    names = sorted(os.listdir(logs))
    new = [n for n in names if n.endswith(".log") and n not in foreign
           and n.removesuffix(".log") not in RUN_IDS]
    assert len(new) == 1  # this run's log
    assert names == sorted([*foreign, *new, f"{RUN_IDS[11]}.rejected.jsonl",
                            *(f"{r}.log" for r in RUN_IDS[3:])])
    for name in foreign:
        assert (logs / name).read_text() == "not ours\n"


def test_log_pruning_never_follows_a_symlinked_logs_folder(tmp_path: Path) -> None:
    """A `.out.etl/logs` that is a symbolic link (to another program's log folder) is not
    pruned at all: one warning, every file there survives, even names shaped like ours."""
    job = write_job(tmp_path)
    elsewhere = tmp_path / "app-logs"
    elsewhere.mkdir()
    for name in ("app1.log", "app10.log", *(f"{r}.log" for r in RUN_IDS)):
        (elsewhere / name).write_text("theirs\n")
    before = sorted(os.listdir(elsewhere))
    work = tmp_path / ".out.etl"
    work.mkdir()
    (work / "logs").symlink_to(elsewhere)

    proc = run(job)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "pruning" in line] == [
        f"WARNING not pruning old run logs in {work / 'logs'}: it is a symbolic link or not "
        "a directory; only a folder this project made is "
        "pruned"]
    after = sorted(os.listdir(elsewhere))
    assert set(before) <= set(after)  # nothing deleted (the run's own log went in there)
    assert len(after) == len(before) + 1
    assert all((elsewhere / n).read_text() == "theirs\n" for n in before)


# ------------------------------------------------------------------ kill -9, then the next run

KILL_PHASES = ["run-dir", "read", "shuffle", "write", "write:shard", "finalize",
               "publish:start", "publish:aside", "publish:renamed", "publish:success",
               "clean-up"]


def everything(*roots: Path) -> list[str]:
    """Every file, folder and link below `roots` (not following links), as relative paths."""
    found = []
    for root in roots:
        for folder, dirs, names in os.walk(root):
            for name in dirs + names:
                found.append(str(Path(folder, name).relative_to(root.parent)))
    return sorted(found)


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_kill_9_at_each_phase_leaves_nothing_after_the_next_run(tmp_path: Path,
                                                                 fmt: str) -> None:
    """SIGKILL at every phase of a run (the pause hook stops it there), then a plain rerun:
    nothing of the killed run is left anywhere, neither in the temp directory (where the
    ArrayRecord scratch used to stay for good, `$TMPDIR/etl-array-record-*`) nor beside the
    output, and the output is whole."""
    pytest.importorskip("array_record") if fmt == "array_record" else None
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "TF_CPP_MIN_LOG_LEVEL": "3"}
    job = write_job(tmp_path / "job", rows=3000, format=fmt, output=str(tmp_path / "data" / "out"))
    first = run(job, env=env)
    assert first.returncode == 0, first.stderr
    clean_temp, clean_data = everything(temp), everything(tmp_path / "data")
    assert clean_temp == []
    for phase in KILL_PHASES:
        pause_dir = tmp_path / f"pause-{phase.replace(':', '-')}"
        pause_dir.mkdir()
        proc = subprocess.Popen(
            [sys.executable, RUN, "run", job, "--force", "--progress", "none"], cwd=ROOT,
            env={**env, "ETL_PAUSE_AT": phase, "ETL_PAUSE_DIR": str(pause_dir)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_paused(proc, pause_dir, phase)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        killed_left = everything(temp, tmp_path / "data")
        assert any(".out.etl/run-" in p for p in killed_left), (phase, killed_left)

        rerun = run(job, env=env)
        assert rerun.returncode == 0, (phase, rerun.stderr)
        assert everything(temp) == [], phase
        data = [p for p in everything(tmp_path / "data")
                if not p.startswith("data/.out.etl/logs/")]
        assert data == [p for p in clean_data if not p.startswith("data/.out.etl/logs/")], phase
        check = subprocess.run([sys.executable, RUN, "verify", str(tmp_path / "data" / "out")],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, (phase, check.stderr)


def test_the_next_run_removes_a_dead_runs_scratch_in_the_temp_dir(tmp_path: Path) -> None:
    """Scratch a remote run keeps in the temp directory is named by its process
    (etl.storage.scratch): the next run removes a dead process's folder, and nothing else:
    not a live process's, not an unnamed or foreign one, not a symlink with a matching name,
    not another boot's young one."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": ROOT}
    killed = subprocess.run(
        [sys.executable, "-c", "import os, signal; from etl.storage import scratch; "
         "d = scratch.make('array-record'); open(os.path.join(d, 'shard'), 'wb').write("
         "b'x' * 100000); os.kill(os.getpid(), signal.SIGKILL)"], env=env, cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL
    (dead,) = os.listdir(temp)
    assert dead.startswith("etl-array-record-")
    live = subprocess.Popen([sys.executable, "-c", "import sys, time; from etl.storage import "
                             "scratch; print(scratch.make('shard'), flush=True); time.sleep(600)"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        live_dir = Path(live.stdout.readline().strip())  # type: ignore[union-attr]
        (live_dir / "chunks").write_text("in use\n")
        sentinel = tmp_path / "elsewhere"
        sentinel.mkdir()
        (sentinel / "keep").write_text("keep\n")
        (temp / "etl-array-record-00000000.1.1-linked").symlink_to(sentinel)
        (temp / "etl-array-record-abc123").mkdir()  # an older version's: unproven
        (temp / "etl-shard-ffffffff.1.1-otherboot").mkdir()  # another boot, young
        (temp / "beam-pipeline-tempxyz").mkdir()
        before = sorted(os.listdir(temp))

        proc = run(write_job(tmp_path / "job"), env={**os.environ, "TMPDIR": str(temp)})
        assert proc.returncode == 0, proc.stderr
        assert sorted(os.listdir(temp)) == [n for n in before if n != dead]
        assert (live_dir / "chunks").read_text() == "in use\n"
        assert (sentinel / "keep").read_text() == "keep\n"
        pid = dead.split("-")[3].split(".")[1]
        assert [line for line in proc.stderr.splitlines() if "scratch" in line] == [
            f"WARNING removed the leftover scratch folder {temp / dead} (pid {pid} is no "
            "longer running)"]
    finally:
        live.kill()
        live.wait()


# ------------------------------------------------------------------ a signal during start-up

START_UP = ["launch", "start", "imports", "lock", "run-dir"]
UNCHANGED = "before publishing: nothing was published, the previous output is unchanged"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_during_start_up_gives_one_line_and_its_exit_code(tmp_path: Path,
                                                                   signum: int) -> None:
    """SIGINT/SIGTERM at each start-up point (before the handler is installed, while Beam
    is imported, with the lock held, with the run directory made): exit 130/143, one line,
    the output unchanged, no lock or run directory left; a history entry once the run took
    its lock (and, the output's history being there, before too: the job was loaded)."""
    job = write_job(tmp_path / "job")
    out = tmp_path / "job" / "out"
    first = run(job)
    assert first.returncode == 0, first.stderr
    manifest = (out / "manifest.json").read_bytes()
    runs = tmp_path / "job" / "_runs.jsonl"
    name = signal.Signals(signum).name
    for phase in START_UP:
        before = len(runs.read_text().splitlines())
        pause_dir = tmp_path / f"pause-{phase}"
        pause_dir.mkdir()
        proc = subprocess.Popen(
            [sys.executable, RUN, "run", job, "--force", "--progress", "none"], cwd=ROOT,
            env={**os.environ, "ETL_PAUSE_AT": phase, "ETL_PAUSE_DIR": str(pause_dir)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_paused(proc, pause_dir, phase)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signum, (phase, err)
        assert err.splitlines() == [f"error: interrupted by {name} {UNCHANGED}"], (phase, err)
        assert (out / "manifest.json").read_bytes() == manifest
        assert sorted(os.listdir(tmp_path / "job" / ".out.etl")) == ["logs"], phase
        entries = [json.loads(x) for x in runs.read_text().splitlines()]
        if phase in ("launch", "start"):  # nothing loaded yet: the job, so its output, unknown
            assert len(entries) == before, phase
            continue
        assert len(entries) == before + 1, phase
        assert (entries[-1]["status"], entries[-1]["exit_code"], entries[-1]["error"]) == (
            "interrupted", 128 + signum, f"interrupted by {name} {UNCHANGED}"), phase


def test_the_console_script_catches_a_signal_from_its_first_moment(tmp_path: Path) -> None:
    """`tfrecord-etl` (pyproject's console script) starts at cli.launch too: SIGTERM while our
    modules are imported is one line and exit 143 (it used to be Python's silent -15)."""
    script = Path(sys.executable).parent / "tfrecord-etl"
    assert script.exists(), "the package's console script (make test installs it)"
    job = write_job(tmp_path / "job")
    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    proc = subprocess.Popen([str(script), "run", job, "--progress", "none"], cwd=tmp_path,
                            env={**os.environ, "ETL_PAUSE_AT": "launch",
                                 "ETL_PAUSE_DIR": str(pause_dir)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_paused(proc, pause_dir, "launch")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err.splitlines()) == (
        143, [f"error: interrupted by SIGTERM {UNCHANGED}"])
    assert not (tmp_path / "job" / "out").exists()


# ------------------------------------------------------- a worker pool writing after a signal


def test_a_dead_runs_unmarked_run_dir_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """What a worker pool's process left before (`run-RUN_ID/staging/` made again, without
    a marker, after the launcher's clean-up): the next run, holding the lock, removes it.
    A folder whose name is not a run id's, and a symlink with a run id's name, stay."""
    job = write_job(tmp_path / "job")
    work = tmp_path / "job" / ".out.etl"
    stale = work / f"run-{RUN_IDS[0]}" / "staging"
    stale.mkdir(parents=True)
    (stale / "train-00000-of-00002.tfrecord").write_bytes(b"x" * 100_000)
    (work / "run-mine").mkdir()  # not a run id: not provably a run's
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("keep\n")
    (target / "_ETL_RUN.json").write_text(json.dumps(  # a dead run's marker, behind a link
        {"run_id": RUN_IDS[1], "host": socket.gethostname(), "pid": 999_999_999,
         "pid_start": None, "started": 0}))
    (work / f"run-{RUN_IDS[1]}").symlink_to(target)

    proc = run(job)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(work)) == sorted(["logs", "run-mine", f"run-{RUN_IDS[1]}"])
    assert sorted(os.listdir(target)) == ["_ETL_RUN.json", "keep"]
    assert f"WARNING removed the leftover run directory {work / f'run-{RUN_IDS[0]}'} (it holds no " \
        "marker: written again by a worker of a stopped run after its clean-up; this run " \
        "holds the output's lock)" in proc.stderr.splitlines()


def test_a_signal_during_a_worker_pool_shard_write_leaves_no_staging(tmp_path: Path) -> None:
    """SIGINT to a PortableRunner launcher while the pool's worker is about to write a shard
    (paused at `write`, released once the launcher has cleaned up): the worker used to make
    `run-*/staging` again and write its shard there (tens of MB no run removed). Now it
    fails instead; nothing is left beside the output or in the temp directory, and the next
    run succeeds."""
    temp, pause_dir = tmp_path / "tmp", tmp_path / "pause"
    temp.mkdir()
    pause_dir.mkdir()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    base = {**os.environ, "PATH": path, "TMPDIR": str(temp)}
    pool_log = tmp_path / "pool.log"
    pool_env = {**base, "ETL_PAUSE_AT": "write", "ETL_PAUSE_DIR": str(pause_dir)}
    with worker_pool(sys.executable, ROOT, pool_env, pool_log) as port:
        job = write_job(tmp_path / "job", rows=20_000)
        work = tmp_path / "job" / ".out.etl"
        launcher = subprocess.Popen(
            [sys.executable, RUN, "run", job, "--progress", "none", *portable_flags(port)],
            cwd=ROOT, env=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_paused(launcher, pause_dir, "write")
        launcher.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while any(n.startswith("run-") for n in os.listdir(work)):  # the launcher's clean-up
            assert time.monotonic() < deadline, os.listdir(work)
            time.sleep(0.1)
        (pause_dir / "write.go").touch()  # the worker goes on, its launcher gone
        _, err = launcher.communicate(timeout=120)
        assert launcher.returncode == 130, err
        assert err.splitlines()[-1] == f"error: interrupted by SIGINT {UNCHANGED}"
        deadline = time.monotonic() + 60
        while "is gone" not in pool_log.read_text() and "No such file" not in pool_log.read_text():
            assert time.monotonic() < deadline, pool_log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(2)  # anything else the worker would still write
        assert sorted(os.listdir(work)) == ["logs"]
        assert not [n for n in os.listdir(temp) if n.startswith("etl-")]
    rerun = run(job)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(os.listdir(work)) == ["logs"]


def test_kill_9_of_a_gcs_array_record_run_leaves_no_scratch(tmp_path: Path, gcs_emulator,
                                                              gcs_bucket: str) -> None:
    """A gs:// ArrayRecord run has no local run directory: its shard scratch (and Beam's
    pipeline temp folder) are in the temp directory, named by the process. SIGKILL while a
    shard is half written leaves them; the next run removes them, says so, and publishes."""
    pytest.importorskip("array_record")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**gcs_emulator.env(), "TMPDIR": str(temp)}
    job = write_job(tmp_path / "job", rows=3000, format="array_record",
                    output=f"{gcs_bucket}/data/out")
    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, RUN, "run", job, "--progress", "none"], cwd=ROOT,
        env={**env, "ETL_PAUSE_AT": "write:shard", "ETL_PAUSE_DIR": str(pause_dir)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_paused(proc, pause_dir, "write:shard")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    left = sorted(n.split("-")[1] for n in os.listdir(temp) if n.startswith("etl-"))
    # Beam's temp folder, and one scratch per shard being written (the other shard's worker
    # may have started its own by the time this one pauses)
    assert left.count("pipeline") == 1 and 1 <= left.count("array") <= 2, os.listdir(temp)
    assert set(left) == {"array", "pipeline"}, os.listdir(temp)
    scratch_bytes = sum(p.stat().st_size for p in temp.rglob("*") if p.is_file())
    assert scratch_bytes > 0

    rerun = run(job, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert [n for n in os.listdir(temp) if n.startswith("etl-")] == []
    warned = [x for x in rerun.stderr.splitlines() if "leftover scratch folder" in x]
    assert len(warned) == len(left) and all(f"(pid {proc.pid} is no longer running)" in x
                                    for x in warned), rerun.stderr
