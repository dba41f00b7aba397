"""Output safety as a user meets it, through `run_pipeline.py run` in subprocesses: what is
refused before any work (nothing on disk changes: checksummed listings before and after),
what is replaced, one run per output (lock), recovery after `kill -9`, and a full disk."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from etl.base.errors import ConfigError
from etl.output import guard, layout
from etl.output.lock import RunInfo, RunLock
from etl.output.manifest import verify
from tests.helpers import IDS_SCHEMA as SCHEMA
from tests.helpers import ROOT, RUN, cli, error_lines, listing


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, RUN, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def write_csv(path: str, n: int, row: str = "{i},{half},{neg}") -> str:
    with open(path, "w") as fh:
        fh.write("id,a,b\n")
        fh.write("".join(row.format(i=i, half=i * 0.5, neg=-i, m=i % 10) + "\n"
                         for i in range(n)))
    return path


def make_job(folder: str, output: str, rows: int = 200, csv: str = "ids.csv",
             **extra: Any) -> str:
    """A job folder: job.yaml, schema.yaml and (unless it exists) the CSV it reads."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "schema.yaml"), "w") as fh:
        fh.write(SCHEMA)
    if not os.path.isabs(csv) and not os.path.exists(os.path.join(folder, csv)):
        write_csv(os.path.join(folder, csv), rows)
    doc = {"schema": "schema.yaml", "sources": {"train": {"format": "csv", "paths": [csv]}},
           "output": output, "shards": 4, "shuffle": {"seed": 3}, **extra}
    path = os.path.join(folder, "job.yaml")
    with open(path, "w") as fh:
        json.dump(doc, fh)  # JSON is YAML
    return path


def shard_hashes(out: str) -> dict[str, str]:
    with open(os.path.join(out, "manifest.json")) as fh:
        manifest = json.load(fh)
    return {s["path"]: s["sha256"] for split in manifest["splits"].values()
            for s in split["shards"]}


# ------------------------------------------------------------------ refused, nothing touched


def _case_dot(tmp: str) -> tuple[list[str], str]:
    job = make_job(os.path.join(tmp, "proj"), ".")
    return ["run", job], (r"job\.yaml:\d+: refusing output '\.' \(.*/proj\): it is the job "
                          r"file's folder \(.*/proj\)")


def _case_input_dir(tmp: str) -> tuple[list[str], str]:
    os.makedirs(os.path.join(tmp, "data"))
    write_csv(os.path.join(tmp, "data", "ids.csv"), 50)
    job = make_job(os.path.join(tmp, "proj"), "../data", csv="../data/ids.csv")
    return ["run", job], (r"job\.yaml:\d+: refusing output '\.\./data' \(.*/data\): it holds the "
                          r"input sources\.train\.paths '\.\./data/ids\.csv'")


def _case_parent_of_input(tmp: str) -> tuple[list[str], str]:
    job = make_job(os.path.join(tmp, "proj", "job"), "out")
    return ["run", job, "--output", os.path.join(tmp, "proj")], \
        r"--output: refusing output '.*/proj': it holds the job file's folder \(.*/proj/job\)"


def _case_file(tmp: str) -> tuple[list[str], str]:
    job = make_job(os.path.join(tmp, "proj"), "model.bin")
    with open(os.path.join(tmp, "proj", "model.bin"), "wb") as fh:
        fh.write(b"weights" * 100)
    return ["run", job], r"refusing output .*/proj/model\.bin: it is an existing file"


def _case_foreign(tmp: str) -> tuple[list[str], str]:
    job = make_job(os.path.join(tmp, "proj"), "../photos")
    os.makedirs(os.path.join(tmp, "photos", "2019"))
    for name in ("a.jpg", "2019/b.jpg"):
        with open(os.path.join(tmp, "photos", name), "wb") as fh:
            fh.write(name.encode() * 50)
    return ["run", job], (r"refusing output .*/photos: it is not empty .* holds no "
                          r"manifest\.json of a dataset written by tfrecord-etl")


def _case_cwd(tmp: str) -> tuple[list[str], str]:
    job = make_job(os.path.join(tmp, "proj"), "out")
    return ["run", job, "--output", ROOT], r"--output: refusing output '.*': it is the checkout"


@pytest.mark.slow
@pytest.mark.parametrize("case", [_case_dot, _case_input_dir, _case_parent_of_input, _case_file,
                                  _case_foreign, _case_cwd],
                         ids=["output_dot", "input_dir", "parent_of_input", "existing_file",
                              "foreign_dir", "cwd"])
def test_refused_output_changes_nothing(tmp_path, case) -> None:
    args, message = case(str(tmp_path))
    before = listing(str(tmp_path))
    root_before = sorted(os.listdir(ROOT)) if case is _case_cwd else None
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc.stderr)
    # refused when the job is loaded (job.yaml:LINE: or --output:) or by the run's guard
    assert len(lines) == 1 and re.match(r"error: (\S+: )?refusing output", lines[0]), proc.stderr
    assert re.search(message, lines[0]), lines[0]
    assert "Traceback" not in proc.stderr
    assert listing(str(tmp_path)) == before  # not a byte changed, no work dir created
    if root_before is not None:
        assert sorted(os.listdir(ROOT)) == root_before


@pytest.mark.slow
def test_sibling_dirs_with_our_old_names_survive_runs(tmp_path) -> None:
    job = make_job(str(tmp_path / "proj"), "../OUT")
    for name in ("OUT.old-keep", "OUT.tmp-20200101T000000-abcdef01"):
        os.makedirs(tmp_path / name / "inner")
        (tmp_path / name / "inner" / "thesis.tex").write_text(f"{name}: do not delete\n")
    keep = {n: listing(str(tmp_path / n)) for n in ("OUT.old-keep",
                                                   "OUT.tmp-20200101T000000-abcdef01")}
    for args in ([], ["--force"]):  # a first run, then a rebuild that replaces the output
        proc = cli("run", job, *args)
        assert proc.returncode == 0, proc.stderr
    assert {n: listing(str(tmp_path / n)) for n in keep} == keep
    assert verify(str(tmp_path / "OUT"))["records"] == 200
    # beside the output: our work dir, holding nothing but the two runs' logs, and the history
    assert sorted(os.listdir(tmp_path)) == [".OUT.etl", "OUT", *sorted(keep), "_runs.jsonl",
                                            "proj"]
    assert os.listdir(tmp_path / ".OUT.etl") == ["logs"]
    assert len(os.listdir(tmp_path / ".OUT.etl" / "logs")) == 2


@pytest.mark.slow
def test_rerun_replaces_our_output_but_a_user_file_inside_is_refused(tmp_path) -> None:
    out = tmp_path / "OUT"
    job = make_job(str(tmp_path / "proj"), str(out), rows=300, shards=8)
    assert cli("run", job).returncode == 0
    job = make_job(str(tmp_path / "proj"), str(out), shards=3)
    proc = cli("run", job)
    assert proc.returncode == 0, proc.stderr
    assert sorted(f for f in os.listdir(out) if f.endswith(".tfrecord")) == [
        f"train-{i:05d}-of-00003.tfrecord" for i in range(3)]
    assert verify(str(out))["records"] == 300
    (out / "my-notes.txt").write_text("results of experiment 4\n")
    before = listing(str(tmp_path))
    proc = cli("run", job)  # current: skipped, nothing touched but the run history
    assert proc.returncode == 0, proc.stderr
    assert _without_history(listing(str(tmp_path))) == _without_history(before)
    assert json.loads((tmp_path / "_runs.jsonl").read_text().splitlines()[-1])["status"] == "skipped"
    proc = cli("run", job, "--force")
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: refusing output {out}: it holds my-notes.txt, which its manifest.json does not "
        "list; it is replaced as a whole, so choose a new or empty directory (or remove it "
        "yourself)"]
    assert _without_history(listing(str(tmp_path))) == _without_history(before)


@pytest.mark.slow
def test_verify_and_the_next_run_agree_on_what_is_intact(tmp_path) -> None:
    """An empty directory (or a link to one) inside a published output: verify fails (exit 3)
    with the run's own reason, and the next run refuses the output for it; removed, both
    accept the output again."""
    out = tmp_path / "OUT"
    job = make_job(str(tmp_path / "proj"), str(out), rows=100, shards=2)
    assert cli("run", job).returncode == 0
    ok = cli("verify", str(out))
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, f"OK {out}: 100 records train=100\n", "")
    (out / "plots" / "old").mkdir(parents=True)
    bad = cli("verify", str(out))
    assert (bad.returncode, bad.stdout) == (3, "")
    assert bad.stderr == (f"error: {out}: it holds plots/old/, which its manifest.json does not "
                          "list; the next run would refuse to replace it\n")
    refused = cli("run", job, "--force")
    assert refused.returncode == 2
    assert error_lines(refused.stderr) == [
        f"error: refusing output {out}: it holds plots/old/, which its manifest.json does not "
        "list; it is replaced as a whole, so choose a new or empty directory (or remove it "
        "yourself)"]
    os.rmdir(out / "plots" / "old")
    os.symlink(tmp_path / "proj", out / "plots" / "proj")  # a link to a directory: not ours
    bad = cli("verify", str(out))
    assert (bad.returncode, bad.stderr) == (3, (
        f"error: {out}: it holds plots/proj, which its manifest.json does not list; the next "
        "run would refuse to replace it\n"))
    os.remove(out / "plots" / "proj")
    os.rmdir(out / "plots")
    assert verify(str(out))["records"] == 100
    assert cli("run", job, "--force").returncode == 0


def test_what_counts_as_ours(tmp_path) -> None:
    """Empty: fine. Format 1 manifests (before the producer tag) with _SUCCESS: ours. A
    subfolder or a file the manifest does not list: not ours."""
    out = tmp_path / "out"
    out.mkdir()
    assert guard.foreign_content(str(out)) is None
    old = {"format_version": 1, "splits": {"train": {"shards": [{"path": "train-00000-of-00001"
                                                                         ".tfrecord"}]}}}
    (out / "manifest.json").write_text(json.dumps(old))
    (out / "train-00000-of-00001.tfrecord").write_bytes(b"")
    (out / "schema.yaml").write_text("x")
    assert "not one written by tfrecord-etl" in guard.foreign_content(str(out))
    (out / "_SUCCESS").write_bytes(b"")
    assert guard.foreign_content(str(out)) is None
    (out / "rejected").mkdir()
    (out / "rejected" / "rejected.jsonl").write_text("{}\n")  # format 1: rejected/ unlisted
    assert guard.foreign_content(str(out)) is None
    (out / "plots").mkdir()
    assert guard.foreign_content(str(out)) == (
        "it holds plots/, which its manifest.json does not list")
    with pytest.raises(ConfigError, match="it holds plots/"):
        guard.check_output(str(out), [])
    # a symlink at the output path is refused (replacing it would not touch its target)
    os.symlink(out, tmp_path / "link")
    with pytest.raises(ConfigError, match="symbolic link"):
        guard.check_output(str(tmp_path / "link"), [])


def test_leftover_run_dirs_go_only_with_our_marker_and_a_dead_run(tmp_path) -> None:
    out = str(tmp_path / "out")
    work = layout.work_dir(out)
    assert work == str(tmp_path / ".out.etl")
    dead = RunInfo("20200101T000000-dead0001", os.uname().nodename, 2**22 + 7, None, time.time())
    alive = RunInfo.current("20200101T000000-live0001")
    for info in (dead, alive):
        path = guard.create_run_dir(work, info)
        os.makedirs(os.path.join(path, "staging"))
    # the dead run died between the two renames of its publish: its old output is put back
    os.makedirs(os.path.join(work, "run-20200101T000000-dead0001", "previous-output"))
    open(os.path.join(work, "run-20200101T000000-dead0001", "previous-output", "_SUCCESS"),
         "w").close()
    os.makedirs(os.path.join(work, "run-unmarked"))  # not provably ours: left alone
    removed = guard.recover_leftovers(work, out, stale_after=3600)
    assert removed == [os.path.join(work, "run-20200101T000000-dead0001")]
    assert sorted(os.listdir(work)) == ["run-20200101T000000-live0001", "run-unmarked"]
    assert os.listdir(out) == ["_SUCCESS"]
    # a run on another host can only go by age
    other = RunInfo("20200101T000000-away0001", "another-host", os.getpid(), None,
                    time.time() - 7200)
    guard.create_run_dir(work, other)
    assert guard.recover_leftovers(work, out, stale_after=3 * 3600) == []
    assert guard.recover_leftovers(work, out, stale_after=3600) == [
        os.path.join(work, "run-20200101T000000-away0001")]


# ----------------------------------------------------------------------------------- lock


@pytest.mark.slow
def test_two_runs_started_together_one_publishes_the_other_exits_4(tmp_path) -> None:
    job = make_job(str(tmp_path / "proj"), "../OUT", rows=600_000, spill_in_memory=0)
    args = ["run", job, "--direct_num_workers=1"]
    procs = [start(*args), start(*args)]
    results = [(p, *p.communicate(timeout=300)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes == [0, 4], [(p.returncode, err) for p, _, err in results]
    winner = next(r for r in results if r[0].returncode == 0)
    loser = next(r for r in results if r[0].returncode == 4)
    logs = os.listdir(tmp_path / ".OUT.etl" / "logs")
    assert len(logs) == 1  # the loser did not start a run
    run_id = logs[0][: -len(".log")]
    lines = error_lines(loser[2])
    assert len(lines) == 1, loser[2]
    assert lines[0].startswith(f"error: output {tmp_path / 'OUT'} is locked by run {run_id} "
                               f"(host {os.uname().nodename}, pid {winner[0].pid}, started ")
    assert "--break-lock" in lines[0]
    assert verify(str(tmp_path / "OUT"))["records"] == 600_000
    assert os.listdir(tmp_path / ".OUT.etl") == ["logs"]  # lock released


@pytest.mark.slow
def test_kill_9_mid_run_then_rerun_recovers_lock_and_matches_a_clean_run(tmp_path) -> None:
    job = make_job(str(tmp_path / "proj"), "../OUT", rows=600_000, spill_in_memory=0)
    work = tmp_path / ".OUT.etl"
    proc = start("run", job, "--direct_num_workers=1")
    deadline = time.time() + 120
    run_dir = None
    while time.time() < deadline and proc.poll() is None:
        runs = [d for d in (os.listdir(work) if work.exists() else []) if d.startswith("run-")]
        if runs and (work / "lock.json").exists():
            spill = work / runs[0] / "spill" / "train"
            if spill.exists() and os.listdir(spill):
                run_dir = work / runs[0]
                break
        time.sleep(0.01)
    assert run_dir is not None and proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert (work / "lock.json").exists() and (run_dir / "_ETL_RUN.json").exists()
    assert not (tmp_path / "OUT").exists()
    rerun = cli("run", job, "--direct_num_workers=1")
    assert rerun.returncode == 0, rerun.stderr
    assert f"recovered the stale lock of run {run_dir.name[len('run-'):]}" in rerun.stderr
    assert f"pid {proc.pid} is no longer running on this host" in rerun.stderr
    assert f"removed the leftover run directory {run_dir}" in rerun.stderr
    assert sorted(os.listdir(work)) == ["logs"]
    clean = cli("run", job, "--output", str(tmp_path / "CLEAN"))
    assert clean.returncode == 0, clean.stderr
    assert shard_hashes(str(tmp_path / "OUT")) == shard_hashes(str(tmp_path / "CLEAN"))
    assert {k: v for k, v in listing(str(tmp_path / "OUT")).items() if ".tfrecord" in k} == {
        k: v for k, v in listing(str(tmp_path / "CLEAN")).items() if ".tfrecord" in k}


@pytest.mark.slow
def test_lock_names_a_live_holder_and_break_lock_takes_it(tmp_path) -> None:
    job = make_job(str(tmp_path / "proj"), "../OUT")
    work = str(tmp_path / ".OUT.etl")
    holder = RunInfo.current("20990101T000000-holder01")  # this test process: alive
    lock = RunLock(work, holder)
    lock.acquire()
    proc = cli("run", job)
    assert proc.returncode == 4
    assert error_lines(proc.stderr) == [
        f"error: output {tmp_path / 'OUT'} is locked by run 20990101T000000-holder01 (host "
        f"{holder.host}, pid {os.getpid()}, started "
        f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(int(holder.started)))}+00:00); wait "
        "for it to finish, or if that run is no longer running rerun with --break-lock (lock "
        f"file: {work}/lock.json)"]
    assert not (tmp_path / "OUT").exists()
    proc = cli("run", job, "--break-lock")
    assert proc.returncode == 0, proc.stderr
    assert "recovered the stale lock of run 20990101T000000-holder01" in proc.stderr
    assert "--break-lock was given" in proc.stderr
    assert verify(str(tmp_path / "OUT"))["records"] == 200


def test_stale_lock_recovery_admits_exactly_one(tmp_path) -> None:
    """Two runs recovering the same stale lock: the second finds the first's fresh lock."""
    work = str(tmp_path / "w")
    gone = RunInfo("old", os.uname().nodename, 2**22 + 11, None, time.time())
    RunLock(work, gone).acquire()
    a = RunLock(work, RunInfo.current("a"))
    b = RunLock(work, RunInfo.current("b"))
    stale = open(a.path, "rb").read()
    a.acquire()
    # b judged the same stale content, but the file now holds a's lock: b must not remove it
    assert b._take_aside(stale) is False
    assert json.load(open(a.path))["run_id"] == "a"
    from etl.base.errors import LockedError

    with pytest.raises(LockedError, match="locked by run a "):
        b.acquire()
    a.verify()
    a.release()
    assert not os.path.exists(a.path)
    b.acquire()
    with pytest.raises(LockedError, match="taken over by run b"):
        a.verify()


# ------------------------------------------------------------------------------- disk full


_ENOSPC_SITE = textwrap.dedent("""\
    # Test hook: every write of a shard under ETL_TEST_ENOSPC_UNDER fails with ENOSPC.
    import builtins, errno, os

    _UNDER = os.environ.get("ETL_TEST_ENOSPC_UNDER", "")
    _real_open, _real_os_open, _real_write = builtins.open, os.open, os.write
    _fds = set()

    def _target(path):
        path = os.fspath(path) if not isinstance(path, int) else ""
        return bool(_UNDER) and os.path.abspath(path).startswith(_UNDER) and ".tfrecord" in path

    def _full():
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    class _Full:
        def __init__(self, fh):
            self._fh = fh
        def write(self, data):
            raise _full()
        def __getattr__(self, name):
            return getattr(self._fh, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self._fh.close()

    def open(file, mode="r", *args, **kwargs):
        fh = _real_open(file, mode, *args, **kwargs)
        return _Full(fh) if "w" in mode and _target(file) else fh

    def os_open(path, flags, *args, **kwargs):
        fd = _real_os_open(path, flags, *args, **kwargs)
        if flags & (os.O_WRONLY | os.O_RDWR) and _target(path):
            _fds.add(fd)
        return fd

    def write(fd, data):
        if fd in _fds:
            raise _full()
        return _real_write(fd, data)

    builtins.open, os.open, os.write = open, os_open, write
    """)


def _mount_tmpfs(path: str, size: str) -> bool:
    os.makedirs(path, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                              capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tmpfs", "injected"])
def test_disk_full_exits_5_naming_the_path_and_keeps_the_old_output(tmp_path, how) -> None:
    parent = str(tmp_path / "disk")
    env = dict(os.environ)
    if how == "tmpfs":
        if not _mount_tmpfs(parent, "4m"):
            pytest.skip("mounting a tmpfs is not permitted here (the injected variant runs)")
    else:
        os.makedirs(parent)
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(_ENOSPC_SITE)
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    try:
        out = os.path.join(parent, "out")
        small = make_job(str(tmp_path / "small"), out, rows=500)
        assert cli("run", small).returncode == 0
        before = listing(parent)
        # 1.3 MB of small numbers: under the free space, but ~10 MB of Examples
        big = make_job(str(tmp_path / "big"), out, rows=200_000, spill_in_memory=0)
        write_csv(str(tmp_path / "big" / "ids.csv"), 200_000, row="{m},{m},{m}")
        env["ETL_TEST_ENOSPC_UNDER"] = layout.work_dir(out)
        # another job's inputs into the same output: --force (etl.output.origin)
        proc = cli("run", big, "--force", env=env)
        assert proc.returncode == 5, proc.stderr
        lines = error_lines(proc.stderr)
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert re.fullmatch(
            rf"error: {re.escape(layout.work_dir(out))}/run-[^/]+/(staging|spill)/\S+: "
            r"(writing|reading or writing) failed: no space left on the device; free some space "
            r"or choose another location \[errno ENOSPC\] \(full log: \S+\.log\)", lines[0]), lines[0]
        after = listing(parent)
        # the work dir and the run history (which records the failure) may change
        assert {k: v for k, v in after.items() if not _ours_beside(k)} == {
            k: v for k, v in before.items() if not _ours_beside(k)}
        assert sorted(os.listdir(layout.work_dir(out))) == ["logs"]  # run dir removed
        check = cli("verify", out)
        assert check.returncode == 0 and check.stdout.startswith(f"OK {out}: 500 records")
    finally:
        if how == "tmpfs" and subprocess.run(["umount", parent], capture_output=True,
                                             timeout=20).returncode:
            subprocess.run(["umount", "-l", parent], capture_output=True, timeout=20)


def test_not_enough_free_space_is_refused_before_any_work(tmp_path, monkeypatch) -> None:
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 9 * 10**5, 10**5))
    from etl.base.errors import StorageError

    with pytest.raises(StorageError) as e:
        guard.check_free_space([(str(tmp_path / "out"), "output")], 2_500_000)
    assert str(e.value) == (
        f"not enough free space for the output {tmp_path / 'out'}: 100.0 KB free on its file "
        f"system ({tmp_path}), the inputs total 2.5 MB; free some space or choose another "
        "location")
    assert e.value.exit_code == 5
    guard.check_free_space([(str(tmp_path / "out"), "output")], 100_000)



def test_prune_logs_keeps_the_newest_runs_with_their_dead_letter_files(tmp_path) -> None:
    from etl.output.guard import prune_logs  # noqa: PLC0415

    logs = tmp_path / "logs"
    logs.mkdir()
    runs = [f"20261122T0000{i:02d}-abcd{i:02d}-ids-0123456789ab" for i in range(4)]
    for run in runs:
        (logs / f"{run}.log").write_text("log\n")
    (logs / f"{runs[0]}.rejected.jsonl").write_text("{}\n")
    (logs / f"{runs[3]}.rejected.jsonl").write_text("{}\n")
    prune_logs(str(tmp_path), keep=2)
    assert sorted(os.listdir(logs)) == [f"{runs[2]}.log", f"{runs[3]}.log",
                                        f"{runs[3]}.rejected.jsonl"]


def _ours_beside(name: str) -> bool:
    """What a failed run may change beside its output: its work dir and the run history."""
    return name.startswith(".out.etl/") or name == "_runs.jsonl"


def _without_history(entries: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in entries.items() if k != "_runs.jsonl"}
