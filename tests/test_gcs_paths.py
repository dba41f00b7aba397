"""gs:// wherever a path is accepted, against a real GCS emulator on loopback.

- every source format reads the same blocks from a bucket as from disk (globs, paired files,
  image folders, split reads with ranged reads);
- a job file and schema file in a bucket: relative paths resolve against the job's gs://
  folder (`../` too, but never out of the bucket);
- `run gs://…/job.yaml` (CLI subprocess: raw CSV + npy + IDX in the bucket, output and temp
  location in the bucket) gives the same shard sha256 as the same job run from local files to
  a local output; `verify gs://…` passes in a few seconds (Beam's credential lookup skipped)
  and `inspect gs://…` prints the records;
- errors on gs://: a source glob matching nothing and a missing schema exit 2 with one line.

TensorFlow's own gs:// client (`make_dataset('gs://…')`) cannot be pointed at an emulator:
only its path building is tested here.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from etl.base.errors import ConfigError, SchemaError
from etl.contract.schema import load_schema
from etl.formats.idx import write_idx
from etl.formats.tfrecord import frame_all
from etl.job.config import load_job
from etl.output.manifest import dataset_dir
from etl.sources import make_reader
from etl.sources.base import Block
from etl.storage import fs
from tests.gcs_emulator import GcsEmulator
from tests.helpers import IDS_SCHEMA, cli

WHERE = "job.yaml: sources.train"


def upload_tree(emulator: GcsEmulator, local: Path, url: str) -> list[str]:
    """Every file below `local` to the same relative names below gs:// `url`."""
    done = []
    for path in sorted(local.rglob("*")):
        if path.is_file():
            target = f"{url}/{path.relative_to(local).as_posix()}"
            emulator.upload(str(path), target)
            done.append(target)
    return done


def png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


# ---- every format: the same blocks from a bucket as from disk --------------------------------
def _csv(d: Path) -> dict[str, Any]:
    (d / "csv").mkdir()
    for k in range(3):
        rows = "".join(f"{i},{i * 0.5},{-i}\n" for i in range(k * 40, (k + 1) * 40))
        (d / "csv" / f"part-{k}.csv").write_text("id,a,b\n" + rows)
    (d / "csv" / "notes.txt").write_text("not matched by *.csv")
    return {"format": "csv", "paths": ["csv/part-*.csv"]}


def _jsonl(d: Path) -> dict[str, Any]:
    (d / "j").mkdir()
    for k in range(2):
        (d / "j" / f"{k}.jsonl").write_text("".join(
            json.dumps({"id": i, "v": [i, i + 1]}) + "\n" for i in range(k * 30, k * 30 + 30))
            + "{broken\n")
    return {"format": "jsonl", "paths": "j/*.jsonl"}


def _text(d: Path) -> dict[str, Any]:
    (d / "t").mkdir()
    (d / "t" / "a.txt").write_text("".join(f"line {i} of a\n" for i in range(50)))
    (d / "t" / "b.txt.gz").write_bytes(gzip.compress(
        "".join(f"gz line {i}\n" for i in range(20)).encode(), mtime=0))
    return {"format": "text", "paths": ["t/*.txt", "t/*.txt.gz"]}


def _parquet(d: Path) -> dict[str, Any]:
    (d / "p").mkdir()
    for k in range(2):
        table = pa.table({"id": np.arange(k * 100, k * 100 + 100),
                          "x": np.linspace(0, 1, 100, dtype=np.float32)})
        pq.write_table(table, d / "p" / f"{k}.parquet", row_group_size=25)
    return {"format": "parquet", "paths": "p/*.parquet"}


def _idx(d: Path) -> dict[str, Any]:
    (d / "idx").mkdir()
    rng = np.random.default_rng(5)
    for k in range(2):
        write_idx(str(d / "idx" / f"img-{k}.gz"), rng.integers(0, 256, (30, 4, 4), dtype=np.uint8))
        write_idx(str(d / "idx" / f"lab-{k}.gz"), np.arange(30, dtype=np.uint8) % 10)
    return {"format": "idx", "paths": {"image": "idx/img-*.gz", "label": "idx/lab-*.gz"}}


def _npy(d: Path) -> dict[str, Any]:
    (d / "npy").mkdir()
    for k in range(2):
        np.save(d / "npy" / f"x-{k}.npy", np.arange(60, dtype=np.float32).reshape(20, 3) + k)
        np.save(d / "npy" / f"y-{k}.npy", np.arange(20, dtype=np.int64) * (k + 1))
    return {"format": "npy", "paths": {"x": "npy/x-*.npy", "y": "npy/y-*.npy"}}


def _npz(d: Path) -> dict[str, Any]:
    (d / "npz").mkdir()
    np.savez(d / "npz" / "a.npz", x=np.arange(12).reshape(6, 2), y=np.arange(6))
    return {"format": "npz", "paths": ["npz/*.npz"]}


def _images(d: Path) -> dict[str, Any]:
    rng = np.random.default_rng(9)
    for cls, names in (("cat", ["a.png", "b.png"]), ("dog", ["c.png"])):
        (d / "imgs" / cls).mkdir(parents=True)
        for name in names:
            (d / "imgs" / cls / name).write_bytes(png(rng.integers(0, 256, (6, 5, 3), np.uint8)))
    (d / "imgs" / "cat" / "deeper").mkdir()
    (d / "imgs" / "cat" / "deeper" / "x.png").write_bytes(png(np.zeros((6, 5, 3), np.uint8)))
    return {"format": "images", "paths": ["imgs"], "decode": True}


def _tfrecord(d: Path) -> dict[str, Any]:
    (d / "tf").mkdir()
    for k in range(2):
        (d / "tf" / f"{k}.tfrecord").write_bytes(frame_all([b"rec-%d-%d" % (k, i) * (i + 1)
                                                             for i in range(15)]))
    return {"format": "tfrecord", "paths": "tf/*.tfrecord"}


# format -> (records read, bad records) of the files above
COUNTS = {"csv": (120, 0), "jsonl": (60, 2), "text": (70, 0), "parquet": (200, 0), "idx": (60, 0),
          "npy": (40, 0), "npz": (6, 0), "images": (3, 0), "tfrecord": (30, 0)}
FORMATS = {f.__name__[1:]: f for f in (_csv, _jsonl, _text, _parquet, _idx, _npy, _npz, _images,
                                        _tfrecord)}


def _plain(blocks: list[Block], root: str) -> dict[str, dict[str, Any]]:
    """Per input file (with `root` cut from its name): positions, column values and bad
    records of all its blocks in order. Block boundaries may differ: remote .npy files are
    streamed as one split where local ones are memory-mapped and cut in row ranges."""
    def name(p: str) -> str:
        return p.replace(root, "ROOT")

    def values(col: Any) -> list[Any]:
        return col.to_pylist() if hasattr(col, "to_pylist") else np.asarray(col).tolist()

    out: dict[str, dict[str, Any]] = {}
    for b in blocks:
        entry = out.setdefault(name(b.source), {"positions": [], "columns": {}, "bad": []})
        entry["positions"] += b.positions.tolist()
        for k, v in b.columns.items():
            entry["columns"].setdefault(k, []).extend(values(v))
        entry["bad"] += [(name(r.source), r.code, r.line, r.record) for r in b.bad]
    return out


def _read_all(config: dict[str, Any], base: str, target_bytes: int) -> tuple[list[str], list[Block]]:
    reader = make_reader(config, base, WHERE)
    units = reader.files()
    blocks = [b for unit in units for split in reader.splits(unit, target_bytes)
              for b in reader.read_split(split)]
    return units, blocks


@pytest.mark.slow
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_reads_the_same_blocks_from_a_bucket(
        fmt: str, tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    local = tmp_path / "data"
    local.mkdir()
    config = FORMATS[fmt](local)
    upload_tree(gcs_emulator, local, f"{gcs_bucket}/data")
    local_units, local_blocks = _read_all(config, str(local), 200)
    remote_units, remote_blocks = _read_all(config, f"{gcs_bucket}/data", 200)
    assert local_units and [u.replace(str(local), "ROOT") for u in local_units] == [
        u.replace(f"{gcs_bucket}/data", "ROOT") for u in remote_units]
    assert all(u.startswith(f"{gcs_bucket}/data/") or u == f"{gcs_bucket}/data/imgs"
               for u in remote_units)
    plain = _plain(remote_blocks, f"{gcs_bucket}/data")
    assert plain == _plain(local_blocks, str(local))
    assert (sum(len(f["positions"]) for f in plain.values()),
            sum(len(f["bad"]) for f in plain.values())) == COUNTS[fmt]


@pytest.mark.slow
def test_image_folders_in_a_bucket_keep_exactly_class_and_file(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    config = _images(tmp_path)
    upload_tree(gcs_emulator, tmp_path, gcs_bucket)
    reader = make_reader(config, gcs_bucket, WHERE)
    assert reader.inputs() == [f"{gcs_bucket}/imgs/cat/a.png", f"{gcs_bucket}/imgs/cat/b.png",
                               f"{gcs_bucket}/imgs/dog/c.png"]  # not cat/deeper/x.png


@pytest.mark.slow
def test_a_glob_matching_nothing_in_a_bucket_names_the_pattern(gcs_bucket: str) -> None:
    reader = make_reader({"format": "csv", "paths": ["data/*.csv"]}, f"{gcs_bucket}/jobs", WHERE)
    with pytest.raises(ConfigError) as e:
        reader.files()
    assert str(e.value) == (f"{WHERE}: no input files match 'data/*.csv' "
                            f"({gcs_bucket}/jobs/data/*.csv)")


@pytest.mark.slow
def test_a_missing_bucket_is_a_config_error(gcs_emulator: GcsEmulator) -> None:
    reader = make_reader({"format": "csv", "paths": ["gs://no-such-bucket-x/*.csv"]}, ".", WHERE)
    with pytest.raises(ConfigError, match=r"^job.yaml: sources.train: cannot list "
                                          r"'gs://no-such-bucket-x/\*\.csv': "):
        reader.files()


# ---- job and schema files in a bucket ---------------------------------------------------------
@pytest.mark.slow
def test_job_file_in_a_bucket_resolves_relative_paths_against_its_folder(
        gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    gcs_emulator.upload_bytes(b"id,a,b\n1,2,3\n", f"{gcs_bucket}/data/x.csv")
    gcs_emulator.upload_bytes(IDS_SCHEMA.encode(), f"{gcs_bucket}/schemas/ids.yaml")
    gcs_emulator.upload_bytes(json.dumps({
        "schema": "../schemas/ids.yaml", "output": "../out/ids",
        "sources": {"train": {"format": "csv", "paths": ["../data/*.csv"]}},
    }).encode(), f"{gcs_bucket}/jobs/job.yaml")
    job = load_job(f"{gcs_bucket}/jobs/job.yaml")
    assert (job.path, job.base_dir) == (f"{gcs_bucket}/jobs/job.yaml", f"{gcs_bucket}/jobs")
    assert job.schema_path == f"{gcs_bucket}/schemas/ids.yaml"
    assert job.output == f"{gcs_bucket}/out/ids"
    reader = make_reader(job.sources["train"], job.base_dir, "train")
    assert reader.files() == [f"{gcs_bucket}/data/x.csv"]
    schema = load_schema(job.schema_path)
    assert (schema.name, [f.name for f in schema.features]) == ("ids", ["id", "x"])
    # --output on the command line is taken as given (absolute or gs://)
    assert load_job(f"{gcs_bucket}/jobs/job.yaml", output="gs://other/o").output == "gs://other/o"


@pytest.mark.slow
def test_job_file_in_a_bucket_cannot_leave_its_bucket(gcs_emulator: GcsEmulator,
                                                       gcs_bucket: str) -> None:
    gcs_emulator.upload_bytes(json.dumps({
        "schema": "../../other-bucket/s.yaml", "output": "out",
        "sources": {"train": {"format": "csv", "paths": ["x.csv"]}},
    }).encode(), f"{gcs_bucket}/jobs/job.yaml")
    with pytest.raises(ConfigError, match=r"'../../other-bucket/s.yaml' relative to "
                                          rf"'{gcs_bucket}/jobs' leaves the bucket"):
        load_job(f"{gcs_bucket}/jobs/job.yaml")


@pytest.mark.slow
def test_missing_job_and_schema_files_in_a_bucket(gcs_bucket: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_job(f"{gcs_bucket}/jobs/nope.yaml")
    assert str(e.value) == f"cannot read job file '{gcs_bucket}/jobs/nope.yaml': no such file"
    with pytest.raises(SchemaError) as s:
        load_schema(f"{gcs_bucket}/nope.yaml")
    assert str(s.value) == f"cannot read schema file '{gcs_bucket}/nope.yaml': no such file"


@pytest.mark.slow
def test_schema_in_a_bucket_reads_its_vocabulary_file_beside_it(
        gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    gcs_emulator.upload_bytes(b"red\ngreen\n\nblue\n", f"{gcs_bucket}/s/vocab/colors.txt")
    gcs_emulator.upload_bytes(
        b"name: c\nfeatures:\n  color: {dtype: int64, shape: [], "
        b"vocabulary_file: vocab/colors.txt}\n", f"{gcs_bucket}/s/schema.yaml")
    schema = load_schema(f"{gcs_bucket}/s/schema.yaml")
    assert schema.features[0].vocabulary == ("red", "green", "blue")


# ---- the whole job: raw files in a bucket -> shards in a bucket ------------------------------
def make_job_folder(folder: Path) -> Path:
    """job.yaml + schema.yaml + raw CSV (two files), npy (three paired columns) and IDX."""
    data = folder / "data"
    (data / "csv").mkdir(parents=True)
    (data / "npy").mkdir()
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    for k in range(2):
        (data / "csv" / f"part-{k}.csv").write_text("id,a,b\n" + "".join(
            f"{i},{i * 0.5},{-i}\n" for i in range(k * 150, (k + 1) * 150)))
    n = np.arange(1000, 1200)
    np.save(data / "npy" / "id.npy", n.astype(np.int64))
    np.save(data / "npy" / "a.npy", (n * 0.25).astype(np.float32))
    np.save(data / "npy" / "b.npy", (-n).astype(np.float32))
    write_idx(str(data / "id.idx"), np.arange(5000, 5120, dtype=np.int32))
    write_idx(str(data / "a.idx.gz"), np.linspace(0, 1, 120, dtype=np.float32))
    write_idx(str(data / "b.idx"), np.linspace(1, 2, 120, dtype=np.float32))
    job = {"schema": "schema.yaml", "output": "out", "shards": 3, "shuffle": {"seed": 11},
           "sources": {
               "train": {"format": "csv", "paths": ["data/csv/*.csv"]},
               "validation": {"format": "npy", "paths": {"id": "data/npy/id.npy",
                                                         "a": "data/npy/a.npy",
                                                         "b": "data/npy/b.npy"}},
               "test": {"format": "idx", "paths": {"id": "data/id.idx", "a": "data/a.idx.gz",
                                                   "b": "data/b.idx"}}}}
    (folder / "job.yaml").write_text(json.dumps(job))
    return folder / "job.yaml"


def published_dir(out: str) -> str:
    """The folder whose manifest.json describes `out` now (object stores publish versions)."""
    return dataset_dir(out)


def shard_hashes(out: str) -> dict[str, str]:
    manifest = json.loads(fs.read_bytes(fs.join(published_dir(out), "manifest.json")))
    return {s["path"]: s["sha256"] for split in manifest["splits"].values()
            for s in split["shards"]}


@pytest.mark.slow
def test_raw_files_in_a_bucket_give_the_same_shards_as_local_files(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    job_file = make_job_folder(tmp_path / "job")
    local_out = str(tmp_path / "local-out")
    env = gcs_emulator.env()
    done = cli("run", str(job_file), "--output", local_out, env=env)
    assert done.returncode == 0, done.stderr

    upload_tree(gcs_emulator, tmp_path / "job", f"{gcs_bucket}/jobs/ids")
    out = f"{gcs_bucket}/out/ids"
    started = time.monotonic()
    done = cli("run", f"{gcs_bucket}/jobs/ids/job.yaml", "--output", out,
               f"--temp_location={gcs_bucket}/tmp", env=env)
    run_seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert f"Wrote {out}" in done.stdout

    local_hashes, remote_hashes = shard_hashes(local_out), shard_hashes(out)
    assert sorted(remote_hashes) == [f"{s}-{i:05d}-of-00003.tfrecord" for s in
                                     ("test", "train", "validation") for i in range(3)]
    assert remote_hashes == local_hashes
    for name, sha in remote_hashes.items():  # the bytes in the bucket, not just the manifest
        data = gcs_emulator.download(fs.join(published_dir(out), name))
        assert hashlib.sha256(data).hexdigest() == sha

    started = time.monotonic()
    checked = cli("verify", out, env=env)
    verify_seconds = time.monotonic() - started
    assert checked.returncode == 0, checked.stderr
    assert "620 records" in checked.stdout and "train=300" in checked.stdout
    # Beam's credential lookup (~25 s per process) is skipped for an emulator
    assert verify_seconds < 15, verify_seconds
    assert run_seconds < 40, run_seconds
    print(f"gs:// run {run_seconds:.1f}s, verify {verify_seconds:.1f}s")

    # inspect a dataset in a bucket: the shards and schema of its published version
    shown = cli("inspect", out, "--limit", "2", env=env)
    assert shown.returncode == 0, shown.stderr
    same = cli("inspect", local_out, "--limit", "2", env=env)
    version = published_dir(out)
    assert version != out and shown.stdout.startswith(
        f"# decoded with schema 'ids' ({version}/schema.yaml)\n== {version}/test-00000-of-00003")
    assert shown.stdout.count("-- record ") == 2 and "  id: int64 [] = " in shown.stdout
    assert shown.stdout.replace(version, "OUT") == same.stdout.replace(local_out, "OUT")

    # nothing of the run is left in the temp location
    assert gcs_emulator.list(f"{gcs_bucket}/tmp/") == []


def _one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.slow
def test_cli_errors_on_gs_paths_exit_2_with_one_line(
        tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    env = gcs_emulator.env()
    gcs_emulator.upload_bytes(IDS_SCHEMA.encode(), f"{gcs_bucket}/jobs/schema.yaml")
    gcs_emulator.upload_bytes(json.dumps({
        "schema": "schema.yaml", "output": "../out",
        "sources": {"train": {"format": "csv", "paths": ["data/*.csv"]}}}).encode(),
        f"{gcs_bucket}/jobs/nothing.yaml")
    gcs_emulator.upload_bytes(json.dumps({
        "schema": "missing.yaml", "output": "../out",
        "sources": {"train": {"format": "csv", "paths": ["data/*.csv"]}}}).encode(),
        f"{gcs_bucket}/jobs/noschema.yaml")

    done = cli("run", f"{gcs_bucket}/jobs/nothing.yaml", env=env)
    assert done.returncode == 2, done.stderr
    line = _one_line_error(done.stderr)
    assert "no input files match 'data/*.csv'" in line and f"{gcs_bucket}/jobs/data/*.csv" in line

    done = cli("run", f"{gcs_bucket}/jobs/noschema.yaml", env=env)
    assert done.returncode == 2, done.stderr
    assert _one_line_error(done.stderr) == (
        f"error: cannot read schema file '{gcs_bucket}/jobs/missing.yaml': no such file")

    done = cli("run", f"{gcs_bucket}/jobs/absent.yaml", env=env)
    assert done.returncode == 2, done.stderr
    assert _one_line_error(done.stderr) == (
        f"error: cannot read job file '{gcs_bucket}/jobs/absent.yaml': no such file")
    assert gcs_emulator.list(f"{gcs_bucket}/out") == []


# ---- make_dataset('gs://…'): path building only (TensorFlow cannot reach the emulator) -------
def test_reader_builds_gs_paths_without_touching_the_store() -> None:
    from etl.read import dataset

    assert dataset._join("gs://b/out/v1", "manifest.json") == "gs://b/out/v1/manifest.json"
    assert dataset._join("gs://b/out/", "x") == "gs://b/out/x"
    assert not dataset._relative("gs://b/out/train-00000-of-00001.tfrecord")
    assert dataset._relative("train-00000-of-00001.tfrecord")
    assert not dataset._relative("/abs/train.tfrecord")

