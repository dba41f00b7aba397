"""A published output damaged after its publish (issue 28): the next run, `verify` and the
drift check notice it at the cost of one stat per file (one listing on gs://), never trust
it, never crash on it, and say what is wrong in one line naming the file.

- Any write since the publish (size, modification time or inode of a listed file, or the
  manifest's own modification time; on gs:// each object's generation and crc32c) is seen by
  `verify --quick` and the skip rule, and the run rebuilds the output (the heal rule of
  tests/test_heal.py). An output published by an older version (no such record) is checked
  by sizes, and the run says so.
- A missing, broken or misshapen manifest.json: `verify` exit 3 naming it; the run refuses
  the output in one line (not provably ours: tests/test_output_safety.py).
- A previous span damaged (a shard, stats.json, its manifest): drift compares with the last
  intact span of a dated job, or is not checked for a job without dates, in one line; a
  2 GB sparse stats.json is never read.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from etl.base.errors import VerifyError
from etl.output.layout import SUCCESS
from etl.output.manifest import NOT_SEALED, dataset_dir, verify
from etl.schedule import history
from etl.stats.dataset import STATS_MAX_BYTES, load_stats
from tests.gcs_emulator import GcsEmulator
from tests.helpers import ROOT, RUN, cli, flip_byte, shas
from tests.jobs import SHARD, ids_job

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

CURRENT = "already published and current (inputs, schema and job unchanged)"
INDEX = SHARD + ".index"


def heal_line(damage: str) -> str:
    return f"WARNING the published output is damaged: {damage}; rebuilding it\n"


def changed(path: Path) -> str:
    """The start of the quick check's line for a file written since the publish."""
    return f"{path}: changed since it was published: modified "


def test_a_changed_byte_is_noticed_by_the_next_run(tmp_path: Path) -> None:
    """A flipped byte (its modification time moves), a touched index file, an edited
    manifest: each is seen by `verify --quick` and by the next unforced run, which rebuilds
    the same data and says which file; then the run is a skip again."""
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    assert cli("run", job).returncode == 0
    good = shas(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["sealed"]["files"]) == {
        "schema.yaml", "schema.pbtxt", "dataset_info.json", "features.json", SHARD, INDEX,
        "train-00000-of-00002.tfrecord",
        "train-00000-of-00002.tfrecord.index"}
    for what in (SHARD, INDEX, "manifest.json"):
        path = out / what
        if what == SHARD:
            flip_byte(path)
        elif what == INDEX:
            os.utime(path)  # touched: same bytes, another time (a rebuild is cheap and sure)
        else:
            path.write_text(path.read_text().replace('"notes": []', '"notes": [ ]'))
        quick = cli("verify", str(out), "--quick")
        assert (quick.returncode, quick.stdout) == (3, "")
        assert quick.stderr.startswith(f"error: {changed(path)}"), quick.stderr
        assert len(quick.stderr.splitlines()) == 1
        damage = quick.stderr[len("error: "):-1]
        again = cli("run", job, "--progress", "none")
        assert again.returncode == 0, again.stderr
        assert again.stderr == heal_line(damage)
        assert shas(out) == good
        assert history.read(str(tmp_path))[-1]["rebuilt_reason"] == (
            f"the published output is damaged: {damage}")
        skip = cli("run", job)
        assert (skip.returncode, skip.stdout, skip.stderr) == (
            0, f"Skipped {out}: {CURRENT}\n", "")
    # another file put in the shard's place (same bytes and time, another inode: written
    # beside it, then renamed over it, as an editor saves): seen too
    st = (out / SHARD).stat()
    (tmp_path / "copy").write_bytes((out / SHARD).read_bytes())
    os.utime(tmp_path / "copy", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp_path / "copy", out / SHARD)
    quick = cli("verify", str(out), "--quick")
    assert (quick.returncode, quick.stderr) == (3, (
        f"error: {out / SHARD}: changed since it was published: another file (inode "
        f"{(out / SHARD).stat().st_ino}, published as inode {st.st_ino})\n"))
    # the full check reads every byte and judges by bytes alone: that file is whole
    assert cli("verify", str(out)).returncode == 0


def test_an_output_published_without_the_record_is_checked_by_sizes(tmp_path: Path) -> None:
    """A manifest of an older version (no `sealed`): the skip rule compares sizes as before
    and says so; a shard of another size is still rebuilt."""
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    assert cli("run", job).returncode == 0
    doc = json.loads((out / "manifest.json").read_text())
    del doc["sealed"]
    (out / "manifest.json").write_text(json.dumps(doc, indent=1))
    flip_byte(out / SHARD)
    assert cli("verify", str(out), "--quick").returncode == 0
    skip = cli("run", job)
    assert (skip.returncode, skip.stdout, skip.stderr) == (
        0, f"Skipped {out}: {CURRENT}\n", f"WARNING {out}: {NOT_SEALED}\n")
    os.truncate(out / SHARD, 10)
    again = cli("run", job, "--progress", "none")
    assert again.returncode == 0
    assert again.stderr.startswith("WARNING the published output is damaged: "
                                   f"{out / SHARD}: 10 bytes on disk, manifest says ")
    assert "sealed" in json.loads((out / "manifest.json").read_text())  # recorded again


def test_a_changed_object_is_noticed_on_gcs(tmp_path: Path, gcs_emulator: GcsEmulator,
                                            gcs_bucket: str) -> None:
    """gs://: the pointer records each object's generation and crc32c at publish; an object
    rewritten with other bytes of the same size is seen from one listing and rebuilt."""
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env()
    job = ids_job(tmp_path / "job", out)
    run = [sys.executable, RUN, "run", job, "--progress", "none"]
    assert subprocess.run(run, cwd=ROOT, env=env, capture_output=True,
                          timeout=120).returncode == 0
    pointer = json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))
    version = pointer["version"]
    assert {SHARD, INDEX, "manifest.json", SUCCESS} <= set(pointer["objects"])
    bucket, key = f"{out}/{version}/{SHARD}"[5:].split("/", 1)
    blob = gcs_emulator.client().bucket(bucket).blob(key)
    data = bytearray(blob.download_as_bytes())
    data[40] ^= 1
    blob.upload_from_string(bytes(data))
    blob.reload()
    was = pointer["objects"][SHARD]
    damage = (f"{out}/{version}/{SHARD}: changed since it was published: generation "
              f"{blob.generation} (crc32c {blob.crc32c}) in the bucket, {was[0]} (crc32c "
              f"{was[1]}) when published")
    quick = subprocess.run([sys.executable, RUN, "verify", out, "--quick"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert (quick.returncode, quick.stderr) == (3, f"error: {damage}\n")
    again = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert heal_line(damage) in again.stderr
    assert json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))["version"] != version
    assert verify(dataset_dir(out))["records"] == 300
    skip = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert skip.returncode == 0 and skip.stdout == f"Skipped {out}: {CURRENT}\n", skip.stdout


MANIFEST_DAMAGE = [
    ("missing", None, "missing: nothing in {out} can be checked without it (damaged, or not a "
                      "dataset written by this project)"),
    ("broken", "{broken", "damaged: not valid JSON (Expecting property name enclosed in double "
                          "quotes at line 1, column 2)"),
    ("binary", "\udcff", "damaged: not UTF-8 text (byte 0)"),
    ("list", "[]", "damaged: a JSON list, not an object"),
    ("no splits", '{"files": {}}', "damaged: no `splits` object"),
    ("outside", '{"splits": {"train": {"num_records": 1, "shards": [{"path": "../x", '
                '"num_bytes": 1, "num_records": 1, "sha256": "0"}]}}}',
     "damaged: split 'train', shard 0: '../x' is not a file name inside the output"),
]


@pytest.mark.parametrize(("case", "content", "line"), MANIFEST_DAMAGE,
                         ids=[c[0] for c in MANIFEST_DAMAGE])
def test_a_damaged_or_missing_manifest_is_one_line_exit_3(
        tmp_path: Path, case: str, content: str | None, line: str) -> None:
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    assert cli("run", job).returncode == 0
    path = out / "manifest.json"
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
    before = sorted(p.name for p in out.iterdir())
    for args in (["--quick"], []):
        got = cli("verify", str(out), *args)
        assert (got.returncode, got.stdout, got.stderr) == (
            3, "", f"error: {path}: {line.format(out=out)}\n")
    again = cli("run", job, "--progress", "none")  # not provably ours: refused, untouched
    assert again.returncode == 2 and len(again.stderr.splitlines()) == 1, again.stderr
    assert again.stderr.startswith(f"error: refusing output {out}: ")
    assert sorted(p.name for p in out.iterdir()) == before


def test_damaged_index_files_are_refused_by_verify_and_rebuilt(tmp_path: Path) -> None:
    """An index file with a changed line (its time put back: only the full check reads it)
    fails `verify` naming the file and line; cut short, the quick check and the run see it."""
    out = tmp_path / "out"
    job = ids_job(tmp_path / "job", str(out))
    assert cli("run", job).returncode == 0
    index = out / INDEX
    st = index.stat()
    lines = index.read_bytes().split(b"\n")
    first = lines[0].split(b" ")
    lines[0] = first[0] + b" " + str(int(first[1]) + 1).encode()[-len(first[1]):]
    index.write_bytes(b"\n".join(lines))
    os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns))
    full = cli("verify", str(out))
    assert full.returncode == 3 and full.stderr.startswith(f"error: {index}: line 1: ")
    assert len(full.stderr.splitlines()) == 1
    os.truncate(index, st.st_size - 3)
    quick = cli("verify", str(out), "--quick")
    assert (quick.returncode, quick.stderr) == (
        3, f"error: {index}: {st.st_size - 3} bytes on disk, manifest says {st.st_size}\n")
    again = cli("run", job, "--progress", "none")
    assert again.returncode == 0 and again.stderr == heal_line(quick.stderr[7:-1])
    assert cli("verify", str(out)).returncode == 0


# --- the previous span as a drift baseline ---------------------------------------------------

DAYS = ("2026-01-01", "2026-01-02", "2026-01-03")


def dated_job(folder: Path, dated: bool = True) -> str:
    """ids over one CSV per day; a warn-level drift check (it needs a previous span)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(
        "name: ids\nkind: example\nfeatures:\n  id: {dtype: int64, shape: []}\n"
        "  x: {dtype: float32, shape: [2], source: [a, b]}\n")
    for n, day in enumerate(DAYS):
        (folder / f"{day}.csv").write_text("id,a,b\n" + "".join(
            f"{i},{i * 0.5 + n},{-i}\n" for i in range(200)))
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "schema.yaml", "output": "out/{date}" if dated else "out/all", "shards": 2,
        "sources": {"train": {"format": "csv",
                              "paths": ["{date}.csv" if dated else "2026-01-01.csv"]}},
        "checks": {"warn": {"drift": 0.99, "records": {"max_change": 0.5}}}}))
    return str(folder / "job.yaml")


def test_drift_skips_a_damaged_previous_span(tmp_path: Path) -> None:
    """The previous span's shard and stats.json damaged: the next span compares with the
    last intact span and says so in one line; with its manifest broken, the line names the
    manifest. A job without dates (its previous output is the one being rebuilt) checks no
    drift, says so, and rebuilds."""
    job = dated_job(tmp_path / "job")
    out = tmp_path / "job" / "out"
    for day in DAYS[:2]:
        assert cli("run", job, "--date", day, "--progress", "none").returncode == 0
    d2 = out / DAYS[1]
    flip_byte(d2 / SHARD)
    with open(d2 / "stats.json", "r+b") as fh:
        fh.write(b"{garbage")
    third = cli("run", job, "--date", DAYS[2], "--progress", "none")
    assert third.returncode == 0, third.stderr
    assert third.stderr.startswith(
        f"WARNING drift compared with {out / DAYS[0]}: the previous span's output {d2} is "
        f"damaged ({changed(d2 / 'stats.json')}"), third.stderr
    assert len(third.stderr.splitlines()) == 1

    (d2 / "manifest.json").write_text("{")
    fourth = cli("run", job, "--date", DAYS[2], "--force", "--progress", "none")
    assert fourth.returncode == 0, fourth.stderr
    assert fourth.stderr == (
        f"WARNING drift compared with {out / DAYS[0]}: the previous span's output {d2} is "
        f"damaged ({d2 / 'manifest.json'}: damaged: not valid JSON (Expecting property name "
        "enclosed in double quotes at line 1, column 2))\n")

    undated = dated_job(tmp_path / "undated", dated=False)
    out = tmp_path / "undated" / "out" / "all"
    assert cli("run", undated, "--progress", "none").returncode == 0
    flip_byte(out / SHARD)
    with open(out / "stats.json", "r+b") as fh:
        fh.write(b"{garbage")
    again = cli("run", undated, "--progress", "none")
    assert again.returncode == 0, again.stderr
    lines = again.stderr.splitlines()
    assert lines[0].startswith("WARNING the published output is damaged: "
                               f"{changed(out / 'stats.json')}")
    assert lines[1].startswith(
        f"WARNING drift and records.max_change not checked: the previous output {out} is "
        "damaged ("), lines
    assert lines[1].endswith("), no baseline") and len(lines) == 2


def test_a_2gb_sparse_stats_json_is_not_read(tmp_path: Path) -> None:
    """Sealed: its size differs from the manifest's, so the output is damaged without a read.
    Listed at that size (the record removed, the manifest edited to match): refused above
    STATS_MAX_BYTES in one line, before a byte is read; memory stays flat."""
    job = dated_job(tmp_path / "job")
    out = tmp_path / "job" / "out"
    assert cli("run", job, "--date", DAYS[0], "--progress", "none").returncode == 0
    stats = out / DAYS[0] / "stats.json"
    os.truncate(stats, 2 << 30)
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], "
             "capture_output=True, text=True); print(r.returncode); print(r.stderr, end=''); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    got = subprocess.run([sys.executable, "-c", probe, sys.executable, RUN, "run", job,
                          "--date", DAYS[1], "--progress", "none"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    code, *err, rss_kb = got.stdout.splitlines()
    assert code == "0", got.stdout
    listed = json.loads((out / DAYS[0] / "manifest.json").read_text())["files"]["stats.json"]
    assert err == [f"WARNING drift and records.max_change not checked: the previous output "
                   f"{out / DAYS[0]} is damaged ({stats}: {2 << 30} bytes on disk, manifest "
                   f"says {listed['num_bytes']}), no baseline"]
    assert int(rss_kb) < 1_500_000, rss_kb  # a whole read took 2.4 GB

    doc = json.loads((out / DAYS[0] / "manifest.json").read_text())
    del doc["sealed"]
    doc["files"]["stats.json"]["num_bytes"] = 2 << 30
    (out / DAYS[0] / "manifest.json").write_text(json.dumps(doc))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(VerifyError) as e:
        load_stats(str(out / DAYS[0]))
    assert str(e.value) == (f"{stats}: the manifest lists {2 << 30} bytes, above the "
                            f"{STATS_MAX_BYTES >> 20} MiB a stats.json may have: not read")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100_000


def test_a_damaged_manifest_on_gcs_is_one_line(tmp_path: Path, gcs_emulator: GcsEmulator,
                                              gcs_bucket: str) -> None:
    """gs://: a manifest object that is not a manifest: `verify` exit 3 naming it, and the
    next run neither trusts nor crashes on it."""
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env()
    job = ids_job(tmp_path / "job", out)
    run = [sys.executable, RUN, "run", job, "--progress", "none"]
    assert subprocess.run(run, cwd=ROOT, env=env, capture_output=True,
                          timeout=120).returncode == 0
    version = json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))["version"]
    bucket, key = f"{out}/{version}/manifest.json"[5:].split("/", 1)
    gcs_emulator.client().bucket(bucket).blob(key).upload_from_string(b"[]")
    got = subprocess.run([sys.executable, RUN, "verify", out], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert (got.returncode, got.stderr) == (
        3, f"error: {out}/{version}/manifest.json: damaged: a JSON list, not an object\n")
    again = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    damage = f"{out}/{version}/manifest.json: damaged: a JSON list, not an object"
    assert (again.returncode, again.stderr) == (
        0, f"WARNING {damage}; not trusted: the output is rebuilt\n")
    assert json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))["version"] != version
    assert verify(dataset_dir(out))["records"] == 300


def test_an_old_gcs_pointer_without_the_record_is_checked_by_sizes(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    """gs:// output published by an older version (its pointer has no `objects`): sizes are
    compared as before and the skip says so."""
    out = f"{gcs_bucket}/data/out"
    env = gcs_emulator.env()
    job = ids_job(tmp_path / "job", out)
    run = [sys.executable, RUN, "run", job, "--progress", "none"]
    assert subprocess.run(run, cwd=ROOT, env=env, capture_output=True,
                          timeout=120).returncode == 0
    pointer = json.loads(gcs_emulator.download(f"{out}/{SUCCESS}"))
    del pointer["objects"]
    bucket, key = f"{out}/{SUCCESS}"[5:].split("/", 1)
    gcs_emulator.client().bucket(bucket).blob(key).upload_from_string(json.dumps(pointer))
    quick = subprocess.run([sys.executable, RUN, "verify", out, "--quick"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert quick.returncode == 0, quick.stderr
    skip = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert (skip.returncode, skip.stdout, skip.stderr) == (
        0, f"Skipped {out}: {CURRENT}\n", f"WARNING {out}: {NOT_SEALED}\n")
