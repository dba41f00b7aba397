"""A span a quality check blocks is quarantined, not published (etl.quality, etl.output.quarantine),
as a user meets it: `run_pipeline.py run` in subprocesses.

Span N (iris, three classes) is published; span N+1 has its label column collapsed to one
class. N+1 exits 6 with one line per failed check; N stays current and verifies, byte for
byte; the quarantine beside the output holds N+1's dataset, checks.json (exact values) and
report.html; a rerun stays blocked without running; `quarantine release` publishes N+1 through
the normal publish path; `quarantine drop` removes exactly what the marker lists; a release
after the output moved on is refused; `run --accept` publishes and the history says so. The
same on gs:// against the emulator behind the precondition proxy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from etl.output.manifest import dataset_dir, load_manifest, verify
from etl.output.quarantine import CHECKS, DATASET, MARKER, PAGE, entries, root
from etl.quality.stats import published_stats
from etl.schedule import history
from tests.gcs_emulator import GcsEmulator
from tests.gcs_proxy import GcsProxy
from tests.helpers import ROOT, cli
from tests.jobs import iris_job, write_iris

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

def digests(folder: str) -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as fh:
            out[name] = hashlib.sha256(fh.read()).hexdigest()
    return out


def blocked_lines(stderr: str) -> list[str]:
    return [line.strip() for line in stderr.splitlines() if line.startswith("  blocked: ")]


def expected_blocks(out: str) -> list[str]:
    """Span N+1 (one class) against span N: the L-infinity of the label shares is 1 minus
    the share N's split gives that class (exact counts from N's statistics)."""
    stats = published_stats(out)["features"]["label"]["splits"]
    drift = []
    for split in ("train", "test"):
        counts = dict(stats[split]["value_counts"])
        linf = round(1 - counts[0] / sum(counts.values()), 6)
        drift.append(f"blocked: features.label.drift, split {split}: measured {linf!r}, "
                     "must be at most 0.1")
    return drift + [f"blocked: features.label.distinct.min, split {split}: measured 1, must be "
                    "at least 2" for split in ("train", "test")]


def test_blocked_span_is_quarantined_released_and_dropped(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    job = iris_job(tmp_path, out)
    first = cli("run", str(job))
    assert first.returncode == 0, first.stderr
    assert "drift and records.max_change checks passed: no previous span to compare with" \
        in first.stderr
    before = digests(out)
    run_n = load_manifest(out)["run_id"]
    expected = expected_blocks(out)

    write_iris(tmp_path / "iris.csv", collapse=True)
    blocked = cli("run", str(job))
    assert blocked.returncode == 6, blocked.stderr
    assert blocked_lines(blocked.stderr) == expected
    [entry] = entries(out)
    head = [line for line in blocked.stderr.splitlines() if line.startswith("error: ")]
    assert head == [
        f"error: {out} blocked by 4 quality check(s): nothing published (the previous output "
        f"is unchanged); the run is quarantined in {entry.path} (checks.json, report.html); "
        f"publish it with `run_pipeline.py quarantine release {out}` or `run --accept`, or "
        f"remove it with `quarantine drop {out}`"]
    # N is current and whole, byte for byte
    assert digests(out) == before and load_manifest(out)["run_id"] == run_n
    assert verify(out)["records"] == 50
    # the quarantine: beside the output, our marker, the dataset, checks.json, the page
    assert entry.path == os.path.join(str(tmp_path / "out.quarantine"), entry.run_id)
    assert (entry.replaces, entry.complete) == (run_n, True)
    assert sorted(os.listdir(entry.path)) == sorted([MARKER, DATASET, CHECKS, PAGE])
    doc = json.loads(Path(entry.path, CHECKS).read_text())
    assert [f"blocked: {c['check']}, split {c['split']}: measured {c['measured']!r}, must be "
            f"at {'least' if c['check'].endswith('min') else 'most'} {c['threshold']}"
            for c in doc["checks"] if c["level"] == "block"] == expected
    page = Path(entry.path, PAGE).read_text()
    assert page.index("Failed quality checks") < page.index("<h1>Dataset report")
    staged = load_manifest(os.path.join(entry.path, DATASET))
    assert staged["run_id"] == entry.run_id
    assert sum(s["num_records"] for s in staged["splits"].values()) == 50

    # a rerun with the same inputs stays blocked, without running or quarantining again
    again = cli("run", str(job))
    assert again.returncode == 6
    assert "still blocked, not run again" in again.stderr
    assert blocked_lines(again.stderr) == expected
    assert [e.run_id for e in entries(out)] == [entry.run_id]
    assert digests(out) == before

    listed = cli("quarantine", "list", out)
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[1:5] == [f"  {line}" for line in expected]

    released = cli("quarantine", "release", out)
    assert (released.returncode, released.stdout.strip()) == (
        0, f"released run {entry.run_id}: {out} publishes it now"), released.stderr
    assert load_manifest(out)["run_id"] == entry.run_id
    assert verify(out)["records"] == 50
    assert not os.path.exists(root(out))
    # the released span is current: a rerun skips it
    rerun = cli("run", str(job))
    assert rerun.returncode == 0 and "already published and current" in rerun.stdout
    statuses = [(e["status"], e["exit_code"]) for e in history.read(str(tmp_path))]
    assert statuses == [("ok", 0), ("blocked", 6), ("blocked", 6), ("released", 0),
                        ("skipped", 0)]


def test_drop_removes_only_what_the_marker_lists(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    job = iris_job(tmp_path, out)
    assert cli("run", str(job)).returncode == 0
    before = digests(out)
    write_iris(tmp_path / "iris.csv", collapse=True)
    assert cli("run", str(job)).returncode == 6
    [entry] = entries(out)
    Path(entry.path, "notes.txt").write_text("mine")  # a user's file: never ours to remove
    dropped = cli("quarantine", "drop", out)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.startswith(f"dropped run {entry.run_id}: removed {entry.path}")
    assert os.listdir(entry.path) == ["notes.txt"]
    assert entries(out) == [] and digests(out) == before
    # dropped: the next run of the same inputs runs (and blocks) again
    again = cli("run", str(job))
    assert again.returncode == 6 and "not run again" not in again.stderr
    assert len(entries(out)) == 1


def test_release_refuses_an_output_that_moved_on(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    job = iris_job(tmp_path, out)
    assert cli("run", str(job)).returncode == 0
    write_iris(tmp_path / "iris.csv", collapse=True)
    assert cli("run", str(job)).returncode == 6
    [entry] = entries(out)
    # another good day is published meanwhile: the blocked run would replace newer data
    data = (tmp_path / "iris.csv")
    write_iris(data)
    data.write_text(data.read_text() + "5.0,3.0,1.5,0.2,Iris-setosa\n")
    assert cli("run", str(job)).returncode == 0
    now = load_manifest(out)["run_id"]
    refused = cli("quarantine", "release", out)
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith(
        f"error: refusing to release run {entry.run_id}: {out} has moved on since it was "
        f"blocked (it published run {entry.replaces} then, run {now} now)")
    assert load_manifest(out)["run_id"] == now and len(entries(out)) == 1


def test_accept_publishes_a_blocked_span_and_the_history_says_so(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    job = iris_job(tmp_path, out)
    assert cli("run", str(job)).returncode == 0
    expected = expected_blocks(out)
    write_iris(tmp_path / "iris.csv", collapse=True)
    assert cli("run", str(job)).returncode == 6
    [entry] = entries(out)
    accepted = cli("run", str(job), "--accept")
    assert accepted.returncode == 0, accepted.stderr
    assert f"released run {entry.run_id}" in accepted.stderr
    assert load_manifest(out)["run_id"] == entry.run_id and entries(out) == []
    last = history.read(str(tmp_path))[-1]
    assert (last["status"], last["accepted"], last["run_id"]) == ("ok", True, entry.run_id)
    # with nothing in quarantine, --accept runs the span and publishes despite the checks
    shutil.rmtree(out)
    fresh = cli("run", str(job), "--accept")
    assert fresh.returncode == 0, fresh.stderr
    assert [line.split("WARNING ", 1)[1] for line in fresh.stderr.splitlines()
            if "accepted (--accept)" in line] == [
        f"accepted (--accept): {line}" for line in expected[2:]]
    last = history.read(str(tmp_path))[-1]
    assert (last["status"], last["accepted"]) == ("ok", True)
    assert [c["check"] for c in last["checks"]] == ["features.label.distinct.min"] * 2


# ---- gs:// ------------------------------------------------------------------------------------
@pytest.fixture
def proxy(gcs_emulator: GcsEmulator) -> Any:
    with GcsProxy(gcs_emulator.endpoint) as p:
        yield p


def test_gcs_blocked_span_is_quarantined_then_released_and_dropped(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str, proxy: GcsProxy) -> None:
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env(endpoint=proxy.url)
    job = iris_job(tmp_path, out)
    assert cli("run", str(job), env=env).returncode == 0
    version_n = json.loads(gcs_emulator.download(f"{out}/_SUCCESS"))["version"]
    expected = expected_blocks(out)
    write_iris(tmp_path / "iris.csv", collapse=True)
    blocked = cli("run", str(job), env=env)
    assert blocked.returncode == 6, blocked.stderr
    assert blocked_lines(blocked.stderr) == expected
    assert json.loads(gcs_emulator.download(f"{out}/_SUCCESS"))["version"] == version_n
    assert verify(out)["records"] == 50
    [entry] = entries(out)
    assert entry.path == f"{gcs_bucket}/data/out.quarantine/{entry.run_id}"
    doc = json.loads(gcs_emulator.download(f"{entry.path}/{CHECKS}"))
    assert [c["measured"] for c in doc["checks"]][2:] == [1, 1]
    released = cli("quarantine", "release", out, env=env)
    assert released.returncode == 0, released.stderr
    assert json.loads(gcs_emulator.download(f"{out}/_SUCCESS"))["version"] == entry.run_id
    assert dataset_dir(out).endswith(entry.run_id) and verify(out)["records"] == 50
    assert entries(out) == []
    # block again (other inputs), then drop: the output stays what release published
    write_iris(tmp_path / "iris.csv", collapse=True)
    (tmp_path / "iris.csv").write_text((tmp_path / "iris.csv").read_text()
                                       + "5.0,3.0,1.5,0.2,Iris-setosa\n")
    assert cli("run", str(job), env=env).returncode == 6
    [second] = entries(out)
    dropped = cli("quarantine", "drop", out, env=env)
    assert dropped.returncode == 0, dropped.stderr
    assert entries(out) == []
    bucket = gcs_emulator.client().bucket(gcs_bucket[len("gs://"):])
    assert list(bucket.list_blobs(prefix=f"data/out.quarantine/{second.run_id}/")) == []
    assert json.loads(gcs_emulator.download(f"{out}/_SUCCESS"))["version"] == entry.run_id


def test_drift_compares_with_the_previous_day_under_the_output_given_on_the_command_line(
        tmp_path: Path) -> None:
    """A dated job run with `--output` (as the Airflow DAG does with ETL_OUTPUT): the previous
    day is looked for under that template, not under the job file's `output:` (which holds an
    unrelated dataset for that day here, and nothing for the others)."""
    for day in ("2026-11-20", "2026-11-21"):
        (tmp_path / day).mkdir()
        write_iris(tmp_path / day / "iris.csv", collapse=day == "2026-11-21")
    job = tmp_path / "job.yaml"
    job.write_text(f"schema: {ROOT}/schemas/iris.yaml\n"
                   "source: {format: csv, paths: ['{date}/iris.csv']}\n"
                   "split: {train: 0.8, test: 0.2}\n"
                   "output: 'file-out/{date}'\nshuffle: {seed: 7}\nshards: 2\n"
                   "checks: {block: {features: {label: {drift: 0.1}}}}\n")
    # the job file's own output for 2026-11-20 holds the collapsed day: no drift against it
    first = cli("run", str(job), "--date", "2026-11-20")
    assert first.returncode == 0, first.stderr
    shutil.rmtree(tmp_path / "file-out" / "2026-11-20")
    (tmp_path / "2026-11-20" / "iris.csv").write_bytes((tmp_path / "2026-11-21" / "iris.csv").read_bytes())
    assert cli("run", str(job), "--date", "2026-11-20").returncode == 0
    write_iris(tmp_path / "2026-11-20" / "iris.csv")
    template = str(tmp_path / "cli-out" / "{date}")
    ok = cli("run", str(job), "--date", "2026-11-20", "--output", template)
    assert ok.returncode == 0, ok.stderr
    blocked = cli("run", str(job), "--date", "2026-11-21", "--output", template)
    assert blocked.returncode == 6, blocked.stderr
    assert blocked_lines(blocked.stderr) == [
        line for line in expected_blocks(str(tmp_path / "cli-out" / "2026-11-20"))
        if ".drift" in line]
    assert not (tmp_path / "cli-out" / "2026-11-21").exists()


def test_accept_refuses_a_damaged_entry(tmp_path: Path) -> None:
    """`run --accept` releases through the same check as `quarantine release`: a shard of the
    quarantined run deleted while it waited is refused in one line (exit 3), the published
    span untouched and the entry kept."""
    out = str(tmp_path / "out")
    job = iris_job(tmp_path, out)
    assert cli("run", str(job)).returncode == 0
    before = digests(out)
    write_iris(tmp_path / "iris.csv", collapse=True)
    assert cli("run", str(job)).returncode == 6
    [entry] = entries(out)
    shard = load_manifest(os.path.join(entry.path, DATASET))["splits"]["test"]["shards"][0]
    gone = os.path.join(entry.path, DATASET, shard["path"])
    os.remove(gone)
    accepted = cli("run", str(job), "--accept")
    assert accepted.returncode == 3, accepted.stderr
    assert [line for line in accepted.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: refusing to release run {entry.run_id}: {gone} is missing (listed in its "
        "manifest); drop it and rerun the span"]
    assert digests(out) == before and [e.run_id for e in entries(out)] == [entry.run_id]


def test_a_symlinked_quarantine_folder_is_refused(tmp_path: Path) -> None:
    """`OUT.quarantine` itself a link (to a folder holding someone's files): never listed
    through, dropped through or released through; one line, exit 3."""
    elsewhere = tmp_path / "elsewhere" / "RUN1"
    elsewhere.mkdir(parents=True)
    (elsewhere / MARKER).write_text(json.dumps({
        "producer": "tfrecord-etl", "run_id": "RUN1", "run_key": "k", "output": "x",
        "objects": ["checks.json"], "complete": True}))
    (elsewhere / CHECKS).write_text("precious")
    os.symlink(tmp_path / "elsewhere", tmp_path / "out.quarantine")
    for action in ("list", "drop", "release"):
        done = cli("quarantine", action, str(tmp_path / "out"))
        assert (done.returncode, done.stderr.strip()) == (
            3, f"error: {tmp_path / 'out.quarantine'} is a symbolic link: quarantine never "
               "follows one; look at what it points to and remove the link by hand")
    assert (elsewhere / CHECKS).read_text() == "precious"
