"""etl.open_records: random access without TensorFlow, through the index files, on real runs
(the bundled digits and sentences jobs) and on every feature kind, each record compared with
what the tf.data reader (`make_dataset`) decodes; Grain's DataLoader with worker processes;
gs:// through the emulator; and the bad outputs it refuses, one line naming the file."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etl.contract.codec import Encoder
from etl.contract.schema import Schema, schema_from_dict
from etl.formats.record_index import IndexFileError
from etl.read.random_access import Records, RecordsError, open_records
from tests.gcs_proxy import GcsProxy
from tests.handmade import make_output_dir, with_indexes
from tests.helpers import IDS_SCHEMA, ROOT, as_python, cli
from tests.pipelines import run_example


# ---- outputs -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_example("demo", tmp_path_factory.mktemp("digits") / "out")


@pytest.fixture(scope="module")
def sentences(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_example("sentences", tmp_path_factory.mktemp("sentences") / "out")


RICH = schema_from_dict({"name": "rich", "kind": "example", "features": {
    "id": {"dtype": "int64", "shape": []},
    "x": {"dtype": "float32", "shape": [3]},
    "half": {"dtype": "float16", "shape": [2], "encoding": "raw"},
    "name": {"dtype": "bytes", "shape": []},
    "tags": {"dtype": "int32", "shape": [-1], "required": False},
    "pairs": {"dtype": "int16", "shape": [-1, 2], "required": False},
    "opt": {"dtype": "int64", "shape": [2], "default": 7},
    "word": {"dtype": "bytes", "shape": [], "default": "none"},
    "flag": {"dtype": "bool", "shape": []},
    "rgb": {"dtype": "uint8", "shape": [4, 5, 3], "encoding": "png"},
    "deep": {"dtype": "uint16", "shape": [4, 5, 1], "encoding": "png"},
    "photo": {"dtype": "uint8", "shape": [8, 8, 3], "encoding": "jpeg"},
    "sp": {"dtype": "float32", "shape": [-1], "representation": "sparse", "required": False},
}})
SEQ = schema_from_dict({"name": "seq", "kind": "sequence_example",
                        "context": {"id": {"dtype": "int64", "shape": []}},
                        "sequence": {
                            "tok": {"dtype": "int64", "shape": []},
                            "small": {"dtype": "int8", "shape": []},
                            "vec": {"dtype": "float32", "shape": [2]},
                            "rg": {"dtype": "int32", "shape": [-1]},
                            "blob": {"dtype": "uint16", "shape": [2], "encoding": "raw"},
                            "word": {"dtype": "bytes", "shape": []},
                        }})
N = 90


def rich_columns(n: int = N) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    ids = np.arange(n)
    return {
        "id": ids * 3_000_000_000,  # beyond 32 bits
        "x": rng.standard_normal((n, 3)).astype(np.float32),
        "half": rng.standard_normal((n, 2)).astype(np.float16),
        "name": [f"rec-{i}".encode() for i in ids],
        "tags": [None if i % 7 == 0 else list(range(i % 4)) for i in ids],
        "pairs": [None if i % 5 == 0 else [[i, -i]] * (i % 3) for i in ids],
        "opt": [None if i % 3 == 0 else [i, i + 1] for i in ids],
        "word": [None if i % 4 == 0 else f"w{i}" for i in ids],
        "flag": ids % 2 == 0,
        "rgb": rng.integers(0, 256, (n, 4, 5, 3), dtype=np.uint8),
        "deep": rng.integers(0, 65536, (n, 4, 5, 1), dtype=np.uint16),
        "photo": np.repeat(rng.integers(0, 256, (n, 1, 1, 3), dtype=np.uint8), 64,
                           axis=1).reshape(n, 8, 8, 3),
        "sp": [None if i % 6 == 0 else [float(i)] * (i % 3) for i in ids],
    }


def seq_columns(n: int = N) -> dict[str, Any]:
    steps = [i % 5 for i in range(n)]
    return {
        "id": np.arange(n),
        "tok": [[2**40 + i * 7 + t for t in range(s)] for i, s in enumerate(steps)],
        "small": [[(i + t) % 100 - 50 for t in range(s)] for i, s in enumerate(steps)],
        "vec": [[[float(i), float(t)] for t in range(s)] for i, s in enumerate(steps)],
        "rg": [[list(range(t)) for t in range(s)] for i, s in enumerate(steps)],
        "blob": [[[i, 65535 - t] for t in range(s)] for i, s in enumerate(steps)],
        "word": [[f"{i}.{t}".encode() for t in range(s)] for i, s in enumerate(steps)],
    }


def hand_made(root: Path, schema: Schema, cols: dict[str, Any], shards: int = 3) -> str:
    """What the pipeline publishes, written with our Encoder and framing."""
    out = make_output_dir(root, schema, cols, num_shards=shards)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["compression"] = "none"
    (out / "manifest.json").write_text(json.dumps(manifest))
    return with_indexes(str(out))


# ---- what make_dataset decodes, per record -------------------------------------------------------
def tf_records(root: str, split: str = "train") -> dict[str, list[Any]]:
    """Every record as the tf.data reader decodes it: per feature, one Python value per record."""
    from etl.read.dataset import load_records  # noqa: PLC0415 - TensorFlow, for comparison only

    got = load_records(root, split)
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in got.items()}


def assert_matches_tf(records: Records, expected: dict[str, list[Any]], idx: np.ndarray) -> None:
    batch = records[idx]
    for name, values in expected.items():
        want = [values[i] for i in idx.tolist()]
        assert as_python(batch[name]) == want, name
    one = records[int(idx[0])]
    for name, values in expected.items():
        assert as_python(one[name]) == values[int(idx[0])], name


# ---- reading -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_digits_every_record_as_make_dataset_reads_it(digits):
    for split in ("train", "test"):
        records = open_records(digits, split)
        expected = tf_records(digits, split)
        assert len(records) == len(expected["label"]) == {"train": 1500, "test": 297}[split]
        assert_matches_tf(records, expected, np.arange(len(records)))
        batch = records[np.array([5, 0, 1499 if split == "train" else 296, 5])]
        assert batch["image"].shape == (4, 8, 8, 1) and batch["image"].dtype == np.uint8
        assert batch["label"].shape == (4,) and batch["label"].dtype == np.int64


@pytest.mark.slow
def test_random_positions_equal_the_sequential_read(digits):
    """1,000 random `[i]` per shard equal the i-th record of a sequential read."""
    records = open_records(digits, "train")
    expected = tf_records(digits, "train")
    rng = np.random.default_rng(0)
    starts = np.concatenate([[0], np.cumsum([s.num_records for s in records.shards])])
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        for i in rng.integers(a, b, 1000).tolist():
            got = records[i]
            assert got["label"] == expected["label"][i]
            assert got["image"].tolist() == expected["image"][i]


@pytest.mark.slow
def test_sentences_int64_steps_exact(sentences):
    """A real SequenceExample run: int64 token ids per step (tfx_bsl would cut them to 32
    bits, see etl.read.decode), context features, both splits."""
    for split in ("train", "validation"):
        records = open_records(sentences, split)
        expected = tf_records(sentences, split)
        assert_matches_tf(records, expected, np.arange(len(records)))
        first = records[0]
        assert first["tokens"].shape == (int(first["length"]),)


def test_every_feature_kind_as_make_dataset_reads_it(tmp_path):
    root = hand_made(tmp_path / "rich", RICH, rich_columns())
    records = open_records(root)
    expected = tf_records(root)
    assert len(records) == N
    assert_matches_tf(records, expected, np.random.default_rng(1).permutation(N))
    batch = records[0:4]
    assert batch["opt"].tolist() == [[7, 7], [1, 2], [2, 3], [7, 7]]  # the default when missing
    assert batch["word"].tolist() == [b"none", b"w1", b"w2", b"w3"]
    assert batch["half"].dtype == np.float16 and batch["flag"].dtype == np.bool_
    assert batch["deep"].dtype == np.uint16 and batch["rgb"].shape == (4, 4, 5, 3)
    assert [t.tolist() for t in batch["tags"]] == [[], [0], [0, 1], [0, 1, 2]]
    assert [p.shape for p in batch["pairs"]] == [(0, 2), (1, 2), (2, 2), (0, 2)]


def test_sequence_example_every_kind(tmp_path):
    root = hand_made(tmp_path / "seq", SEQ, seq_columns())
    records = open_records(root)
    expected = tf_records(root)
    assert_matches_tf(records, expected, np.random.default_rng(2).permutation(N))
    r = records[4]  # 4 steps
    assert r["tok"].tolist() == [2**40 + 28 + t for t in range(4)]
    assert r["vec"].shape == (4, 2) and r["blob"].shape == (4, 2) and r["blob"].dtype == np.uint16
    assert [s.tolist() for s in r["rg"]] == [[], [0], [0, 1], [0, 1, 2]]
    assert records[0]["vec"].shape == (0, 2)


@pytest.mark.slow
def test_indexing_forms(digits):
    records = open_records(digits, "test")
    n = len(records)
    assert records[-1]["label"] == records[n - 1]["label"]
    assert records[10:13]["label"].tolist() == records[[10, 11, 12]]["label"].tolist()
    assert records[::100]["label"].shape == (3,)
    assert records[np.array([], np.int64)]["image"].shape == (0, 8, 8, 1)
    items = records.__getitems__([3, 1])
    assert [r["label"] for r in items] == [records[3]["label"], records[1]["label"]]
    with pytest.raises(IndexError, match=f"record {n} out of range: 'test' has {n} records"):
        records[n]
    with pytest.raises(TypeError, match="indexed by an int, a slice or a 1-d sequence of ints"):
        records["label"]


@pytest.mark.slow
def test_pickles_names_not_handles(digits):
    records = open_records(digits, "train")
    first = records[0]
    state = pickle.dumps(records)
    assert len(state) < 20_000  # paths, schema, counts: no index arrays, no mapped shards
    again = pickle.loads(state)
    assert again[0]["label"] == first["label"] and len(again) == 1500


@pytest.mark.slow
def test_no_tensorflow_needed(digits, sentences):
    """A process where TensorFlow cannot be imported reads every record of both outputs."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["tensorflow"] = None  # any `import tensorflow` now fails
        import numpy as np
        import etl
        total = 0
        for path, split, key in (({digits!r}, "train", "label"),
                                 ({sentences!r}, "train", "tokens")):
            records = etl.open_records(path, split)
            batch = records[np.arange(len(records))]
            values = batch[key]
            total += int(np.sum(values)) if isinstance(values, np.ndarray) else \\
                sum(int(v.sum()) for v in values)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "apache_beam"))
        print(total, loaded)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    labels = sum(tf_records(digits, "train")["label"])
    tokens = sum(sum(t) for t in tf_records(sentences, "train")["tokens"])
    assert proc.stdout.split("\n")[0] == f"{labels + tokens} ['tensorflow']"  # the None entry


# ---- bad outputs -------------------------------------------------------------------------------
def copy_of(src: str, dst: Path) -> Path:
    import shutil  # noqa: PLC0415

    shutil.copytree(src, dst)
    return dst


@pytest.mark.slow
def test_output_without_index_files(digits, tmp_path):
    out = copy_of(digits, tmp_path / "old")
    manifest = json.loads((out / "manifest.json").read_text())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            shard.pop("index")
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RecordsError) as e:
        open_records(str(out))
    assert str(e.value) == (f"{out}/train-00000-of-00004.tfrecord: no index file in "
                            "manifest.json (written with `index: false`, or before index files "
                            "were written); rerun the job with `index: true` to read it at random")


def test_compressed_output(tmp_path):
    root = tmp_path / "gz"
    make_output_dir(root, ext=".gz")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["compression"] = "gzip"
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RecordsError) as e:
        open_records(str(root))
    assert str(e.value) == (f"{root}/train-00000-of-00002.tfrecord.gz: shards are "
                            "gzip-compressed; random access needs uncompressed shards with index "
                            "files (offsets into a compressed stream cannot be seeked to): "
                            "convert with `compression: none`")


@pytest.mark.slow
def test_damaged_index(digits, tmp_path):
    out = copy_of(digits, tmp_path / "damaged")
    index = out / "train-00001-of-00004.tfrecord.index"
    lines = index.read_text().splitlines()
    offset, length = lines[2].split()
    lines[2] = f"{int(offset) + 1} {length}"
    index.write_text("\n".join(lines) + "\n")
    with pytest.raises(IndexFileError) as e:
        open_records(str(out))
    assert str(e.value) == (f"{index}: line 3: offset {int(offset) + 1} length {length} is not "
                            f"where record 3's frame is (expected offset {offset})")
    index.write_text("12 x\n")
    with pytest.raises(IndexFileError, match=rf"^{index}: line 1: expected 'OFFSET LENGTH', "
                                             r"got b'12 x'$"):
        open_records(str(out))
    index.unlink()
    with pytest.raises(RecordsError, match=rf"^{index}: index file missing \(listed in "
                                           r"manifest.json\); `verify` checks the whole output$"):
        open_records(str(out))


@pytest.mark.slow
def test_corrupt_record_is_named(digits, tmp_path):
    out = copy_of(digits, tmp_path / "corrupt")
    shard = out / "train-00002-of-00004.tfrecord"
    data = bytearray(shard.read_bytes())
    offsets = [int(line.split()[0]) for line in
               (out / "train-00002-of-00004.tfrecord.index").read_text().splitlines()]
    data[offsets[5] + 20] ^= 0xFF  # a byte inside record 5's payload
    shard.write_bytes(bytes(data))
    records = open_records(str(out))
    first = int(records._starts[2])
    records[first + 4]  # its neighbour reads
    with pytest.raises(RecordsError) as e:
        records[first + 5]
    assert str(e.value) == (f"{shard}: record 5 (byte {offsets[5]}): the frame the index points "
                            "at is corrupt (length or CRC mismatch); run `verify` on the output")


@pytest.mark.slow
def test_other_refusals(digits, tmp_path):
    with pytest.raises(RecordsError, match=r"split 'nope' not in manifest.json; available "
                                           r"splits: \['test', 'train'\]"):
        open_records(digits, "nope")
    with pytest.raises(RecordsError, match=rf"^{tmp_path}/manifest.json: no such file: "):
        open_records(str(tmp_path))


def test_jpeg_pixels_are_libjpeg_accurate(tmp_path):
    """JPEGs decode as `tf.io.decode_jpeg(dct_method="INTEGER_ACCURATE")` does, to the pixel
    (grey output through libjpeg's own colour conversion), and make_dataset decodes with the
    same method (etl.contract.schema), so both readers give the same pixels."""
    import tensorflow as tf  # noqa: PLC0415 - the reference decoder

    schema = schema_from_dict({"name": "j", "kind": "example", "features": {
        "rgb": {"dtype": "uint8", "shape": [16, 24, 3], "encoding": "jpeg"},
        "grey": {"dtype": "uint8", "shape": [16, 24, 1], "encoding": "jpeg"}}})
    noise = np.random.default_rng(3).integers(0, 256, (12, 16, 24, 3), dtype=np.uint8)
    root = hand_made(tmp_path / "j", schema, {"rgb": noise, "grey": noise[..., :1]}, shards=2)
    records = open_records(root)
    ours = records[np.arange(12)]
    blobs = [Encoder(schema).encode({"rgb": noise[i:i + 1], "grey": noise[i:i + 1, ..., :1]})
             for i in range(12)]
    assert not any(b.bad for b in blobs)
    for i in range(12):
        parsed = tf.io.parse_single_example(blobs[i].records[0], schema.parse_spec())
        for name, channels in (("rgb", 3), ("grey", 1)):
            accurate = tf.io.decode_jpeg(parsed[name], channels=channels,
                                         dct_method="INTEGER_ACCURATE").numpy()
            assert np.array_equal(ours[name][i], accurate), (name, i)
    theirs = tf_records(root)
    for name in ("rgb", "grey"):
        assert np.array_equal(np.array(theirs[name]), ours[name]), name


@pytest.mark.slow
def test_array_record_output(tmp_path):
    """`format: array_record`: the same decoded records as the TFRecord output of the same
    job, read through ArrayRecordReader; Grain's own ArrayRecordDataSource sees them too."""
    pytest.importorskip("etl.formats.array_record", reason="the ArrayRecord writer (issue 22, "
                        "writer side) is not in this checkout yet")
    gp = pytest.importorskip("grain.python")
    ar = run_example("demo", tmp_path / "ar", format="array_record", index=False)
    tfr = run_example("demo", tmp_path / "tfr")
    records = open_records(ar, "train")
    assert records.format == "array_record" and len(records) == 1500
    got, want = records[np.arange(1500)], open_records(tfr, "train")[np.arange(1500)]
    assert all(np.array_equal(got[k], want[k]) for k in want)
    shards = sorted(str(p) for p in Path(ar).glob("train-*.array_record"))
    assert len(gp.ArrayRecordDataSource(shards)) == 1500
    assert pickle.loads(pickle.dumps(records))[7]["label"] == got["label"][7]


# ---- gs:// -------------------------------------------------------------------------------------
# the same job run locally and on the emulator writes the same shard bytes (same seed), so the
# gs:// reader (ranged GETs through etl.storage.fs.RangedFile) must give exactly the local
# records; in a subprocess, whose environment sends every GCS client to the emulator
_GS_READ = textwrap.dedent("""\
    import json, sys
    import numpy as np
    import etl
    local, remote = (etl.open_records(p, split="train") for p in sys.argv[1:3])
    assert len(local) == len(remote), (len(local), len(remote))
    rng = np.random.default_rng(3)
    picks = rng.permutation(len(local))[:300]
    same = 0
    for i in picks.tolist():
        a, b = local[i], remote[i]
        assert a.keys() == b.keys()
        same += all(np.array_equal(a[k], b[k]) for k in a)
    batch_a, batch_b = local[picks[:64]], remote[picks[:64]]
    same_batch = all(np.array_equal(batch_a[k], batch_b[k]) for k in batch_a)
    print(json.dumps({"n": len(remote), "same": same, "same_batch": same_batch,
                      "tf": "tensorflow" in sys.modules}))
    """)


@pytest.mark.slow
def test_gs_output_reads_as_the_local_one(tmp_path: Path, gcs_emulator, gcs_bucket) -> None:
    rows = "id,a,b\n" + "".join(f"{i},{i * 0.25},{-i}\n" for i in range(900))
    (tmp_path / "d.csv").write_text(rows)
    (tmp_path / "s.yaml").write_text(IDS_SCHEMA)
    outs = {"local": str(tmp_path / "out"), "gs": f"{gcs_bucket}/ra/out"}
    with GcsProxy(gcs_emulator.endpoint) as proxy:
        env = gcs_emulator.env(endpoint=proxy.url)
        for where, out in outs.items():
            job = tmp_path / f"{where}.yaml"
            job.write_text(json.dumps({"schema": "s.yaml", "output": out, "shards": 3,
                                       "shuffle": {"seed": 5},
                                       "source": {"format": "csv", "paths": ["d.csv"]}}))
            proc = cli("run", str(job), env=env)
            assert proc.returncode == 0, proc.stderr
        proc = subprocess.run([sys.executable, "-c", _GS_READ, outs["local"], outs["gs"]],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"n": 900, "same": 300, "same_batch": True, "tf": False}
