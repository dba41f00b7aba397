"""ArrayRecord output (`format: array_record`, issue 22 point 5), as a user meets it: the same
job written as TFRecord and as ArrayRecord holds byte-identical records in the same order;
verify, inspect and report read it; a truncated shard fails verify; gs:// (emulator behind
the precondition proxy) publishes and verifies it; Grain's own ArrayRecordDataSource reads
the local shards; the combinations that cannot work are refused before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cli.run import run_job
from etl.base.errors import VerifyError
from etl.formats import array_record
from etl.formats.shards import read_shard
from etl.formats.tfrecord import read_file
from etl.job.config import load_job
from etl.output.manifest import dataset_dir, load_manifest, verify
from etl.schedule import idempotence
from tests.gcs_emulator import GcsEmulator
from tests.gcs_proxy import GcsProxy
from tests.helpers import IDS_SCHEMA, cli

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

BEAM = ["--runner=FnApiRunner"]
ROWS = 2000


def make_project(folder: Path, **job: Any) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(IDS_SCHEMA)
    if not (folder / "d.csv").exists():
        (folder / "d.csv").write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n"
                                                         for i in range(ROWS)))
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"], "block_rows": 300},
        "split": {"train": 0.7, "test": 0.3}, "output": job.pop("output", "out"),
        "shards": 3, "shuffle": {"seed": 11}, **job}))
    return str(folder / "job.yaml")


def records_by_shard(out: str) -> dict[str, list[bytes]]:
    """Split/shard number -> its records in file order, whichever the format."""
    m = load_manifest(out)
    return {s["path"].split(".")[0]: [d for _, d in read_shard(fs_join(out, s["path"]))]
            for info in m["splits"].values() for s in info["shards"]}


def fs_join(out: str, name: str) -> str:
    return f"{out}/{name}"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One job written three ways: TFRecord, ArrayRecord, ArrayRecord through the engine
    shuffle."""
    root = tmp_path_factory.mktemp("array_record")
    out = {}
    for name, extra in {"tfrecord": {}, "array_record": {"format": "array_record"},
                        "engine": {"format": "array_record", "shuffle": {"seed": 11,
                                                                         "via": "engine"}}
                        }.items():
        run_job(load_job(make_project(root / name, **extra)), BEAM)
        out[name] = str(root / name / "out")
    return out


def test_the_same_records_in_the_same_order_as_the_tfrecord_shards(outputs) -> None:
    tf, ar = load_manifest(outputs["tfrecord"]), load_manifest(outputs["array_record"])
    assert "format" not in tf and ar["format"] == "array_record"
    assert ar["compression"] == "none"
    for split in ("train", "test"):
        a, b = tf["splits"][split], ar["splits"][split]
        assert a["num_records"] == b["num_records"]
        assert [s["num_records"] for s in a["shards"]] == [s["num_records"] for s in b["shards"]]
        assert [s["path"] for s in b["shards"]] == [f"{split}-{i:05d}-of-00003.array_record"
                                                    for i in range(3)]
        assert all("index" not in s for s in b["shards"])  # ArrayRecord has its own
    tf_records = records_by_shard(outputs["tfrecord"])
    assert sum(map(len, tf_records.values())) == ROWS
    assert records_by_shard(outputs["array_record"]) == tf_records  # bytes and order
    assert records_by_shard(outputs["engine"]) == tf_records
    # both strategies write the same bytes, so the same sha256
    assert ([s["sha256"] for s in load_manifest(outputs["engine"])["splits"]["train"]["shards"]]
            == [s["sha256"] for s in ar["splits"]["train"]["shards"]])
    assert sorted(os.listdir(outputs["array_record"])) == sorted(
        ["_SUCCESS", "manifest.json", "schema.yaml", "schema.pbtxt", "dataset_info.json",
         "features.json"]
        + [s["path"] for info in ar["splits"].values() for s in info["shards"]])


def test_verify_inspect_and_report_read_it(outputs, tmp_path: Path) -> None:
    out = outputs["array_record"]
    assert verify(out)["records"] == ROWS
    assert cli("verify", "--quick", out).returncode == 0
    proc = cli("inspect", out, "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    first = read_file(f"{outputs['tfrecord']}/test-00000-of-00003.tfrecord")
    assert proc.stdout.splitlines()[1:3] == [
        f"== {out}/test-00000-of-00003.array_record",
        f"-- record 0 (index 0, {len(next(first)[1])} bytes)"]
    reports = {}
    for name in ("tfrecord", "array_record"):
        copy = tmp_path / name
        proc = cli("report", outputs[name], "--out", str(copy))
        assert proc.returncode == 0, proc.stderr
        reports[name] = json.loads((copy / "report.json").read_text())
    assert reports["array_record"]["features"] == reports["tfrecord"]["features"]
    counts = {k: v["num_records"] for k, v in reports["array_record"]["splits"].items()}
    assert counts == {k: v["num_records"] for k, v in reports["tfrecord"]["splits"].items()}
    assert sum(counts.values()) == ROWS


def test_grains_own_array_record_source_reads_the_shards(outputs) -> None:
    gp = pytest.importorskip("grain.python")
    out = outputs["array_record"]
    m = load_manifest(out)
    paths = [f"{out}/{s['path']}" for s in m["splits"]["train"]["shards"]]
    source = gp.ArrayRecordDataSource(paths)
    ours = [d for p in paths for _, d in read_shard(p)]
    assert len(source) == len(ours) == m["splits"]["train"]["num_records"]
    assert [source[i] for i in range(len(source))] == ours
    assert source.__getitems__([len(ours) - 1, 0, 5]) == [ours[-1], ours[0], ours[5]]


def test_a_truncated_or_damaged_shard_fails_verify(outputs, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in os.listdir(outputs["array_record"]):
        (out / name).write_bytes((Path(outputs["array_record"]) / name).read_bytes())
    shard = out / "train-00001-of-00003.array_record"
    data = shard.read_bytes()
    shard.write_bytes(data[:-1000])
    proc = cli("verify", str(out))
    assert proc.returncode == 3
    assert proc.stderr == (f"error: {shard}: {len(data) - 1000} bytes on disk, manifest says "
                           f"{len(data)}\n")
    assert cli("verify", "--quick", str(out)).returncode == 3
    # the reader itself refuses what is left of it, naming the file
    with pytest.raises(VerifyError, match=rf"^{shard}: not a readable ArrayRecord file"):
        array_record.count_records(str(shard))
    # same size, one flipped byte in the records: the sha256 (and the chunk hashes) see it
    damaged = bytearray(data)
    damaged[5000] ^= 0xFF  # inside the record chunks (the file ends in padding and footer)
    shard.write_bytes(bytes(damaged))
    with pytest.raises(VerifyError, match=rf"^{shard}: sha256 [0-9a-f]+ does not match"):
        verify(str(out))
    with pytest.raises(VerifyError, match=rf"^{shard}: damaged ArrayRecord data in records "):
        array_record.count_records(str(shard))
    shard.write_bytes(data)
    assert verify(str(out))["records"] == ROWS


def test_refused_combinations(tmp_path: Path) -> None:
    for extra, message in [
        ({"compression": "gzip"}, "compression: gzip does not apply to format: array_record "
         "(ArrayRecord compresses each chunk itself, and a whole-file gzip/zlib stream would "
         "lose its random access); remove the compression key"),
        ({"index": True}, "index: true does not apply to format: array_record (an ArrayRecord "
         "file carries its own index); remove the index key"),
    ]:
        path = make_project(tmp_path / next(iter(extra)), format="array_record", **extra)
        proc = cli("run", path)
        assert proc.returncode == 2
        assert proc.stderr == f"error: {path}: {message}\n"
    path = make_project(tmp_path / "fmt", format="parquet")
    proc = cli("run", path)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {path}: format must be one of ['tfrecord', 'array_record'], "
                           "got 'parquet'\n")


def test_switching_format_replaces_the_output_whole(tmp_path: Path) -> None:
    """The format is part of the job's identity: changing it reruns, and the new output
    replaces the old one (ours: its manifest lists every file) with nothing left over."""
    path = make_project(tmp_path)
    run_job(load_job(path), BEAM)
    make_project(tmp_path, format="array_record")
    job = load_job(path)
    assert idempotence.verdict(job).reason == idempotence.JOB_CHANGED
    run_job(job, BEAM)
    names = os.listdir(tmp_path / "out")
    assert not [n for n in names if ".tfrecord" in n]
    assert len([n for n in names if n.endswith(".array_record")]) == 6
    assert verify(str(tmp_path / "out"))["records"] == ROWS


# ------------------------------------------------------------------------------ gs://


def test_gs_output_publishes_and_verifies(outputs, tmp_path: Path, gcs_emulator: GcsEmulator,
                                          gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/data/out"
    with GcsProxy(gcs_emulator.endpoint) as proxy:
        env = gcs_emulator.env(endpoint=proxy.url)
        job = make_project(tmp_path, output=out, format="array_record")
        proc = cli("run", job, env=env)
        assert proc.returncode == 0, proc.stderr
        version = dataset_dir(out)
        manifest = json.loads(gcs_emulator.download(f"{version}/manifest.json"))
        assert manifest["format"] == "array_record"
        shards = [s for info in manifest["splits"].values() for s in info["shards"]]
        names = {u[len(version) + 1:] for u in gcs_emulator.list(version + "/")}
        assert names == {"_SUCCESS", "manifest.json", "schema.yaml", "schema.pbtxt",
                         "dataset_info.json", "features.json"} | {
            s["path"] for s in shards}
        # the objects are the local run's files, byte for byte (same job, same shuffle)
        local = Path(outputs["array_record"])
        for s in shards:
            assert gcs_emulator.download(f"{version}/{s['path']}") == (local / s["path"]).read_bytes()
        assert records_by_shard(version) == records_by_shard(outputs["tfrecord"])
        assert verify(out)["records"] == ROWS
        proc = cli("verify", out, env=env)
        assert proc.returncode == 0, proc.stderr
        proc = cli("inspect", out, "--limit", "1", env=env)
        assert proc.returncode == 0 and f"== {version}/test-00000-of-00003.array_record" in proc.stdout


def test_make_dataset_says_what_reads_array_record(outputs) -> None:
    import etl  # noqa: PLC0415 - TensorFlow, for this test only
    from etl.read.dataset import DatasetError  # noqa: PLC0415 - TensorFlow too

    with pytest.raises(DatasetError, match=(
            rf"^{outputs['array_record']}: holds array_record shards \(format: array_record\), "
            r"which tf.data cannot read; read them with etl.open_records or Grain's "
            r"ArrayRecordDataSource$")):
        etl.make_dataset(outputs["array_record"], split="train")
