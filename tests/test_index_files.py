"""Index files written with the shards (`index:`, issue 22 point 1), as readers and `verify`
meet them: the PyPI `tfrecord` reader reads every shard through our index and gets exactly
our records; random reads at the indexed offsets equal a sequential read; a flipped line or a
lost index file fails `verify` naming the file (and line); gs:// publishes and verifies
them; compressed shards get none, and `index: true` with them is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli.run import run_job
from etl.base.errors import ConfigError, VerifyError
from etl.formats.record_index import FRAME_OVERHEAD, index_lines, parse_index
from etl.formats.shards import ShardFormat
from etl.formats.tfrecord import iter_records, read_file
from etl.job.config import job_from_dict, load_job
from etl.output.finalize import unique_results
from etl.output.manifest import dataset_dir, load_manifest, verify
from etl.schedule import idempotence
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import MemorySlice, sorted_run
from etl.shuffle.shard_writer import write_shard
from tests.gcs_emulator import GcsEmulator
from tests.gcs_proxy import GcsProxy
from tests.helpers import IDS_SCHEMA, cli

BEAM = ["--runner=FnApiRunner"]


def make_project(folder: Path, rows: int = 3000, shards: int = 3, **job: Any) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(IDS_SCHEMA)
    (folder / "d.csv").write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n"
                                                     for i in range(rows)))
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"]},
        "split": {"train": 0.75, "test": 0.25}, "output": job.pop("output", "out"),
        "shards": shards, "shuffle": {"seed": 5}, **job}))
    return str(folder / "job.yaml")


def shards_of(out: str) -> list[dict[str, Any]]:
    m = load_manifest(out)
    return [s for info in m["splits"].values() for s in info["shards"]]


# a reader of the PyTorch world, which cannot share a process with TensorFlow
# (/work/shared/ENVIRONMENT.md): every record of each shard through the index, read in 7
# index-cut parts (tfrecord_iterator seeks to the index's offsets), plus the parsed ids
_PYPI_READER = textwrap.dedent("""\
    import json, sys
    from tfrecord.reader import tfrecord_iterator, tfrecord_loader
    out = {}
    for shard, index in json.loads(sys.argv[1]):
        raw = [bytes(r).hex() for part in range(7)
               for r in tfrecord_iterator(shard, index, shard=(part, 7))]
        ids = [int(e["id"][0]) for e in tfrecord_loader(shard, index, {"id": "int"},
                                                        shard=(0, 1))]
        out[shard] = {"raw": raw, "ids": ids}
    print(json.dumps(out))
    """)


def test_index_lines_are_offset_space_frame_length_newline() -> None:
    """The lines byte for byte as DALI's tfrecord2idx writes them ("{offset} {length}\\n"),
    across digit-count changes and from a piece's start offset; nothing for no records."""
    rng = np.random.default_rng(7)
    sizes = np.concatenate([[0, 1, 183, 9_999_984, 2**40], rng.integers(0, 5000, 200_000)])
    start = 999_999_990
    lines, end = index_lines(sizes, start)
    expected, at = [], start
    for size in sizes.tolist():
        expected.append(f"{at} {size + FRAME_OVERHEAD}\n")
        at += size + FRAME_OVERHEAD
    assert lines == "".join(expected).encode()
    assert end == at
    assert lines.startswith(b"999999990 16\n1000000006 17\n1000000023 199\n")
    assert index_lines(np.zeros(0, np.int64), 5) == (b"", 5)


@pytest.mark.slow
def test_run_writes_indexes_that_the_pypi_tfrecord_reader_reads(tmp_path: Path) -> None:
    job = load_job(make_project(tmp_path))
    assert job.index and job.format == "tfrecord"
    run_job(job, BEAM)
    out = str(tmp_path / "out")
    shards = shards_of(out)
    assert len(shards) == 6
    for s in shards:
        assert s["index"]["path"] == s["path"] + ".index"
        data = (tmp_path / "out" / s["index"]["path"]).read_bytes()
        assert s["index"]["num_bytes"] == len(data)
        offsets, lengths = parse_index(data)
        assert len(offsets) == s["num_records"]
        assert int(offsets[-1] + lengths[-1]) == s["num_bytes"]
    assert sorted(os.listdir(out)) == sorted(
        ["_SUCCESS", "manifest.json", "schema.yaml", "schema.pbtxt", "dataset_info.json",
         "features.json"]
        + [s["path"] for s in shards] + [s["index"]["path"] for s in shards])
    assert verify(out)["records"] == 3000
    assert verify(out, quick=True)["records"] == 3000

    pairs = [(os.path.join(out, s["path"]), os.path.join(out, s["index"]["path"]))
             for s in shards]
    proc = subprocess.run([sys.executable, "-c", _PYPI_READER, json.dumps(pairs)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    theirs = json.loads(proc.stdout)
    ids = []
    for shard, _ in pairs:
        ours = [data for _, data in read_file(shard)]
        assert [bytes.fromhex(r) for r in theirs[shard]["raw"]] == ours
        assert len(theirs[shard]["ids"]) == len(ours)
        ids += theirs[shard]["ids"]
    assert sorted(ids) == list(range(3000))  # every record once, values as written


@pytest.mark.slow
def test_random_reads_through_the_index_equal_a_sequential_read(tmp_path: Path) -> None:
    run_job(load_job(make_project(tmp_path, rows=8000, shards=2)), BEAM)
    out = tmp_path / "out"
    rng = np.random.default_rng(22)
    for s in shards_of(str(out)):
        shard = out / s["path"]
        sequential = [data for _, data in read_file(str(shard))]
        offsets, lengths = parse_index((out / s["index"]["path"]).read_bytes())
        picks = rng.integers(0, len(sequential), 1000)
        with open(shard, "rb") as fh:
            for i in picks.tolist():
                fh.seek(int(offsets[i]))
                frame = fh.read(int(lengths[i]))
                ((offset, data),) = list(iter_records([frame], str(shard)))
                assert offset == 0 and data == sequential[i]


def flip_line(path: Path, line: int) -> None:
    """Change the offset on a 1-based line by one digit (same length: only a read finds it)."""
    lines = path.read_bytes().split(b"\n")
    offset, length = lines[line - 1].split(b" ")
    last = (int(offset[-1:]) + 1) % 10
    lines[line - 1] = offset[:-1] + str(last).encode() + b" " + length
    path.write_bytes(b"\n".join(lines))


@pytest.mark.slow
def test_a_flipped_index_line_fails_verify_naming_file_and_line(tmp_path: Path) -> None:
    run_job(load_job(make_project(tmp_path)), BEAM)
    out = tmp_path / "out"
    s = shards_of(str(out))[1]
    index = out / s["index"]["path"]
    good = index.read_bytes()
    flip_line(index, 7)
    proc = cli("verify", str(out))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"error: {index}: line 7: ")
    assert "is not record 7's frame" in proc.stderr
    # a size-preserving change: --quick sees the file's new modification time (the publish
    # recorded it), not the bytes (tests/test_damaged_output.py)
    quick = cli("verify", "--quick", str(out))
    assert quick.returncode == 3
    assert quick.stderr.startswith(f"error: {index}: changed since it was published: modified ")

    # the length on the last line (the frames' tiling is checked too)
    lines = good.split(b"\n")
    n = len(lines) - 1
    offset, length = lines[n - 1].split(b" ")
    lines[n - 1] = offset + b" " + str(int(length) + 1).encode()
    index.write_bytes(b"\n".join(lines))
    proc = cli("verify", str(out))
    assert proc.returncode == 3 and proc.stderr.startswith(f"error: {index}: line {n}: ")

    index.write_bytes(good[: good.rindex(b"\n", 0, len(good) - 1) + 1])  # last line lost
    with pytest.raises(VerifyError, match=rf"^{index}: line {n}: missing: {n - 1} lines for a "
                       rf"shard of more records \(record {n} at offset {s['num_bytes'] - int(length)}\)$"):
        verify(str(out))
    index.write_bytes(good + good[good.rindex(b"\n", 0, len(good) - 1) + 1:])  # one too many
    with pytest.raises(VerifyError, match=rf"^{index}: line {n + 1}: one line too many: "):
        verify(str(out))
    index.write_bytes(good)
    assert verify(str(out))["records"] == 3000


@pytest.mark.slow
def test_a_missing_index_file_fails_quick_verify_and_is_healed(tmp_path: Path) -> None:
    job = load_job(make_project(tmp_path))
    run_job(job, BEAM)
    out = tmp_path / "out"
    index = out / shards_of(str(out))[0]["index"]["path"]
    index.unlink()
    proc = cli("verify", "--quick", str(out))
    assert proc.returncode == 3
    assert proc.stderr == f"error: {index}: missing index file listed in the manifest\n"
    assert idempotence.verdict(job).reason == idempotence.DAMAGED.format(
        f"{index}: missing index file listed in the manifest")
    run_job(job, BEAM)  # the next run rebuilds it
    assert index.exists() and verify(str(out))["records"] == 3000


@pytest.mark.slow
def test_an_output_from_before_index_files_verifies_and_is_rebuilt_once(tmp_path: Path) -> None:
    """Manifests written before this change list no index: still ours, still verified; the
    next run (same job: it now writes indexes by default) replaces it, once."""
    job = load_job(make_project(tmp_path))
    run_job(job, BEAM)
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["sealed"]  # nor a record of the files' times: added later still
    for info in manifest["splits"].values():
        for s in info["shards"]:
            (out / s.pop("index")["path"]).unlink()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    assert verify(str(out))["records"] == 3000
    assert cli("verify", "--quick", str(out)).returncode == 0
    assert idempotence.verdict(job).reason == idempotence.NO_INDEX
    again = run_job(job, BEAM)
    assert again.skipped == ""
    assert all((out / s["index"]["path"]).exists() for s in shards_of(str(out)))
    assert run_job(job, BEAM).skipped == idempotence.SKIPPED


@pytest.mark.slow
def test_compressed_shards_get_no_index_and_index_true_is_refused(tmp_path: Path) -> None:
    job = load_job(make_project(tmp_path / "gz", compression="gzip"))
    assert not job.index
    run_job(job, BEAM)
    out = tmp_path / "gz" / "out"
    assert not [f for f in os.listdir(out) if f.endswith(".index")]
    assert all("index" not in s for s in shards_of(str(out)))
    assert verify(str(out))["records"] == 3000

    path = make_project(tmp_path / "refused", compression="zlib", index=True)
    proc = cli("run", path)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: {path}: index: true needs compression: none: an index holds byte offsets of "
        "records, and offsets into a zlib stream give no random access (a reader must "
        "decompress everything before them)\n")
    assert not (tmp_path / "refused" / "out").exists()


@pytest.mark.slow
def test_index_false_and_bad_values(tmp_path: Path) -> None:
    job = load_job(make_project(tmp_path, index=False))
    assert not job.index
    run_job(job, BEAM)
    assert not [f for f in os.listdir(tmp_path / "out") if f.endswith(".index")]
    doc = {"schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"]}, "output": "o"}
    with pytest.raises(ConfigError, match=r"^job.yaml: index must be true or false, got 'yes'$"):
        job_from_dict({**doc, "index": "yes"}, path="job.yaml")
    assert job_from_dict(doc).index and job_from_dict({**doc, "index": True}).index


def test_a_retried_write_leaves_one_shard_and_one_index(tmp_path: Path) -> None:
    """Two attempts at one shard (a retried bundle): one shard and one index file, equal
    results (counted once), no attempt file left."""
    records = [f"record {i}".encode() * (i % 5 + 1) for i in range(500)]
    run = sorted_run("train", np.arange(500, dtype=np.uint64)[::-1].copy(),
                     np.arange(500, dtype=np.uint64), records)
    plan = ShardPlan("train", 0, 1, 0, 1 << 64, 0, 500)
    fmt = ShardFormat.of()
    results = [write_shard(plan, [MemorySlice(run.keys, run.ids, run.offsets, run.payload)],
                           str(tmp_path), fmt) for _ in range(2)]
    assert results[0] == results[1] and len(unique_results(results)) == 1
    assert sorted(os.listdir(tmp_path)) == ["train-00000-of-00001.tfrecord",
                                            "train-00000-of-00001.tfrecord.index"]
    assert results[0].index_file is not None
    assert results[0].index_file.name == "train-00000-of-00001.tfrecord.index"
    assert [d for _, d in read_file(str(tmp_path / "train-00000-of-00001.tfrecord"))] == \
        records[::-1]


# ------------------------------------------------------------------------------ gs://


@pytest.mark.slow
def test_gs_output_publishes_and_verifies_index_files(tmp_path: Path, gcs_emulator: GcsEmulator,
                                                     gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/data/out"
    with GcsProxy(gcs_emulator.endpoint) as proxy:
        env = gcs_emulator.env(endpoint=proxy.url)
        job = make_project(tmp_path, rows=600, output=out)
        proc = cli("run", job, env=env)
        assert proc.returncode == 0, proc.stderr
        version = dataset_dir(out)
        names = {u[len(version) + 1:] for u in gcs_emulator.list(version + "/")}
        manifest = json.loads(gcs_emulator.download(f"{version}/manifest.json"))
        shards = [s for info in manifest["splits"].values() for s in info["shards"]]
        assert {s["index"]["path"] for s in shards} <= names
        assert names == {"_SUCCESS", "manifest.json", "schema.yaml", "schema.pbtxt",
                         "dataset_info.json", "features.json"} | {
            s["path"] for s in shards} | {s["index"]["path"] for s in shards}
        for s in shards:
            data = gcs_emulator.download(f"{version}/{s['index']['path']}")
            assert len(data) == s["index"]["num_bytes"]
            assert len(parse_index(data)[0]) == s["num_records"]
        assert verify(out)["records"] == 600
        proc = cli("verify", out, env=env)
        assert proc.returncode == 0, proc.stderr
        # a lost index object: quick verify names it
        first = shards[0]["index"]["path"]
        bucket, _, name = f"{version}/{first}"[len("gs://"):].partition("/")
        gcs_emulator.client().bucket(bucket).blob(name).delete()
        proc = cli("verify", "--quick", out, env=env)
        assert proc.returncode == 3
        assert proc.stderr == f"error: {version}/{first}: missing index file listed in the manifest\n"



@pytest.mark.slow
def test_make_dataset_globs_skip_index_files(tmp_path: Path) -> None:
    """`out/train-*` and a folder without its manifest match the index files too: they hold
    no records and are left out."""
    import etl  # noqa: PLC0415 - TensorFlow, for this test only

    run_job(load_job(make_project(tmp_path, rows=600)), BEAM)
    out = tmp_path / "out"
    counts = {split: info["num_records"]
              for split, info in load_manifest(str(out))["splits"].items()}
    ds = etl.make_dataset(str(out / "train-*"), schema=str(out / "schema.yaml"), batch_size=1000)
    assert sum(len(b["id"]) for b in ds) == counts["train"]
    (out / "manifest.json").unlink()
    ds = etl.make_dataset(str(out), split="test", batch_size=1000)
    assert sum(len(b["id"]) for b in ds) == counts["test"]
