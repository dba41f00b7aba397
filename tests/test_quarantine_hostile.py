"""Quarantine as an attacker or a careless operator meets it (issue 28, G19): markers edited,
trees copied, symlinks planted, entries damaged while they wait, signals and kills at the
worst moment. Everything through `run_pipeline.py` in subprocesses.

One dated job (`out/{date}`, drift against the previous day) publishes 2026-11-20 (run A)
and 2026-11-21 (run B); 2026-11-21 with its labels collapsed is then blocked (run C,
quarantined in `out/2026-11-21.quarantine/C/`). Each test works on its own copy of that tree
(the marker's `output` re-pointed at the copy, as a run there would have written it) and
checks, besides the exit code and the one line, that a sentinel tree outside the entry and
the other day's output are byte for byte what they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from etl.output.manifest import load_manifest, verify
from etl.output.quarantine import CHECKS, DATASET, MARKER, entries
from etl.schedule import history
from tests.gcs_emulator import GcsEmulator
from tests.gcs_proxy import GcsProxy
from tests.helpers import ROOT, RUN, cli
from tests.jobs import CHECKS_YAML, iris_job, write_iris

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

DAY1, DAY2 = "2026-11-20", "2026-11-21"
DOCUMENTED = {0, 2, 3, 4, 5, 6, 130, 143}


def dated_job(folder: Path, output: str) -> Path:
    for day in (DAY1, DAY2):
        (folder / day).mkdir(exist_ok=True)
        write_iris(folder / day / "iris.csv")
    job = folder / "job.yaml"
    job.write_text(f"schema: {ROOT}/schemas/iris.yaml\n"
                   "source: {format: csv, paths: ['{date}/iris.csv']}\n"
                   "split: {train: 0.8, test: 0.2}\n"
                   f"output: '{output}'\nshuffle: {{seed: 7}}\nshards: 2\n" + CHECKS_YAML)
    return job


def block_day2(folder: Path, job: Path, env: dict[str, str] | None = None) -> None:
    """A and B published, C blocked (module docstring)."""
    for day in (DAY1, DAY2):
        done = cli("run", str(job), "--date", day, env=env)
        assert done.returncode == 0, done.stderr
    write_iris(folder / DAY2 / "iris.csv", collapse=True)
    blocked = cli("run", str(job), "--date", DAY2, env=env)
    assert blocked.returncode == 6, blocked.stderr


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("base")
    block_day2(folder, dated_job(folder, "out/{date}"))
    return folder


class Tree:
    """A copy of the base tree for one test, with a sentinel folder beside it."""

    def __init__(self, tmp_path: Path, base: Path):
        self.top = tmp_path / "w"
        shutil.copytree(base, self.top, symlinks=True)
        self.out1 = str(self.top / "out" / DAY1)
        self.out2 = str(self.top / "out" / DAY2)
        [self.entry] = [e.path for e in entries(self.out2)]
        self.run_c = os.path.basename(self.entry)
        self.marker = Path(self.entry, MARKER)
        self.edit(output=self.out2)  # as a run into this copy would have written it
        self.run_a = load_manifest(self.out1)["run_id"]
        self.run_b = load_manifest(self.out2)["run_id"]
        self.sentinel = tmp_path / "sentinel"
        (self.sentinel / "deep").mkdir(parents=True)
        (self.sentinel / "keep.txt").write_text("not yours")
        (self.sentinel / "deep" / "data.bin").write_bytes(os.urandom(64))

    def edit(self, **fields: Any) -> dict[str, Any]:
        doc = json.loads(self.marker.read_text())
        doc.update(fields)
        self.marker.write_text(json.dumps(doc))
        return doc

    def outside(self) -> dict[str, str]:
        """Every file of the tree and the sentinel except the entry and day 2's output (a
        release may change those two) and day 2's lock folder and history: what must never
        change."""
        skip = (self.entry, self.out2 + os.sep)
        seen = {**digest(str(self.top)), **digest(str(self.sentinel))}
        return {p: h for p, h in seen.items() if not p.startswith(skip) and "/.2026-11-21.etl/" not in p
                and not p.endswith("runs.jsonl")}


def digest(folder: str) -> dict[str, str]:
    """sha256 of every file below `folder` (symlinks: their target text, never followed)."""
    out = {}
    for top, dirs, names in os.walk(folder):
        for n in names + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            p = os.path.join(top, n)
            out[p] = (f"link:{os.readlink(p)}" if os.path.islink(p)
                      else hashlib.sha256(Path(p).read_bytes()).hexdigest())
    return out


def relative(folder: str) -> dict[str, str]:
    return {os.path.relpath(p, folder): h for p, h in digest(folder).items()}


def q(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli("quarantine", *args, env=env)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def refused(tree: Tree, why: str) -> str:
    return (f"error: refusing quarantined run {tree.run_c} ({tree.entry}): {why}; look at it "
            "and remove it by hand")


# ---- 1. derives, never trusts ---------------------------------------------------------------
def test_quarantine_derives_never_trusts(tmp_path: Path, base: Path) -> None:
    tree = Tree(tmp_path, base)
    before, entry_before = tree.outside(), digest(tree.entry)
    out2_before = digest(tree.out2)
    objects = json.loads(tree.marker.read_text())["objects"]

    # `../` and absolute names in the marker: refused, nothing anywhere deleted
    for bad in ("../../../sentinel/keep.txt", str(tree.sentinel / "keep.txt"),
                f"{DATASET}/../../../../sentinel/deep/data.bin"):
        tree.edit(objects=[*objects, bad])
        for action in ("drop", "release"):
            done = q(action, tree.out2)
            assert done.returncode == 3, done.stderr
            assert one_line(done) == refused(
                tree, f"its {MARKER} lists {bad!r}, not a name inside a quarantine entry "
                      "(edited by hand?)")
        assert tree.outside() == before and digest(tree.out2) == out2_before
    tree.edit(objects=objects)
    assert tree.outside() == before

    # a marker naming another run than its folder's: refused
    tree.edit(run_id=tree.run_b)
    done = q("drop", tree.out2)
    assert (done.returncode, one_line(done)) == (
        3, refused(tree, f"its {MARKER} names run {tree.run_b!r}, not the folder's"))
    tree.edit(run_id=tree.run_c)
    assert digest(tree.entry) == entry_before

    # the entry copied beside another output, its marker edited to fit that output's run:
    # release publishes there only if that output is the same job and span; it is not
    other = Path(tree.out1 + ".quarantine", tree.run_c)
    shutil.copytree(tree.entry, other, symlinks=True)
    doc = json.loads((other / MARKER).read_text())
    (other / MARKER).write_text(json.dumps({**doc, "replaces": tree.run_a}))
    out1_before = digest(tree.out1)
    done = q("release", tree.out1)
    assert (done.returncode, one_line(done)) == (
        2, f"error: refusing to release run {tree.run_c}: its marker says it was blocked for "
           f"{tree.out2}, not {tree.out1}, and {tree.out1} does not publish the same job and "
           f"span; release it from {tree.out2}, or drop it")
    assert digest(tree.out1) == out1_before and load_manifest(tree.out1)["run_id"] == tree.run_a
    shutil.rmtree(other.parent)

    # a copied tree releases into the tree it is in, never into the original
    backup = tmp_path / "backup"
    shutil.copytree(tree.top / "out", backup / "out", symlinks=True)
    copy2 = str(backup / "out" / DAY2)
    done = q("release", copy2)
    assert (done.returncode, done.stdout.strip()) == (
        0, f"released run {tree.run_c}: {copy2} publishes it now (it was blocked for "
           f"{tree.out2}: this tree was moved or copied)"), done.stderr
    assert load_manifest(copy2)["run_id"] == tree.run_c and verify(copy2)["records"] == 50
    assert digest(tree.out2) == out2_before and [e.run_id for e in entries(tree.out2)] == [
        tree.run_c]
    assert tree.outside() == before

    # symlinks: dataset/ pointing at another published span, a link inside dataset/, the
    # entry itself a link: never followed, refused in one line by list, drop and release
    dataset = Path(tree.entry, DATASET)
    aside = tmp_path / "dataset-aside"
    dataset.rename(aside)
    dataset.symlink_to(tree.out1, target_is_directory=True)
    link = refused(tree, f"{dataset} is a symbolic link, never followed")
    for action in ("release", "drop"):
        done = q(action, tree.out2)
        assert (done.returncode, one_line(done)) == (3, link)
    listed = q("list", tree.out2)
    assert (listed.returncode, listed.stdout.strip()) == (0, f"{tree.run_c}  {link[7:]}")
    dataset.unlink()
    aside.rename(dataset)
    shard = sorted(p for p in os.listdir(dataset) if p.startswith("train-"))[0]
    (dataset / shard).rename(tmp_path / shard)
    (dataset / shard).symlink_to(Path(tree.out1, shard))
    done = q("release", tree.out2)
    assert (done.returncode, one_line(done)) == (
        3, refused(tree, f"{dataset / shard} is a symbolic link, never followed"))
    (dataset / shard).unlink()
    (tmp_path / shard).rename(dataset / shard)
    moved = tmp_path / "elsewhere"
    Path(tree.entry).rename(moved)
    Path(tree.entry).symlink_to(moved, target_is_directory=True)
    done = q("drop", tree.out2)
    assert (done.returncode, one_line(done)) == (
        3, refused(tree, "it is a symbolic link, never followed"))
    assert relative(str(moved)) == {os.path.relpath(p, tree.entry): h
                                    for p, h in entry_before.items()}
    assert tree.outside() == before and digest(tree.out2) == out2_before
    assert digest(tree.out1) == out1_before


# ---- 2. release verifies the entry byte for byte ------------------------------------------
DAMAGE = ["shard deleted", "shard changed", "shard truncated", "manifest unreadable", "manifest edited",
          "checks.json unreadable", "file added"]


@pytest.mark.parametrize("damage", DAMAGE)
def test_release_verifies_the_entry_byte_for_byte(tmp_path: Path, base: Path,
                                                   damage: str) -> None:
    tree = Tree(tmp_path, base)
    dataset = Path(tree.entry, DATASET)
    manifest = json.loads((dataset / "manifest.json").read_text())
    shard = manifest["splits"]["train"]["shards"][0]
    path = dataset / shard["path"]
    size = shard["num_bytes"]
    start = f"error: refusing to release run {tree.run_c}: "
    if damage == "shard deleted":
        path.unlink()
        want = f"{start}{path} is missing (listed in its manifest); drop it and rerun the span"
    elif damage == "shard changed":
        data = bytearray(path.read_bytes())
        data[size // 2] ^= 0x01
        path.write_bytes(bytes(data))
        want = (f"{start}{path} changed since the run was blocked (its sha256 is not its "
                "manifest's); drop it and rerun the span")
    elif damage == "shard truncated":
        path.write_bytes(path.read_bytes()[:-1])
        want = (f"{start}{path} changed since the run was blocked ({size - 1} bytes, its "
                f"manifest says {size}); drop it and rerun the span")
    elif damage == "manifest unreadable":
        (dataset / "manifest.json").write_text('{"splits": ')
        want = (f"{start}cannot read {dataset / 'manifest.json'}: Expecting value: line 1 "
                "column 12 (char 11); drop it and rerun the span")
    elif damage == "manifest edited":  # valid JSON, consistent with a changed shard
        data = bytearray(path.read_bytes())
        data[size // 2] ^= 0x01
        path.write_bytes(bytes(data))
        shard["sha256"] = hashlib.sha256(data).hexdigest()
        (dataset / "manifest.json").write_text(json.dumps(manifest))
        want = (f"{start}{dataset / 'manifest.json'} changed since the run was blocked; drop "
                "it and rerun the span")
    elif damage == "checks.json unreadable":
        Path(tree.entry, CHECKS).write_bytes(b"\xff\x00")
        want = (f"{start}cannot read {Path(tree.entry, CHECKS)}: Expecting value: line 1 "
                "column 1 (char 0); drop it and rerun the span")
    else:
        (dataset / "extra.tfrecord").write_bytes(b"x")
        want = (f"{start}{dataset / 'extra.tfrecord'} is not in its manifest; drop it and "
                "rerun the span")
    before, out2_before, entry_before = tree.outside(), digest(tree.out2), digest(tree.entry)
    done = q("release", tree.out2)
    assert (done.returncode, one_line(done), done.stdout) == (3, want, "")
    # the previous good output untouched, the entry as it was, nothing recorded
    assert digest(tree.out2) == out2_before and verify(tree.out2)["records"] == 50
    assert digest(tree.entry) == entry_before and tree.outside() == before
    assert [e["status"] for e in history.read(str(tree.top / "out"))][-1] == "blocked"


# ---- 3. drop takes the output's lock ------------------------------------------------------
def start(args: list[str], phase: str, pause_dir: Path,
          env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    pause_dir.mkdir(exist_ok=True)
    e = dict(env or os.environ)
    e.update(ETL_PAUSE_AT=phase, ETL_PAUSE_DIR=str(pause_dir))
    return subprocess.Popen([sys.executable, RUN, *args], cwd=ROOT, env=e, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(proc: subprocess.Popen[str], phase: str, pause_dir: Path) -> None:
    reached = pause_dir / (phase.replace(":", "-") + ".reached")
    deadline = time.monotonic() + 120
    while not (reached.exists() and len(reached.read_text().split()) == 2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never paused at {phase}: {proc.communicate()}")
        time.sleep(0.02)


def test_drop_takes_the_output_lock(tmp_path: Path, base: Path) -> None:
    tree = Tree(tmp_path, base)
    pause = tmp_path / "pause"
    release = start(["quarantine", "release", tree.out2], "publish:start", pause)
    wait_for(release, "publish:start", pause)
    dropped = q("drop", tree.out2)
    assert dropped.returncode == 4, dropped.stderr
    line = one_line(dropped)
    assert line.startswith(f"error: output {tree.out2} is locked by run {tree.run_c} ")
    assert f"pid {release.pid}" in line
    assert [e.run_id for e in entries(tree.out2)] == [tree.run_c]
    (pause / "publish-start.go").touch()
    out, err = release.communicate(timeout=120)
    assert (release.returncode, out.strip()) == (
        0, f"released run {tree.run_c}: {tree.out2} publishes it now"), err
    assert load_manifest(tree.out2)["run_id"] == tree.run_c and entries(tree.out2) == []


# ---- 4. the outcome is recorded even after a signal ---------------------------------------
def test_a_signal_after_release_success_records_released(tmp_path: Path, base: Path) -> None:
    tree = Tree(tmp_path, base)
    keep = tmp_path / "entry-copy"
    shutil.copytree(tree.entry, keep, symlinks=True)
    pause = tmp_path / "pause"
    release = start(["quarantine", "release", tree.out2], "publish:success", pause)
    wait_for(release, "publish:success", pause)
    release.send_signal(signal.SIGINT)
    out, err = release.communicate(timeout=120)
    line = f"released run {tree.run_c}: {tree.out2} publishes it now"
    assert (release.returncode, out.strip(), err.strip().splitlines()) == (
        130, line, [f"error: interrupted by SIGINT after the release completed ({line}; "
                    "recorded in the history)"])
    assert load_manifest(tree.out2)["run_id"] == tree.run_c and verify(tree.out2)
    last = history.read(str(tree.top / "out"))[-1]
    assert (last["status"], last["exit_code"], last["run_id"]) == ("released", 130, tree.run_c)
    listed = q("list", tree.out2)
    assert listed.stdout.strip() == f"nothing in quarantine for {tree.out2}"

    # a signal before `_SUCCESS`: nothing published, the entry whole, nothing recorded
    tree2 = Tree(tmp_path / "second", base)
    out2_before = digest(tree2.out2)
    pause2 = tmp_path / "pause2"
    release = start(["quarantine", "release", tree2.out2], "publish:start", pause2)
    wait_for(release, "publish:start", pause2)
    release.send_signal(signal.SIGTERM)
    out, err = release.communicate(timeout=120)
    assert (release.returncode, err.strip().splitlines()) == (
        143, ["error: interrupted by SIGTERM before publishing: nothing was published, the "
              "previous output is unchanged"])
    assert digest(tree2.out2) == out2_before
    assert [e.run_id for e in entries(tree2.out2)] == [tree2.run_c]
    assert history.read(str(tree2.top / "out"))[-1]["status"] == "blocked"

    # an entry left by an older release that stopped after publishing: `list` says released
    shutil.copytree(keep, tree.entry, symlinks=True)
    listed = q("list", tree.out2)
    assert listed.stdout.strip() == (
        f"{tree.run_c}  span {DAY2}  released: {tree.out2} publishes it (`quarantine drop "
        f"{tree.out2} --run {tree.run_c}` removes what is left)")


# ---- 5. gs:// (emulator behind the precondition proxy) ---------------------------------------
@pytest.fixture
def proxy(gcs_emulator: GcsEmulator) -> Any:
    with GcsProxy(gcs_emulator.endpoint) as p:
        yield p


def gcs_published(tmp_path: Path, out: str, env: dict[str, str]) -> Path:
    """Span N published into `out`; the input collapsed for N+1 (not run yet)."""
    job = iris_job(tmp_path, out)
    done = cli("run", str(job), env=env)
    assert done.returncode == 0, done.stderr
    write_iris(tmp_path / "iris.csv", collapse=True)
    return job


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


def test_gcs_quarantine_derives_never_trusts(tmp_path: Path, gcs_emulator: GcsEmulator,
                                             gcs_bucket: str, proxy: GcsProxy) -> None:
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env(endpoint=proxy.url)
    job = gcs_published(tmp_path, out, env)
    assert cli("run", str(job), env=env).returncode == 6
    [entry] = entries(out)
    sentinel = f"{gcs_bucket}/data/sentinel.txt"
    gcs_emulator.upload_bytes(b"not yours", sentinel)
    gcs_emulator.upload_bytes(b"not yours either", f"{gcs_bucket}/keep/x.bin")
    before = gcs_emulator.list(gcs_bucket)
    marker = f"{entry.path}/{MARKER}"
    doc = json.loads(gcs_emulator.download(marker))
    for bad in ("../../sentinel.txt", sentinel, f"{DATASET}/../../../sentinel.txt",
                "/keep/x.bin"):
        gcs_emulator.upload_bytes(json.dumps({**doc, "objects": [*doc["objects"], bad]})
                                  .encode(), marker)
        for action in ("drop", "release"):
            done = q(action, out, env=env)
            assert (done.returncode, errors(done.stderr)) == (3, [
                f"error: refusing quarantined run {entry.run_id} ({entry.path}): its {MARKER} "
                f"lists {bad!r}, not a name inside a quarantine entry (edited by hand?); look "
                "at it and remove it by hand"]), done.stderr
        assert gcs_emulator.list(gcs_bucket) == before
    # a marker naming another output: the release goes into the output of the command (the
    # one publishing the run the entry replaces, same job), never into the one it names
    other = f"{gcs_bucket}/data/other"
    gcs_emulator.upload_bytes(json.dumps({**doc, "output": other}).encode(), marker)
    done = q("release", out, env=env)
    assert (done.returncode, done.stdout.strip()) == (
        0, f"released run {entry.run_id}: {out} publishes it now (it was blocked for {other}: "
           "this tree was moved or copied)"), done.stderr
    assert json.loads(gcs_emulator.download(f"{out}/_SUCCESS"))["version"] == entry.run_id
    assert verify(out)["records"] == 50
    assert gcs_emulator.list(other) == [] and entries(out) == []
    assert sentinel in gcs_emulator.list(gcs_bucket)

    # blocked again, the entry copied beside an output that publishes nothing (its marker
    # edited to fit): nothing proves it belongs there, refused; nothing published there
    write_iris(tmp_path / "iris.csv", collapse=True)
    (tmp_path / "iris.csv").write_text((tmp_path / "iris.csv").read_text()
                                       + "5.0,3.0,1.5,0.2,Iris-setosa\n")
    assert cli("run", str(job), env=env).returncode == 6
    [second] = entries(out)
    out2 = f"{gcs_bucket}/data/out2"
    bucket = gcs_emulator.client().bucket(gcs_bucket[len("gs://"):])
    for blob in bucket.list_blobs(prefix=f"data/out.quarantine/{second.run_id}/"):
        bucket.copy_blob(blob, bucket, blob.name.replace("data/out.quarantine/",
                                                         "data/out2.quarantine/", 1))
    moved = f"{out2}.quarantine/{second.run_id}/{MARKER}"
    doc2 = json.loads(gcs_emulator.download(moved))
    gcs_emulator.upload_bytes(json.dumps({**doc2, "replaces": None}).encode(), moved)
    done = q("release", out2, env=env)
    assert (done.returncode, errors(done.stderr)) == (2, [
        f"error: refusing to release run {second.run_id}: its marker says it was blocked for "
        f"{out}, not {out2}, and {out2} does not publish the same job and span; release it "
        f"from {out}, or drop it"]), done.stderr
    assert gcs_emulator.list(f"{out2}/") == []
    assert [e.run_id for e in entries(out2)] == [second.run_id]


def test_gcs_kill9_while_quarantining_leaves_an_incomplete_entry(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str, proxy: GcsProxy) -> None:
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env(endpoint=proxy.url)
    job = gcs_published(tmp_path, out, env)
    pointer = gcs_emulator.download(f"{out}/_SUCCESS")
    pause = tmp_path / "pause"
    proc = start(["run", str(job)], "quarantine:copy", pause, env)
    wait_for(proc, "quarantine:copy", pause)
    proc.kill()
    proc.communicate(timeout=60)
    [cut] = entries(out)
    assert not cut.complete and len(gcs_emulator.list(cut.path)) >= 2
    listed = q("list", out, env=env)
    assert listed.stdout.splitlines() == [
        f"{cut.run_id}  span -  blocked {cut.created}  {cut.path} (incomplete: drop it)"]
    done = q("release", out, env=env)
    assert (done.returncode, errors(done.stderr)) == (2, [
        f"error: {cut.path}: its quarantine is incomplete (the run stopped while putting it "
        "there); drop it and rerun the span"])
    assert gcs_emulator.download(f"{out}/_SUCCESS") == pointer
    # the next run (it takes over the dead run's lock) removes the cut entry, then blocks again
    again = cli("run", str(job), env=env)
    assert again.returncode == 6, again.stderr
    assert (f"removed the incomplete quarantine of run {cut.run_id} ({cut.path}): its run "
            "stopped while putting it there") in again.stderr
    assert gcs_emulator.list(cut.path) == []
    [fresh] = entries(out)
    assert fresh.complete and fresh.run_id != cut.run_id
    assert gcs_emulator.download(f"{out}/_SUCCESS") == pointer


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM],
                         ids=lambda s: signal.Signals(s).name)
def test_gcs_signal_while_quarantining_is_before_publishing(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str, proxy: GcsProxy,
        signum: int) -> None:
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env(endpoint=proxy.url)
    job = gcs_published(tmp_path, out, env)
    pointer = gcs_emulator.download(f"{out}/_SUCCESS")
    pause = tmp_path / "pause"
    proc = start(["run", str(job)], "quarantine:copy", pause, env)
    wait_for(proc, "quarantine:copy", pause)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    [entry] = entries(out)
    name = signal.Signals(signum).name
    line = (f"interrupted by {name} before publishing: nothing was published, the previous "
            f"output is unchanged (the run is quarantined in {entry.path})")
    assert (proc.returncode, errors(err)) == (128 + signum, [f"error: {line}"]), err
    assert entry.complete and gcs_emulator.download(f"{out}/_SUCCESS") == pointer
    last = history.read(f"{gcs_bucket}/data")[-1]
    assert (last["status"], last["exit_code"], last["error"]) == (
        "interrupted", 128 + signum, line)


# ---- 6. property: randomly edited markers change nothing outside the entry --------------------
def mutations(tree: Tree, rng: random.Random) -> tuple[list[str], bytes]:
    """1-3 random edits of the marker (what an attacker or a bad copy could leave): the
    edits' names and the marker's new bytes."""
    doc = json.loads(tree.marker.read_text())
    outside = ["../../../sentinel/keep.txt", str(tree.sentinel / "keep.txt"), "/",
               f"{DATASET}/../../{DAY1}/manifest.json", f"{DATASET}/./x", "", ".", "..",
               f"../../{DAY1}", f"{DATASET}//manifest.json", "dataset\\..\\x", 7, None,
               os.path.join(tree.out1, "_SUCCESS")]
    outputs = [tree.out1, str(tree.sentinel), "/", "../x", "", 5, None,
               f"gs://b/{DAY2}", tree.out2 + "/../" + DAY1]
    run_ids = [tree.run_a, tree.run_b, "../x", "", 3, None, "/etc", tree.run_c + "/.."]
    edits = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["objects", "output", "run_id", "replaces", "missing", "types",
                           "producer", "manifest_sha256", "complete", "garbage", "span"])
        edits.append(kind)
        if kind == "objects":
            doc["objects"] = doc["objects"] + rng.sample(outside, rng.randint(1, 3))
        elif kind == "output":
            doc["output"] = rng.choice(outputs)
        elif kind == "run_id":
            doc["run_id"] = rng.choice(run_ids)
        elif kind == "replaces":
            doc["replaces"] = rng.choice([tree.run_a, tree.run_b, None, "x", 1])
        elif kind == "missing":
            doc.pop(rng.choice(sorted(doc)), None)
        elif kind == "types":
            doc[rng.choice(["objects", "run_key", "output"])] = rng.choice([{}, 1, "dataset", []])
        elif kind == "producer":
            doc["producer"] = rng.choice(["someone-else", None])
        elif kind == "manifest_sha256":
            doc["manifest_sha256"] = "0" * 64
        elif kind == "complete":
            doc["complete"] = rng.choice([False, "yes", 1])
        elif kind == "span":
            doc["span"] = rng.choice([DAY1, None, "../x"])
        else:
            return edits, bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    return edits, json.dumps(doc).encode()


def test_randomly_edited_markers_change_nothing_outside_the_entry(tmp_path: Path,
                                                                  base: Path) -> None:
    rng = random.Random(28)
    seen: dict[int, int] = {}
    for i in range(24):
        tree = Tree(tmp_path / f"t{i}", base)
        edits, raw = mutations(tree, rng)
        tree.marker.write_bytes(raw)
        action = rng.choice(["drop", "release"])
        before, out2_before = tree.outside(), digest(tree.out2)
        done = q(action, tree.out2, *rng.choice([[], ["--run", tree.run_c]]))
        what = f"{action} after {edits}: {raw[:300]!r}\n{done.stderr}"
        assert done.returncode in (0, 2, 3), what
        lines = done.stderr.strip().splitlines()
        assert len(lines) == (done.returncode != 0), what
        assert not lines or (lines[0].startswith("error: ") and "unexpected" not in lines[0]
                             and "Traceback" not in done.stderr), what
        assert tree.outside() == before, what
        if done.returncode == 0 and action == "release":  # published the entry, nothing else
            assert load_manifest(tree.out2)["run_id"] == tree.run_c, what
            assert verify(tree.out2)["records"] == 50
        else:
            assert digest(tree.out2) == out2_before, what
        if done.returncode == 0:
            assert not os.path.exists(tree.entry), what
        seen[done.returncode] = seen.get(done.returncode, 0) + 1
    assert set(seen) == {0, 2, 3}, seen  # the edits reach every outcome


# ---- 5 (local). the same cut and signal on a local output ------------------------------------
def test_kill9_or_a_signal_while_quarantining_locally(tmp_path: Path) -> None:
    """Locally the dataset is renamed into the entry: kill -9 after the marker leaves an
    incomplete entry the next run removes; a SIGTERM there completes the entry and says
    `before publishing` (exit 143)."""
    out = str(tmp_path / "out")
    job = gcs_published(tmp_path, out, dict(os.environ))
    before = digest(out)
    pause = tmp_path / "pause"
    proc = start(["run", str(job)], "quarantine:copy", pause)
    wait_for(proc, "quarantine:copy", pause)
    proc.kill()
    proc.communicate(timeout=60)
    [cut] = entries(out)
    assert not cut.complete and os.listdir(cut.path) == [MARKER]
    again = start(["run", str(job)], "quarantine:copy", tmp_path / "pause2")
    wait_for(again, "quarantine:copy", tmp_path / "pause2")
    assert not os.path.exists(cut.path)  # removed under the lock, before the run converted
    again.send_signal(signal.SIGTERM)
    _, err = again.communicate(timeout=120)
    [entry] = entries(out)
    line = ("interrupted by SIGTERM before publishing: nothing was published, the previous "
            f"output is unchanged (the run is quarantined in {entry.path})")
    assert (again.returncode, errors(err)) == (143, [f"error: {line}"]), err
    assert (f"removed the incomplete quarantine of run {cut.run_id} ({cut.path}): its run "
            "stopped while putting it there") in err
    assert entry.complete and entry.run_id != cut.run_id and digest(out) == before
    last = history.read(str(tmp_path))[-1]
    assert (last["status"], last["exit_code"], last["error"]) == ("interrupted", 143, line)


def test_a_blocked_run_never_quarantines_through_a_symlink(tmp_path: Path) -> None:
    """`OUT.quarantine` a link to someone's folder when a run of a job with checks starts (its
    listing refuses it, exit 3) or appears while it converts (`put` refuses it, exit 5): the
    run writes nothing there, publishes nothing, one line; the previous output verifies."""
    out = str(tmp_path / "out")
    job = gcs_published(tmp_path, out, dict(os.environ))
    before = digest(out)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("precious")
    link = tmp_path / "out.quarantine"
    os.symlink(theirs, link)
    done = cli("run", str(job))
    assert (done.returncode, errors(done.stderr)) == (3, [
        f"error: {link} is a symbolic link: quarantine never follows one; look at what it "
        "points to and remove the link by hand"]), done.stderr
    os.unlink(link)
    pause = tmp_path / "pause"
    proc = start(["run", str(job)], "write", pause)  # converting: the listing is behind it
    wait_for(proc, "write", pause)
    os.symlink(theirs, link)
    (pause / "write.go").touch()
    _, err = proc.communicate(timeout=120)
    [line] = errors(err)
    assert proc.returncode == 5 and line.startswith("error: cannot quarantine run ") and (
        f": {link} is a symbolic link: quarantine never follows one; remove the link, then "
        "run again (full log: ") in line, err
    assert sorted(os.listdir(theirs)) == ["keep.txt"] and digest(out) == before
    assert sorted(os.listdir(tmp_path / ".out.etl")) == ["logs"]  # the staged run removed
