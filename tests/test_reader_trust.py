"""Issue 28, point 2: readers never return wrong data. `open_records` (and the Grain and torch
entry points, which read through it) on outputs damaged or republished after they were
opened: every case one error naming the file, never records decoded from garbage, never the
new data under the old positions, never a crash of the reading process."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from benchmarks.faults_readers import ROWS, SCHEMA
from cli.run import run_job
from etl.formats.record_index import IndexFileError, parse_index
from etl.job.config import load_job
from etl.read.random_access import RecordsError, Republished, open_records
from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

# every feature optional: a damaged shard read as empty records would decode as the defaults
OPTIONAL_SCHEMA = SCHEMA


def write_job(d: Path, first_id: int = 1000, pad: int = 0, **extra: object) -> Path:
    """A CSV job of ROWS records of one size each (ids of 4 digits: a 2-byte varint; names
    of 5 characters, plus `pad` more; one float), 2 shards in input order: two runs with
    other ids write shards and index files of exactly the same sizes."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "schema.yaml").write_text(OPTIONAL_SCHEMA)
    rows = [f"{i},{i * 0.5},n{i}{'p' * pad}" for i in range(first_id, first_id + ROWS)]
    (d / "in.csv").write_text("id,x,name\n" + "\n".join(rows) + "\n")
    job = {"schema": "schema.yaml", "sources": {"train": {"format": "csv", "paths": ["in.csv"]}},
           "output": "out", "shards": 2, "shuffle": False, "compression": "none", **extra}
    (d / "job.yaml").write_text(json.dumps(job))
    return d / "job.yaml"


def run(job: Path) -> str:
    return run_job(load_job(str(job)), ["--runner=FnApiRunner"]).output


@pytest.fixture(scope="module")
def array_record_out(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("array_record.python.array_record_module")
    d = tmp_path_factory.mktemp("ar")
    return run(write_job(d, format="array_record", index=False))


@pytest.fixture(scope="module")
def tfrecord_out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run(write_job(tmp_path_factory.mktemp("tfr")))


def copy_of(out: str, to: Path) -> Path:
    shutil.copytree(out, to)
    return to


# ---- 1. a damaged ArrayRecord shard ----------------------------------------------------------
def damaged(out: str, to: Path, where: str) -> Path:
    """A copy of the output with its first shard damaged at `where`."""
    copy = copy_of(out, to)
    shard = copy / "train-00000-of-00002.array_record"
    data = bytearray(shard.read_bytes())
    if where == "truncated":
        data = data[:-100]
    elif where == "cut in half":
        data = data[:len(data) // 2]
    else:
        at = {"header": 30,  # the file signature chunk (Riegeli readers never check it)
              "first chunk": 64 + 20,  # record 0's chunk header
              "a chunk": 500,  # inside record 4's chunk data
              "footer": 65536 + 100,  # the footer (record index) and its postscript
              }[where]
        data[at] ^= 0xFF
    shard.write_bytes(bytes(data))
    return shard


@pytest.mark.parametrize("where, message", [
    ("header", "not an ArrayRecord file: byte 30 of its 64-byte Riegeli signature differs "
               "(damaged)"),
    ("first chunk", "record 0: damaged ArrayRecord data (chunk header hash mismatch, chunk "
                    "at 64)"),
    ("a chunk", r"record 4: damaged ArrayRecord data \(chunk data hash mismatch, chunk at \d+ "
                r"with length \d+\)"),
    ("footer", "not a readable ArrayRecord file (truncated or damaged: its footer cannot be "
               "read)"),
    ("truncated", "not a readable ArrayRecord file (truncated or damaged: its footer cannot "
                  "be read)"),
    ("cut in half", "not a readable ArrayRecord file (truncated or damaged: its footer cannot "
                    "be read)"),
])
def test_damaged_array_record_shard_is_an_error(array_record_out, tmp_path, where, message):
    """Before: with every feature optional, records of a cut shard decoded as the defaults."""
    shard = damaged(array_record_out, tmp_path / "out", where)
    records = open_records(tmp_path / "out")
    assert len(records) == ROWS
    assert records[150]["id"] == 1150  # the other shard reads
    with pytest.raises(RecordsError) as e:
        records[np.arange(ROWS)]
    assert re.fullmatch(re.escape(f"{shard}: ") + (message if where == "a chunk" else
                                                   re.escape(message))
                        + re.escape("; run `verify` on the output"), str(e.value)), str(e.value)
    assert e.value.exit_code == 3
    with pytest.raises(RecordsError) as again:  # again: the same error
        records[np.arange(ROWS)]
    assert str(again.value) == str(e.value)


def test_damaged_array_record_through_grain(array_record_out, tmp_path):
    grain = pytest.importorskip("grain.python")
    shard = damaged(array_record_out, tmp_path / "out", "cut in half")
    source = open_records(tmp_path / "out")
    ds = grain.MapDataset.source(source).batch(16)
    with pytest.raises(RecordsError, match=f"^{shard}: not a readable ArrayRecord file"):
        ds[0]
    assert ds[len(ds) - 1]["id"][-1] == 1000 + ROWS - 1  # the intact shard reads


# ---- 2. republished after opening ------------------------------------------------------------
def republish(job: Path, **extra: object) -> None:
    """Run the job again on other records of the same sizes (a new input: it rebuilds)."""
    write_job(job.parent, first_id=5000, **extra)
    run(job)


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_republished_since_opened(tmp_path, fmt):
    if fmt == "array_record":
        pytest.importorskip("array_record.python.array_record_module")
    extra = {"format": "array_record", "index": False} if fmt == "array_record" else {}
    job = write_job(tmp_path / "job", **extra)
    out = run(job)
    before = {p.name: p.stat().st_size for p in Path(out).iterdir()}
    records = open_records(out)
    worker_copy = pickle.dumps(records)
    assert records[0]["id"] == 1000  # shard 0 opened
    republish(job, **extra)
    after = {p.name: p.stat().st_size for p in Path(out).iterdir() if p.name != "manifest.json"}
    assert after == {k: v for k, v in before.items() if k != "manifest.json"}  # same sizes
    assert open_records(out)[0]["id"] == 5000
    # the shard opened before keeps reading the version opened (never the new records there)
    assert [int(v) for v in records[np.arange(0, 100, 7)]["id"]] == list(range(1000, 1100, 7))
    message = (f"{out}: the output was republished since it was opened (its manifest.json "
               "changed); open it again with open_records")
    with pytest.raises(Republished) as e:  # shard 1's first read
        records[150]
    assert str(e.value) == message
    with pytest.raises(Republished) as e:  # a batch across both
        records[[3, 120]]
    assert str(e.value) == message
    with pytest.raises(Republished) as e:  # a worker unpickling the reader opened before
        pickle.loads(worker_copy)[0]
    assert str(e.value) == message


# ---- 3. truncated in place while open --------------------------------------------------------
_TRUNCATE = textwrap.dedent("""\
    import os, sys
    import etl
    out, shard = sys.argv[1:3]
    records = etl.open_records(out)
    records[0], records[99]  # the first shard opened and read (mapped, before the fix)
    os.truncate(shard, 200)
    try:
        records[[90, 95, 99]]
        print("no error")
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
    print("alive")
    """)


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_truncated_while_open_is_an_error_not_sigbus(tmp_path, fmt):
    """Shards of ~1 MB (records of 10 kB: more than a reader's buffer holds)."""
    if fmt == "array_record":
        pytest.importorskip("array_record.python.array_record_module")
    extra = {"format": "array_record", "index": False} if fmt == "array_record" else {}
    out = Path(run(write_job(tmp_path / "job", pad=10_000, **extra)))
    shard = out / f"train-00000-of-00002.{fmt}"
    proc = subprocess.run([sys.executable, "-c", _TRUNCATE, str(out), str(shard)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "alive"
    if fmt == "tfrecord":
        assert lines[0].startswith(f"RecordsError: {shard}: cannot read: ")
        assert re.fullmatch(r"RecordsError: .*: cannot read: short read: 0 of \d+ bytes at offset "
                            r"\d+ \(the file is shorter than when it was opened: truncated\?\)",
                            lines[0]), lines[0]
    else:
        size = json.loads((out / "manifest.json").read_text())["splits"]["train"]["shards"][0][
            "num_bytes"]
        assert lines[0] == (f"RecordsError: {shard}: record 90: the shard is 200 bytes, "
                            f"manifest.json says {size}: truncated or replaced while open; run "
                            "`verify` on the output")  # before: b"" records, all defaults


# ---- 4. index files ----------------------------------------------------------------------------
def test_damaged_missing_or_short_index_files(tfrecord_out, tmp_path):
    out = copy_of(tfrecord_out, tmp_path / "out")
    index = out / "train-00001-of-00002.tfrecord.index"
    good = index.read_bytes()
    lines = good.decode().splitlines()

    def refused(data: bytes | None, error: type[Exception] = RecordsError) -> str:
        if data is None:
            index.unlink()
        else:
            index.write_bytes(data)
        with pytest.raises(error) as e:
            open_records(out)
        return str(e.value)

    assert refused(b"\n".join(x.encode() for x in lines[:50]) + b"\n") == (
        f"{index}: 50 entries, manifest.json lists 100 records for train-00001-of-00002.tfrecord")
    assert refused(good[:-1]) == (f"{index}: {len(good) - 1} bytes, manifest.json says "
                                  f"{len(good)}: damaged or not this output's index file; "
                                  "`verify` checks the whole output")
    assert refused(good[:7] + b"x" + good[8:], IndexFileError).startswith(f"{index}: line 2: ")
    huge = "\n".join(lines[:3] + ["99999999999999999999 66"] + lines[4:]) + "\n"  # > int64
    assert refused(huge.encode(), IndexFileError) == (
        f"{index}: line 4: expected 'OFFSET LENGTH', got b'99999999999999999999 66'")
    swapped = lines[:10] + [lines[11], lines[10]] + lines[12:]
    assert refused(("\n".join(swapped) + "\n").encode(), IndexFileError).startswith(
        f"{index}: line 11: offset ")
    # the same numbers and size, other bytes (a leading zero, the last newline dropped): only
    # the manifest's sha256 tells it is not the index file that was published
    other = b"0" + good[:-1]
    assert parse_index(other)[0].tolist() == parse_index(good)[0].tolist()
    assert refused(other) == (f"{index}: sha256 does not match manifest.json: damaged or not "
                              "this output's index file; `verify` checks the whole output")
    assert refused(None) == (f"{index}: index file missing (listed in manifest.json); `verify` "
                             "checks the whole output")
    index.write_bytes(good)
    assert open_records(out)[199]["id"] == 1199


def test_republished_since_opened_gs(tmp_path, gcs_emulator, gcs_bucket):
    """gs:// keeps the previous version for readers still in it: a reader opened before one
    republish reads the version it opened, whole; once that version is removed (two publishes
    later), `Republished`, never the new version's records."""
    out = f"{gcs_bucket}/rp/out"
    job = write_job(tmp_path / "job", output=out)
    run(job)
    records = open_records(out)
    assert records[0]["id"] == 1000
    opened = records.root
    write_job(tmp_path / "job", first_id=5000, output=out)
    run(job)
    assert open_records(out).root != opened and open_records(out)[0]["id"] == 5000
    assert [int(v) for v in records[[0, 150, 199]]["id"]] == [1000, 1150, 1199]
    for first in (6000, 7000):
        write_job(tmp_path / "job", first_id=first, output=out)
        run(job)
    fresh = open_records(out)
    assert [int(v) for v in fresh[[0, 199]]["id"]] == [7000, 7199]
    from etl.storage import fs  # noqa: PLC0415
    assert not fs.exists(f"{opened}/manifest.json")  # the version opened is gone
    message = (f"{out}: the output was republished since it was opened (its manifest.json "
               "changed); open it again with open_records")
    with pytest.raises(Republished) as e:
        records[[0, 150]]
    assert str(e.value) == message


def test_republished_through_grain_workers(tmp_path):
    """Grain's worker processes unpickle the reader opened before the republish: each one
    checks the version when it reads its indexes, and the error reaches the training loop."""
    grain = pytest.importorskip("grain.python")
    from absl import flags  # noqa: PLC0415 - grain 0.2.18 reads an unparsed flag: tests/test_grain.py

    flags.FLAGS.mark_as_parsed()  # the suite passed only when test_grain.py was imported first
    job = write_job(tmp_path / "job")
    out = run(job)
    records = open_records(out)
    sampler = grain.IndexSampler(len(records), shard_options=grain.NoSharding(), shuffle=True,
                                 num_epochs=1, seed=1)
    loader = grain.DataLoader(data_source=records, sampler=sampler, worker_count=2)
    assert sorted(int(r["id"]) for r in loader) == list(range(1000, 1000 + ROWS))
    republish(job)
    with pytest.raises(Republished) as e:  # Grain re-raises the worker's error
        list(loader)
    assert str(e.value) == (f"{out}: the output was republished since it was opened (its "
                            "manifest.json changed); open it again with open_records")


# ---- a damaged manifest ------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["cut", "splits a list", "shards a dict", "no path",
                                    "count text", "count negative", "empty"])
def test_damaged_manifest_is_refused_in_one_line(tfrecord_out, tmp_path, damage):
    out = copy_of(tfrecord_out, tmp_path / "out")
    path = out / "manifest.json"
    text = path.read_text()
    doc = json.loads(text)
    shards = doc["splits"]["train"]["shards"]
    if damage == "cut":
        path.write_text(text[: len(text) // 2])
    elif damage == "empty":
        path.write_text("")
    else:
        if damage == "splits a list":
            doc["splits"]["train"] = ["x"]
        elif damage == "shards a dict":
            doc["splits"]["train"]["shards"] = {"a": 1}
        elif damage == "no path":
            del shards[1]["path"]
        elif damage == "count text":
            shards[0]["num_records"] = "many"
        else:
            shards[0]["num_records"] = -5
        path.write_text(json.dumps(doc))
    with pytest.raises(RecordsError) as e:
        open_records(out)
    message = str(e.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    assert e.value.exit_code == 3


def test_sequential_array_record_reader_checks_the_signature(array_record_out, tmp_path):
    """etl.formats.array_record.Reader (what inspect, report and verify's record count read
    with) refuses what open_records refuses; Riegeli's hash values are left out."""
    from etl.base.errors import VerifyError  # noqa: PLC0415
    from etl.formats.array_record import read_file  # noqa: PLC0415

    shard = damaged(array_record_out, tmp_path / "sig", "header")
    with pytest.raises(VerifyError) as e:
        list(read_file(str(shard)))
    assert str(e.value) == (f"{shard}: not an ArrayRecord file: byte 30 of its 64-byte Riegeli "
                            "signature differs (damaged)")
    shard = damaged(array_record_out, tmp_path / "chunk", "a chunk")
    with pytest.raises(VerifyError) as e:
        list(read_file(str(shard)))
    assert re.fullmatch(re.escape(f"{shard}: damaged ArrayRecord data in records 0-99: chunk "
                                  "data hash mismatch, chunk at ") + r"\d+ with length \d+",
                        str(e.value)), str(e.value)
