"""Real Beam pipelines on the local runner: sources end to end, determinism, shuffle quality,
order, splits, compression, publish and verify."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil

import numpy as np
import pytest

import etl
from etl.base.errors import EtlError, VerifyError
from etl.output.manifest import verify
from etl.shuffle.files import HeldSpills
from tests.pipelines import RUNNER, convert, manifest, shard_hashes, write_csv

VIAS = ["files", "engine"]  # both shuffle strategies pass the same end-to-end tests


def read_all(out: str, split: str = "train", ordered: bool = False) -> dict[str, np.ndarray]:
    batches = list(etl.make_dataset(out, split=split, batch_size=1024,
                                    shuffle_buffer=0 if ordered else 1000))
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_csv_end_to_end_exact_and_verified(tmp_path, via) -> None:
    for k in range(3):
        write_csv(tmp_path / f"part-{k}.csv", 1000, start=k * 1000)
    out = convert(tmp_path, {"train": {"format": "csv", "paths": ["part-*.csv"]}}, via=via)
    got = read_all(out)
    order = np.argsort(got["id"])
    assert np.array_equal(got["id"][order], np.arange(3000))
    assert np.array_equal(got["x"][order], np.stack([np.arange(3000) * 0.5, -np.arange(3000)], 1)
                          .astype(np.float32))
    m = manifest(out)
    assert m["splits"]["train"]["num_records"] == 3000
    assert [s["num_records"] for s in m["splits"]["train"]["shards"]] == [750] * 4
    assert sorted(os.listdir(out)) == sorted(
        ["_SUCCESS", "manifest.json", "schema.yaml", "schema.pbtxt", "dataset_info.json",
         "features.json"]
        + [f"train-{i:05d}-of-00004.tfrecord{index}" for i in range(4) for index in ("", ".index")])
    assert m["inputs"] == [{"path": str(tmp_path / f"part-{k}.csv"), "read": 1000, "written": 1000,
                            "rejected": 0} for k in range(3)]
    assert [i["path"] for i in m["input_files"]] == [str(tmp_path / f"part-{k}.csv")
                                                     for k in range(3)]
    assert m["schema_sha256"] == etl.load_schema(os.path.join(out, "schema.yaml")).sha256()
    assert verify(out)["records"] == 3000


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_jsonl_to_sequence_example(tmp_path, via) -> None:
    rows = [{"id": i, "length": i % 5, "tokens": list(range(i, i + i % 5))} for i in range(300)]
    with open(tmp_path / "s.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    schema = etl.load_schema("schemas/sentences.yaml").to_dict()
    out = convert(tmp_path, {"train": {"format": "jsonl", "paths": ["s.jsonl"]}}, schema=schema,
                  compression="gzip", via=via)
    assert all(s["path"].endswith(".tfrecord.gz") for s in manifest(out)["splits"]["train"]["shards"])
    batches = list(etl.make_dataset(out, batch_size=64, shuffle_buffer=0))
    got = {}
    for b in batches:
        for i, n, t in zip(b["id"].numpy(), b["length"].numpy(), b["tokens"].to_list(),
                           strict=True):
            got[int(i)] = (int(n), t)
    assert got == {r["id"]: (r["length"], r["tokens"]) for r in rows}
    verify(out)


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_idx_train_test(tmp_path, via) -> None:
    from etl.formats.idx import write_idx

    rng = np.random.default_rng(0)
    data = {}
    for split, n in (("train", 500), ("test", 120)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        write_idx(str(tmp_path / f"{split}-images-idx3-ubyte.gz"), images)
        write_idx(str(tmp_path / f"{split}-labels-idx1-ubyte.gz"), labels)
        data[split] = (images, labels)
    sources = {split: {"format": "idx", "paths": {
        "image": f"{split}-images-idx3-ubyte.gz", "label": f"{split}-labels-idx1-ubyte.gz"}}
        for split in data}
    out = convert(tmp_path, sources, schema=etl.load_schema("schemas/mnist.yaml").to_dict(),
                  via=via)
    for split, (images, labels) in data.items():
        got = read_all(out, split)
        key = lambda imgs, labs: sorted(  # noqa: E731
            (int(lab), img.tobytes()) for img, lab in zip(imgs, labs, strict=True))
        assert key(got["image"][..., 0], got["label"]) == key(images, labels)
    assert verify(out)["splits"] == {"train": 500, "test": 120}


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_parquet_npy_npz_text_python_tfrecord_sources(tmp_path, via) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 400
    ids = np.arange(n)
    pq.write_table(pa.table({"id": ids, "a": ids * 0.5, "b": -ids.astype(float)}),
                   tmp_path / "d.parquet", row_group_size=100)
    np.save(tmp_path / "id.npy", ids)
    np.save(tmp_path / "a.npy", ids * 0.5)
    np.save(tmp_path / "b.npy", -ids.astype(float))
    np.savez(tmp_path / "d.npz", id=ids, a=ids * 0.5, b=-ids.astype(float))
    expected_x = np.stack([ids * 0.5, -ids], 1).astype(np.float32)
    for name, src in {
        "parquet": {"format": "parquet", "paths": [str(tmp_path / "d.parquet")]},
        "npy": {"format": "npy", "paths": {c: str(tmp_path / f"{c}.npy") for c in ("id", "a", "b")}},
        "npz": {"format": "npz", "paths": [str(tmp_path / "d.npz")]},
        "python": {"format": "python", "function": "tests.generators:ids_and_pairs",
                   "kwargs": {"n": n}},
    }.items():
        out = convert(tmp_path / name, {"train": src}, via=via)
        got = read_all(out)
        order = np.argsort(got["id"])
        assert np.array_equal(got["id"][order], ids), name
        assert np.array_equal(got["x"][order], expected_x), name
    # an existing TFRecord dataset, reshuffled and resharded: same records, new layout
    shards = [os.path.join(tmp_path / "parquet" / "out", s["path"])
              for s in manifest(str(tmp_path / "parquet" / "out"))["splits"]["train"]["shards"]]
    out = convert(tmp_path / "reshard", {"train": {"format": "tfrecord", "paths": shards}},
                  shards=3, shuffle={"seed": 5}, via=via)
    got = read_all(out)
    assert sorted(got["id"].tolist()) == ids.tolist()
    assert len(manifest(out)["splits"]["train"]["shards"]) == 3


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_text_source_to_sequence_example(tmp_path, via) -> None:
    lines = [" ".join(str(t) for t in range(i % 7)) for i in range(200)]
    (tmp_path / "t.txt").write_text("\n".join(f"{ln}" if ln else "0" for ln in lines) + "\n")
    out = convert(tmp_path, {"train": {"format": "text", "paths": ["t.txt"]}}, via=via,
                  schema=etl.load_schema("schemas/sentences.yaml").to_dict())
    got = {}
    for b in etl.make_dataset(out, batch_size=50, shuffle_buffer=0):
        for i, n, t in zip(b["id"].numpy(), b["length"].numpy(), b["tokens"].to_list(),
                           strict=True):
            got[int(i)] = (int(n), t)
    want = {}
    for i, ln in enumerate(lines):
        toks = [int(t) for t in ln.split()] or [0]
        want[i] = (len(toks), toks)
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_images_folder_with_vocabulary(tmp_path, via) -> None:
    from PIL import Image

    rng = np.random.default_rng(1)
    pixels = {}
    for cls in ("cat", "dog"):
        os.makedirs(tmp_path / "imgs" / cls)
        for i in range(6):
            img = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(img).save(tmp_path / "imgs" / cls / f"{i}.png")
            pixels[(cls, i)] = img
    schema = {"name": "pets", "kind": "example", "features": {
        "image": {"dtype": "uint8", "shape": [8, 8, 3], "encoding": "png"},
        "label": {"dtype": "int64", "shape": [], "vocabulary": ["cat", "dog"]}}}
    out = convert(tmp_path, {"train": {"format": "images", "paths": ["imgs"]}}, schema=schema,
                  via=via)
    got = read_all(out)
    want = sorted((["cat", "dog"].index(c), img.tobytes()) for (c, _), img in pixels.items())
    assert sorted((int(lab), img.tobytes()) for img, lab in
                  zip(got["image"], got["label"], strict=True)) == want


def _ids_job(tmp_path, n=20_000, **job) -> str:
    if not (tmp_path / "ids.csv").exists():
        write_csv(tmp_path / "ids.csv", n)
    return convert(tmp_path, {"train": {"format": "csv", "paths": ["ids.csv"]}}, **job)


@pytest.mark.slow
def test_same_bytes_across_reruns_and_runner_modes(tmp_path) -> None:
    first = shard_hashes(_ids_job(tmp_path))
    assert shard_hashes(_ids_job(tmp_path)) == first
    multi = _ids_job(tmp_path, beam_args=RUNNER + ["--direct_running_mode=multi_processing",
                                                    "--direct_num_workers=2"])
    assert shard_hashes(multi) == first
    # a different seed is a different permutation
    assert shard_hashes(_ids_job(tmp_path, shuffle={"seed": 43})) != first


@pytest.mark.slow
@pytest.mark.parametrize("job", [{}, {"shuffle": False}, {"compression": "zlib", "shards": 3}])
def test_spill_path_and_in_memory_paths_write_identical_shards(tmp_path, job,
                                                              monkeypatch) -> None:
    write_csv(tmp_path / "ids.csv", 20_000)
    src = {"train": {"format": "csv", "paths": ["ids.csv"], "block_rows": 2500}}
    on_disk = shard_hashes(convert(tmp_path, src, spill_in_memory=0, **job))
    # by default no run is held (each spills; writing one costs less than new memory), with a
    # budget for every one of the 8 runs all are held, with a smaller one only some
    held: list[bool] = []
    real_hold = HeldSpills.hold
    monkeypatch.setattr(HeldSpills, "hold", lambda self, *a: held.append(real_hold(self, *a))
                        or held[-1])
    released: list[int] = []  # what each run's store still holds after its release
    real_release = HeldSpills.release
    monkeypatch.setattr(HeldSpills, "release", lambda self: real_release(self)
                        or released.append(len(self) + self.used))
    assert shard_hashes(convert(tmp_path, src, **job)) == on_disk
    assert held == []
    assert shard_hashes(convert(tmp_path, src, spill_in_memory="64MiB", **job)) == on_disk
    assert held == [True] * 8
    held.clear()
    assert shard_hashes(convert(tmp_path, src, spill_in_memory="200KB", **job)) == on_disk
    assert 0 < sum(held) < 8 and len(held) == 8
    assert released == [0, 0, 0]  # each run's own store, released when its job ends
    # other processes (multi_processing workers) never get held spills
    multi = RUNNER + ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    assert shard_hashes(convert(tmp_path, src, beam_args=multi, **job)) == on_disk


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_shuffle_is_uniform_and_balanced(tmp_path, via) -> None:
    n = 100_000
    out = _ids_job(tmp_path, n=n, shards=16, via=via)
    got = read_all(out, ordered=True)["id"]  # shard 0 first, file order
    assert sorted(got.tolist()) == list(range(n))
    rho = np.corrcoef(np.arange(n), got)[0, 1]  # ids are input ranks: Spearman == Pearson
    assert abs(rho) < 0.02
    counts = [s["num_records"] for s in manifest(out)["splits"]["train"]["shards"]]
    assert max(counts) - min(counts) <= 1 and sum(counts) == n
    # every shard draws from the whole input
    first_shard = got[: counts[0]]
    assert np.histogram(first_shard, bins=10, range=(0, n))[0].min() > counts[0] / 10 * 0.8


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_no_shuffle_keeps_input_order_in_contiguous_shards(tmp_path, via) -> None:
    for k in range(2):
        write_csv(tmp_path / f"p{k}.csv", 1500, start=k * 1500)
    out = convert(tmp_path, {"train": {"format": "csv", "paths": ["p*.csv"]}}, shuffle=False,
                  shards=4, via=via)
    assert read_all(out, ordered=True)["id"].tolist() == list(range(3000))


@pytest.mark.slow
@pytest.mark.parametrize("via", VIAS)
def test_split_fractions_are_stable(tmp_path, via) -> None:
    write_csv(tmp_path / "ids.csv", 10_000)
    src = {"source": {"format": "csv", "paths": ["ids.csv"]},
           "split": {"train": 0.8, "validation": 0.1, "test": 0.1}}
    out = convert(tmp_path, src, via=via)
    first = {s: sorted(read_all(out, s)["id"].tolist()) for s in ("train", "validation", "test")}
    assert sorted(sum(first.values(), [])) == list(range(10_000))
    assert abs(len(first["train"]) - 8000) < 250
    again = convert(tmp_path, src, shards=2, via=via)  # other shard count, same split membership
    assert {s: sorted(read_all(again, s)["id"].tolist()) for s in first} == first


@pytest.mark.slow
def test_verify_catches_flipped_byte_and_missing_shard(tmp_path) -> None:
    out = _ids_job(tmp_path, n=2000)
    shard = os.path.join(out, "train-00001-of-00004.tfrecord")
    data = bytearray(open(shard, "rb").read())
    data[100] ^= 0x01
    open(shard, "wb").write(bytes(data))
    with pytest.raises(VerifyError, match=r"train-00001-of-00004\.tfrecord.*offset \d+"):
        verify(out)
    os.remove(shard)
    with pytest.raises(VerifyError, match="train-00001-of-00004.tfrecord"):
        verify(out)


@pytest.mark.slow
def test_rerun_replaces_output_and_failed_run_keeps_it(tmp_path) -> None:
    out = _ids_job(tmp_path, n=2000, shards=8)
    out = _ids_job(tmp_path, shards=5)
    assert sorted(f for f in os.listdir(out) if f.endswith(".tfrecord")) == [
        f"train-{i:05d}-of-00005.tfrecord" for i in range(5)]
    verify(out)
    before = shard_hashes(out)
    with open(tmp_path / "ids.csv", "a") as fh:
        fh.write("oops,1,2\n")
    with pytest.raises(EtlError, match=r"ids\.csv:2002: feature 'id'.*cannot parse 'oops'.*"
                                       r"\[unparsable_number\]; all of them: .*rejected\.jsonl"):
        _ids_job(tmp_path, shards=3)
    assert shard_hashes(out) == before and verify(out)["records"] == 2000
    # nothing published, but every rejected record kept beside the run's log
    kept = glob.glob(str(tmp_path / ".out.etl" / "logs" / "*.rejected.jsonl"))
    assert [json.loads(x)["line"] for x in open(kept[0])] == [2002] and len(kept) == 1
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]
    # allowed through max_bad_fraction: the bad row goes to the dead-letter file
    out = _ids_job(tmp_path, shards=3, max_bad_fraction=0.01)
    m = manifest(out)
    assert m["splits"]["train"]["num_records"] == 2000
    assert m["rejected"]["num_records"] == 1
    assert m["rejected"]["by_reason"] == {"unparsable_number": 1}
    assert m["inputs"] == [{"path": str(tmp_path / "ids.csv"), "read": 2001, "written": 2000,
                            "rejected": 1}]
    dead = [json.loads(x) for x in open(os.path.join(out, "rejected", "rejected.jsonl"))]
    assert [(d["source"], d["line"], d["feature"], d["code"]) for d in dead] == [
        (str(tmp_path / "ids.csv"), 2002, "id", "unparsable_number")]
    assert set(m["files"]) == {"schema.yaml", "schema.pbtxt", "rejected/rejected.jsonl",
                               "dataset_info.json", "features.json"}
    verify(out)
    # every published file is checked, not only the shards
    for name in ("rejected/rejected.jsonl", "schema.pbtxt"):
        path = os.path.join(out, name)
        original = open(path, "rb").read()
        open(path, "wb").write(original.replace(b"2002", b"2003").replace(b"INT", b"INU"))
        assert open(path, "rb").read() != original
        with pytest.raises(VerifyError, match=re.escape(path) + ": sha256 .* does not match"):
            verify(out)
        open(path, "wb").write(original)
    verify(out)
    shutil.rmtree(out)


def test_local_default_uses_every_core_and_explicit_options_win() -> None:
    from cli.run import default_beam_args, shares_process  # noqa: PLC0415

    cores = f"--direct_num_workers={max(os.cpu_count() or 1, 1)}"
    assert default_beam_args([]) == ["--runner=FnApiRunner",
                                     "--direct_running_mode=multi_threading", cores]
    assert default_beam_args(["--runner", "FnApiRunner", "--direct_num_workers=1"]) == [
        "--runner", "FnApiRunner", "--direct_num_workers=1", "--direct_running_mode=multi_threading"]
    assert default_beam_args(["--runner=FnApiRunner", "--direct_running_mode=in_memory"]) == [
        "--runner=FnApiRunner", "--direct_running_mode=in_memory", cores]
    assert default_beam_args(["--runner=DataflowRunner", "--project=p"]) == [
        "--runner=DataflowRunner", "--project=p"]
    # spills may be held in memory only where stage 2 runs in this very process
    assert shares_process(default_beam_args([]))
    assert shares_process(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    assert not shares_process(["--runner=FnApiRunner", "--direct_running_mode=multi_processing"])
    assert not shares_process(default_beam_args(["--runner=DataflowRunner"]))
    assert not shares_process(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
    # runner options as Beam parses them, whatever their spelling
    assert shares_process(["--runner", "FnApiRunner", "--direct_running_mode", "in_memory"])
    assert default_beam_args(["--runner", "DataflowRunner"]) == ["--runner", "DataflowRunner"]
