"""`infer-schema` through the real CLI: the schema it writes runs unchanged (`run` of the job
file --job writes) and round-trips every record exactly; the YAML carries the review comments
a person needs. One pipeline run per format."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import ROOT, cli

DATA = os.path.join(ROOT, "examples", "data")


def infer_and_run(tmp_path, *sources: str, extra: tuple[str, ...] = ()) -> tuple[str, dict]:
    """infer-schema SOURCES -o schema --job job; run the job; every record of both splits."""
    from etl.read.dataset import load_records  # noqa: PLC0415 - TensorFlow only where needed

    schema, job, out = (str(tmp_path / n) for n in ("schema.yaml", "job.yaml", "out"))
    r = cli("infer-schema", *sources, "--output", schema, "--job", job, *extra)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {schema}\nwrote {job}\ninfer-schema: "), r.stdout
    r = cli("run", job, "--output", out)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "rejected 0" in r.stdout
    parts = [load_records(out, split) for split in ("train", "test")]
    records = {k: _cat(parts[0][k], parts[1][k]) for k in parts[0]}
    with open(schema, encoding="utf-8") as fh:
        return joined(fh.read()), records


def joined(text: str) -> str:
    """The schema text with each wrapped review comment on one line (easier to assert)."""
    return re.sub(r"\n *# {2,}", " ", text)


def _cat(a, b):
    return a + b if isinstance(a, list) else np.concatenate([a, b])


@pytest.mark.slow
def test_iris_csv(tmp_path) -> None:
    text, rec = infer_and_run(tmp_path, os.path.join(DATA, "iris.csv"))
    assert "      - Iris-setosa      # 50 seen\n      - Iris-versicolor  # 50 seen\n" \
           "      - Iris-virginica   # 50 seen\n" in text
    assert "# review: vocabulary of the 3 distinct values in 150 sampled values (ids 0..2 in" in text
    assert text.count("# review: float32 chosen for decimal text") == 4
    assert text.startswith("# Inferred by `run_pipeline.py infer-schema` (csv) from all 150 "
                           "records of iris.csv.\n")
    with open(os.path.join(DATA, "iris.csv"), encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    vocab = sorted({r["species"] for r in rows})
    cols = ("sepal_length", "sepal_width", "petal_length", "petal_width")
    want = sorted(tuple(float(np.float32(r[c])) for c in cols) + (vocab.index(r["species"]),)
                  for r in rows)
    got = sorted(tuple(float(rec[c][i]) for c in cols) + (int(rec["species"][i]),)
                 for i in range(len(rec["species"])))
    assert got == want and len(got) == 150


def _idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    dims = np.frombuffer(data[4 : 4 + 4 * ndim], ">u4")
    return np.frombuffer(data[4 + 4 * ndim :], np.uint8).reshape(dims)


@pytest.mark.slow
def test_digits_idx(tmp_path) -> None:
    files = sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if "idx" in f)
    text, rec = infer_and_run(tmp_path, *files)
    assert "name: digits\n" in text
    assert "  image:\n    # review: shape [8, 8, 1]: every sampled record is a 8x8 uint8 array" in text
    assert "    dtype: uint8\n    shape: [8, 8, 1]\n    encoding: raw\n" in text
    assert "# review: int column with 10 distinct values (0, 1, 2, 3, 4, 5, 6, 7, 8, 9): a " \
           "class label?" in text
    images = np.concatenate([_idx(f) for f in files if "images" in f])
    labels = np.concatenate([_idx(f) for f in files if "labels" in f])
    want = sorted((img.tobytes(), int(lab)) for img, lab in zip(images, labels, strict=True))
    got = sorted((img.reshape(8, 8).tobytes(), int(lab))
                 for img, lab in zip(rec["image"], rec["label"], strict=True))
    assert got == want and len(got) == 1797


@pytest.mark.slow
def test_sentences_jsonl(tmp_path) -> None:
    path = os.path.join(DATA, "sentences.jsonl")
    text, rec = infer_and_run(tmp_path, path)
    assert "  tokens:\n    # review: shape [-1] variable: " in text
    assert "    dtype: int64\n    shape: [-1]\n" in text
    assert "# review: all 500 sampled values distinct: an id?" in text
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    got = {int(i): (int(n), [int(t) for t in toks])
           for i, n, toks in zip(rec["id"], rec["length"], rec["tokens"], strict=True)}
    assert got == {r["id"]: (r["length"], r["tokens"]) for r in rows}


@pytest.mark.slow
def test_parquet_missing_values_lists_and_vocabulary(tmp_path) -> None:
    rng = np.random.default_rng(13)
    n = 40
    cats = ["red", "green", "blue"]
    cat = [None if i % 13 == 5 else cats[i % 3] for i in range(n)]
    seq = [None if i % 10 == 3 else list(range(i % 4)) for i in range(n)]
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(rng.standard_normal(n)),
        "Colour Name": pa.array(cat, pa.string()),
        "vec": pa.array([rng.standard_normal(3).astype(np.float32).tolist() for _ in range(n)],
                        pa.list_(pa.float32())),
        "seq": pa.array(seq, pa.list_(pa.int64())),
        "note": pa.array([f"row {i}" for i in range(n)]),
        "count": pa.array([None if i == 7 else i * 3 for i in range(n)], pa.int64()),
    })
    path = str(tmp_path / "data.parquet")
    pq.write_table(table, path, row_group_size=16)
    text, rec = infer_and_run(tmp_path, path)
    assert "  colour_name:\n" in text and "    source: Colour Name\n" in text
    assert "# review: 3 of 40 sampled rows have no value: default -1 is no label for them" in text
    assert "      - blue   # 12 seen\n      - green  # 12 seen\n      - red    # 13 seen\n" in text
    assert "# review: shape [3] fixed: all 40 sampled rows had 3 values; a row with another " \
           "count would be rejected as wrong_shape" in text
    assert "# review: 4 of 40 sampled rows have no value: required: false reads them as an " \
           "empty list" in text
    # a missing int is not stored as 0 (a value the column holds) but as -1, below every
    # sampled value, with a comment counting what it fills
    assert "# review: 1 of 40 sampled rows have no value: default -1 lies below every sampled " \
           "value (a marker for 'missing', not a measurement)" in text
    assert "    default: -1  # fills 1 of 40 sampled values\n" in text
    assert "# review: float32 chosen for float64 data" in text
    assert "# review: text with 40 distinct values in 40 sampled values: kept as strings" in text
    src = table.to_pylist()
    by_id = {int(i): k for k, i in enumerate(rec["id"])}
    assert sorted(by_id) == list(range(n))
    for row in src:
        k = by_id[row["id"]]
        assert float(rec["x"][k]) == float(np.float32(row["x"]))
        assert int(rec["colour_name"][k]) == (-1 if row["Colour Name"] is None
                                              else sorted(cats).index(row["Colour Name"]))
        assert rec["vec"][k].tolist() == row["vec"]
        assert rec["seq"][k] == (row["seq"] or [])
        assert rec["note"][k] == row["note"].encode()
        assert int(rec["count"][k]) == (-1 if row["count"] is None else row["count"])


@pytest.mark.slow
def test_npy_pairs_and_npz(tmp_path) -> None:
    rng = np.random.default_rng(7)
    n = 30
    x = rng.standard_normal((n, 3, 2))  # float64: raw keeps it exact
    y = rng.permutation(n).astype(np.int32)
    img = rng.integers(0, 256, (n, 5, 5), dtype=np.uint8)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "img.npy", img)
    npy = tmp_path / "npy"
    npy.mkdir()
    text, rec = infer_and_run(npy, f"y={tmp_path / 'y.npy'}", f"x={tmp_path / 'x.npy'}",
                              f"img={tmp_path / 'img.npy'}")
    assert "  x:\n    # review: encoding raw: each record's 6 float64 values" in text
    assert "    dtype: float64\n    shape: [3, 2]\n    encoding: raw\n" in text
    assert "    dtype: uint8\n    shape: [5, 5, 1]\n    encoding: raw\n" in text
    assert "  y:\n    # review: all 30 sampled values distinct: an id?" in text
    by_y = {int(v): k for k, v in enumerate(rec["y"])}
    assert sorted(by_y) == list(range(n))
    for i in range(n):
        k = by_y[int(y[i])]
        assert rec["x"][k].tobytes() == x[i].tobytes()
        assert rec["img"][k].reshape(5, 5).tobytes() == img[i].tobytes()

    a = rng.standard_normal((n, 4)).astype(np.float32)
    b = np.arange(n) % 3 == 0
    np.savez(tmp_path / "arch.npz", a=a, b=b)
    npz = tmp_path / "npz"
    npz.mkdir()
    text, rec = infer_and_run(npz, str(tmp_path / "arch.npz"))
    assert "  a:\n    # review: shape [4] fixed: every sampled record holds this array shape\n" \
           "    dtype: float32\n    shape: [4]\n" in text
    assert "  b:\n    dtype: bool\n    shape: []\n" in text
    want = sorted((r.tobytes(), bool(v)) for r, v in zip(a, b, strict=True))
    got = sorted((r.tobytes(), bool(v)) for r, v in zip(rec["a"], rec["b"], strict=True))
    assert got == want


@pytest.mark.slow
def test_image_folder(tmp_path) -> None:
    from PIL import Image  # noqa: PLC0415

    rng = np.random.default_rng(3)
    root = tmp_path / "pics"
    pixels = {}
    for cls, mode in (("cat", "RGB"), ("dog", "RGB"), ("owl", "L")):
        (root / cls).mkdir(parents=True)
        for i in range(3 if cls != "owl" else 2):
            shape = (6, 8, 3) if mode == "RGB" else (6, 8)
            arr = rng.integers(0, 256, shape, dtype=np.uint8)
            name = f"{cls}/{i}.png"
            Image.fromarray(arr, mode).save(root / name)
            pixels[name] = np.asarray(Image.fromarray(arr, mode).convert("RGB"))
    text, rec = infer_and_run(tmp_path, str(root))
    assert "    dtype: uint8\n    shape: [6, 8, 3]\n    encoding: png\n" in text
    assert "# review: 8 sampled images, all 6x8, PNG, mode L (2), RGB (6): shape [6, 8, 3]" in text
    assert "      - cat  # 3 images\n      - dog  # 3 images\n      - owl  # 2 images\n" in text
    got = {f.decode(): (img, int(lab)) for f, img, lab
           in zip(rec["filename"], rec["image"], rec["label"], strict=True)}
    assert sorted(got) == sorted(pixels)
    for name, (img, lab) in got.items():
        assert lab == ["cat", "dog", "owl"].index(name.split("/")[0])
        assert np.array_equal(img, pixels[name]), name


@pytest.mark.slow
def test_sample_limit_stdout_and_refusals(tmp_path) -> None:
    path = tmp_path / "big.csv"
    path.write_text("a,b\n" + "".join(f"{i},{i % 2}\n" for i in range(5000)))
    r = cli("infer-schema", str(path), "--sample", "100")
    assert r.returncode == 0, r.stderr
    r.stdout = joined(r.stdout)
    assert r.stdout.startswith("# Inferred by `run_pipeline.py infer-schema` (csv) from the "
                               "first 100 records of big.csv.\n")
    assert "  b:\n    # review: int column with 2 distinct values (0, 1): a class label?" in r.stdout
    existing = tmp_path / "s.yaml"
    existing.write_text("mine\n")
    r = cli("infer-schema", str(path), "-o", str(existing))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"error: {existing} exists; infer-schema never overwrites a "
                                "file: choose another name or remove it")
    assert existing.read_text() == "mine\n"
    r = cli("infer-schema", str(path), "--job", str(tmp_path / "j.yaml"))
    assert r.returncode == 2
    assert "--job needs --output" in r.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,4,5\n6,7\n")
    r = cli("infer-schema", str(bad))
    assert r.returncode == 3
    assert r.stderr.startswith(f"error: {bad}:3: ")
    assert "[wrong_field_count]" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["x.dat"])
def test_unknown_format_asks_for_format(tmp_path, name) -> None:
    (tmp_path / name).write_text("1\n")
    r = cli("infer-schema", str(tmp_path / name))
    assert r.returncode == 2
    assert "cannot tell the format from the file names (unknown): pass --format" in r.stderr


# ---- TFRecord files of tf.train.Example --------------------------------------------------------
def _frames(path: str) -> list[bytes]:
    from etl.formats.tfrecord import compression_of, read_file  # noqa: PLC0415

    return [data for _, data in read_file(path, compression_of(path))]


def _shard_records(out: str) -> list[bytes]:
    return sorted(r for f in sorted(os.listdir(out)) if ".tfrecord" in f
                  and not f.endswith(".index") for r in _frames(os.path.join(out, f)))


@pytest.mark.slow
def test_tfrecord_reshard_of_the_demo_output(tmp_path) -> None:
    """The realistic use: re-shuffle/re-shard existing TFRecords (here the demo's output)."""
    from etl.read.dataset import load_records  # noqa: PLC0415

    src = str(tmp_path / "digits")
    r = cli("run", os.path.join(ROOT, "examples", "demo.yaml"), "--output", src)
    assert r.returncode == 0, r.stderr + r.stdout
    work = tmp_path / "again"
    work.mkdir()
    text, rec = infer_and_run(work, os.path.join(src, "*.tfrecord"))
    assert text.startswith("# Inferred by `run_pipeline.py infer-schema` (tfrecord) from all 1797 "
                           "records of its 8 files.\n")
    assert f"review: {src}/schema.yaml lies beside these files: if they were written with it, " \
           "that schema is exact" in text.replace("\n# ", " ")
    assert "name: digits\n" in text
    assert "  image:\n    # review: all 1797 sampled values are 64 bytes and not PNG/JPEG: a raw " \
           "tensor? encoding: raw decodes it on read but needs its dtype and shape (one of: uint8 " \
           "[64], float16 or int16 [32], float32 or int32 [16], float64 or int64 [8], or any " \
           "shape holding as many values), which the bytes do not tell; kept as bytes, read back " \
           "unchanged\n    dtype: string\n    shape: []\n" in text
    assert "  label:\n    # review: int column with 10 distinct values (0, 1, 2, 3, 4, 5, 6, 7, 8, " \
           "9): a class label?" in text
    # passed through unchanged: the same serialized records, and the same values read back
    assert _shard_records(str(work / "out")) == _shard_records(src) and len(rec["label"]) == 1797
    old = [load_records(src, s) for s in ("train", "test")]
    want = sorted((img.tobytes(), int(lab)) for part in old
                  for img, lab in zip(part["image"], part["label"], strict=True))
    got = sorted((bytes(img), int(lab)) for img, lab in zip(rec["image"], rec["label"],
                                                             strict=True))
    assert got == want


def _png(rng: np.random.Generator) -> bytes:
    import io  # noqa: PLC0415

    from PIL import Image  # noqa: PLC0415

    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (5, 6, 3), dtype=np.uint8), "RGB").save(buf, "PNG")
    return buf.getvalue()


def _mixed_examples() -> tuple[list[bytes], list[dict]]:
    """40 Examples from two schemas: the last 10 lack `note` and `weight`."""
    from etl.contract.codec import Encoder  # noqa: PLC0415
    from etl.contract.schema import schema_from_dict  # noqa: PLC0415

    rng = np.random.default_rng(13)
    full = {"id": {"dtype": "int64", "shape": []},
            "image/encoded": {"dtype": "bytes", "shape": []},
            "flag": {"dtype": "bool", "shape": []},
            "colour": {"dtype": "bytes", "shape": []},
            "vec": {"dtype": "float32", "shape": [3]},
            "tokens": {"dtype": "int64", "shape": [-1]},
            "blob": {"dtype": "bytes", "shape": []},
            "note": {"dtype": "bytes", "shape": []},
            "weight": {"dtype": "float32", "shape": []}}
    part = {k: v for k, v in full.items() if k not in ("note", "weight")}
    rows = [{"id": i, "image/encoded": _png(rng), "flag": i % 3 == 0,
             "colour": ["red", "green", "blue"][i % 3].encode(),
             "vec": rng.standard_normal(3).astype(np.float32),
             "tokens": list(range(i % 4)),
             "blob": rng.standard_normal(3).astype(np.float32).tobytes(),
             "note": f"row {i}".encode(), "weight": float(np.float32(i / 7))}
            for i in range(40)]
    records = []
    for spec, chunk in ((full, rows[:30]), (part, rows[30:])):
        enc = Encoder(schema_from_dict({"name": "m", "features": spec}))
        records += enc.encode({k: [r[k] for r in chunk] for k in spec}).records
    return records, rows


@pytest.mark.slow
def test_tfrecord_gzip_examples_with_missing_features(tmp_path) -> None:
    """Images, flags, strings, fixed and ragged lists, raw-looking bytes, and features some
    records lack, in one gzip file: inferred, run, every record read back exactly."""
    import io  # noqa: PLC0415

    from PIL import Image  # noqa: PLC0415

    from etl.formats.tfrecord import frame_all  # noqa: PLC0415

    records, rows = _mixed_examples()
    path = tmp_path / "mixed.tfrecord.gz"
    path.write_bytes(gzip.compress(frame_all(records), mtime=0))
    text, rec = infer_and_run(tmp_path, str(path))
    assert "  image/encoded:\n    # review: 40 sampled images, all 5x6, PNG, mode RGB (40): shape " \
           "[5, 6, 3], encoding png" in text
    assert "    dtype: uint8\n    shape: [5, 6, 3]\n    encoding: png\n" in text
    assert "  flag:\n    # review: only 0 and 1 in the 40 sampled values: a bool? dtype: bool " \
           "reads the same int64_list as True/False" in text
    assert "  colour:\n    # review: 3 distinct strings in 40 sampled values: 'red' (14), " \
           "'blue' (13), 'green' (13); kept as strings, as the records store them" in text
    assert "    dtype: string\n    shape: []\n" in text and "vocabulary:" not in text
    assert "  vec:\n    # review: shape [3] fixed: all 40 sampled rows had 3 values" in text
    assert "  tokens:\n    # review: shape [-1] variable: 0 to 3 values per row in 40 sampled " \
           "rows" in text
    assert "  blob:\n    # review: all 40 sampled values are 12 bytes and not PNG/JPEG: a raw " \
           "tensor?" in text
    assert "  note:\n    # review: text with 30 distinct values in 30 sampled values: kept as " \
           "strings\n    # review: 10 of 40 sampled records lack this feature: default '' is " \
           "what a reader's parse spec gives them (the records pass through unchanged)" in text
    assert "  weight:\n    # review: 10 of 40 sampled records lack this feature: default 0 is " \
           "what a reader's parse spec gives them" in text
    assert "    default: ''\n" in text and "    default: 0\n" in text
    assert _shard_records(str(tmp_path / "out")) == sorted(records)
    by_id = {int(i): k for k, i in enumerate(rec["id"])}
    assert sorted(by_id) == list(range(40))
    for row in rows:
        k = by_id[row["id"]]
        pixels = np.asarray(Image.open(io.BytesIO(row["image/encoded"])))
        assert np.array_equal(rec["image/encoded"][k], pixels)
        assert int(rec["flag"][k]) == int(row["flag"])
        assert rec["colour"][k] == row["colour"]
        assert rec["vec"][k].tobytes() == row["vec"].tobytes()
        assert list(rec["tokens"][k]) == row["tokens"]
        assert rec["blob"][k] == row["blob"]
        missing = row["id"] >= 30
        assert rec["note"][k] == (b"" if missing else row["note"])
        assert float(rec["weight"][k]) == (0.0 if missing else row["weight"])


@pytest.mark.slow
def test_tfrecord_refusals(tmp_path) -> None:
    """A SequenceExample file is refused (exit 2), not given a wrong Example schema; records
    that are not Examples name their file, record and byte offset (exit 3)."""
    import zlib  # noqa: PLC0415

    from etl.contract.codec import Encoder  # noqa: PLC0415
    from etl.contract.schema import schema_from_dict  # noqa: PLC0415
    from etl.formats.tfrecord import frame, frame_all  # noqa: PLC0415

    seq = schema_from_dict({"name": "s", "kind": "sequence_example",
                            "context": {"n": {"dtype": "int64", "shape": []}},
                            "sequence": {"tok": {"dtype": "int64", "shape": []}}})
    path = tmp_path / "seq.tfrecords"
    path.write_bytes(frame_all(Encoder(seq).encode({"n": [2, 1],
                                                    "tok": [[5, 6], [7]]}).records))
    r = cli("infer-schema", str(path))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"error: {path}: records are tf.train.SequenceExample (they hold "
                                "feature_lists): infer-schema infers tf.train.Example schemas "
                                "only; write a kind: sequence_example schema by hand (README, "
                                "'Schema files')")
    ex = schema_from_dict({"name": "e", "features": {"x": {"dtype": "int64", "shape": []}}})
    good = Encoder(ex).encode({"x": [1, 2]}).records
    garbage = tmp_path / "garbage.tfrecord"
    garbage.write_bytes(frame_all([*good, b"not a proto at all"]))
    r = cli("infer-schema", str(garbage))
    assert r.returncode == 3
    offset = len(frame(good[0])) + len(frame(good[1]))
    assert r.stderr.strip() == (f"error: {garbage}: record 2 (byte {offset}): top-level field 13 "
                                "(wire type 6): not a tf.train.Example/SequenceExample; "
                                "infer-schema reads TFRecord files of tf.train.Example")
    inner = tmp_path / "inner.tfrecord.zz"  # field 1 framed right, its Features bytes junk
    inner.write_bytes(zlib.compress(frame_all([good[0], b"\n\x03abc", good[1]])))
    r = cli("infer-schema", str(inner))
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith(f"error: {inner}: record 1 (byte {len(frame(good[0]))}): ")
    assert "(not a valid serialized tf.train.Example); fix the file" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_tfrecord_inference_imports_no_tensorflow(tmp_path) -> None:
    """infer-schema on TFRecords decodes with tfx_bsl's C++ decoder: no TensorFlow import
    (~4 s, 600 MB); also the file names it takes as tfrecord."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from etl.formats.tfrecord import frame_all  # noqa: PLC0415
    from etl.tools.infer.command import plan  # noqa: PLC0415

    records, _ = _mixed_examples()
    path = tmp_path / "m.tfrecord"
    path.write_bytes(frame_all(records))
    code = ("import sys, types\nfrom etl.tools.infer.command import command\n"
            f"command(types.SimpleNamespace(sources=[{str(path)!r}], format=None, sample=10000, "
            "output=None, job=None, name=None))\n"
            "print('tensorflow' in sys.modules, 'apache_beam' in sys.modules, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "False False"
    assert "  image/encoded:\n" in r.stdout
    for name in ("a.tfrecords", "b.tfrecord.gz", "c.TFRECORD.zz", "d.tfrecords.zlib"):
        (tmp_path / name).write_bytes(b"")
        assert plan([str(tmp_path / name)], None)[0] == "tfrecord", name


_SPEC = re.compile(r"^  (\S+):\n(?:    #.*\n)*((?:    \w+: .*\n)+)", re.M)  # name, spec lines


@pytest.mark.slow
def test_tfrecord_on_gcs(tmp_path, gcs_emulator, gcs_bucket) -> None:
    """gs:// TFRecords (glob, gzip) are sampled through etl.storage.fs like local ones."""
    from etl.formats.tfrecord import frame_all  # noqa: PLC0415

    records, _ = _mixed_examples()
    for i, part in enumerate((records[:25], records[25:])):
        gcs_emulator.upload_bytes(gzip.compress(frame_all(part), mtime=0),
                                  f"{gcs_bucket}/in/mixed-{i:05d}-of-00002.tfrecord.gz")
    local = tmp_path / "mixed.tfrecord.gz"
    local.write_bytes(gzip.compress(frame_all(records), mtime=0))
    r = cli("infer-schema", f"{gcs_bucket}/in/*.tfrecord.gz", "--sample", "20",
            env=gcs_emulator.env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.replace("\n# ", " ").startswith(
        "# Inferred by `run_pipeline.py infer-schema` (tfrecord) from the first (up to 20) "
        "records of each of its 2 files, 35 in all. Every `# review:`")
    assert "name: mixed\n" in r.stdout
    whole = cli("infer-schema", str(local))
    # the same feature specs as the whole file's (35 of its 40 records, missing values included)
    specs = re.findall(_SPEC, r.stdout)
    assert len(specs) == 9 and ("note", "    dtype: string\n    shape: []\n    default: ''\n") \
        in specs
    assert specs == re.findall(_SPEC, whole.stdout)


# ---- issue 27: dialect, null markers, dates, names, outputs, one summary ---------------------
def _infer(tmp_path, *args: str) -> tuple[str, str, str]:
    """infer-schema ARGS -o schema --job job in tmp_path: (schema, job, stdout) texts."""
    from pathlib import Path  # noqa: PLC0415

    r = cli("infer-schema", *args, "-o", "schema.yaml", "--job", "job.yaml", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    return (joined(Path(tmp_path, "schema.yaml").read_text()),
            Path(tmp_path, "job.yaml").read_text(), r.stdout)


def _source(job: str) -> str:
    return job.split("source:\n", 1)[1].split("# review: the split", 1)[0]


def test_sniff_delimiters_header_encoding(tmp_path) -> None:
    from etl.tools.infer.dialect import sniff  # noqa: PLC0415

    cases = {
        "semi.csv": (b"a;b;c\n1;2,5;x\n3;4,5;y\n", ";", True, "utf-8"),
        "tab.csv": (b"a\tb\n1\t2\n", "\t", True, "utf-8"),
        "pipe.csv": (b"a|b\n1|2\n3|4\n", "|", True, "utf-8"),
        "bom.csv": (b"\xef\xbb\xbfname,n\nx,1\n", ",", True, "utf-8-sig"),
        "latin.csv": ("name,n\nJosé,1\nZoë,2\n".encode("latin-1"), ",", True, "cp1252"),
        "nums.csv": (b"1.5,2\n3.5,4\n5.5,6\n", ",", False, "utf-8"),
    }
    for name, (data, delimiter, header, encoding) in cases.items():
        (tmp_path / name).write_bytes(data)
        d = sniff(str(tmp_path / name))
        assert (d.delimiter, d.header, d.encoding) == (delimiter, header, encoding), name
    d = sniff(str(tmp_path / "nums.csv"))
    assert d.names == ["column_0", "column_1"]
    assert d.source_keys() == {"header": False, "columns": ["column_0", "column_1"]}
    assert sniff(str(tmp_path / "latin.csv")).notes == [
        "not UTF-8 (byte 0xe9 on line 2 of latin.csv): read as cp1252 (--encoding names another)"]
    # the command line overrides each
    d = sniff(str(tmp_path / "semi.csv"), delimiter=",", encoding="latin-1", header=False)
    assert (d.delimiter, d.encoding, d.header, d.names) == (",", "latin-1", False,
                                                            ["column_0", "column_1"])


@pytest.mark.slow
def test_duplicate_and_trailing_empty_columns_are_named(tmp_path) -> None:
    (tmp_path / "d.csv").write_text("id,name,name,\n1,a,b,\n2,c,d,\n3,a,b,\n4,c,d,\n")
    schema, job, out = _infer(tmp_path, "d.csv")
    assert _source(job) == ("  format: csv\n  paths: [d.csv]\n"
                            "  columns: [id, name, name_2, column_3]\n")
    assert "  csv: delimiter ',', header row, encoding utf-8; duplicate column name 'name' " \
           "(columns 1 and 2): the second is read as 'name_2' (columns: in the job lists the " \
           "names a run uses; rename it there or in the file); every line ends with ',': a " \
           "trailing empty column, named column_3 in columns: and left out of the schema (or " \
           "remove the trailing delimiters)\n" in out
    assert "  left out: 'column_3' (a trailing empty column (every line ends " \
           "with the delimiter))\n" in out
    assert "column_3" not in schema.split("features:")[1]
    assert "  name_2:\n" in schema
    r = cli("run", "job.yaml", cwd=str(tmp_path))
    assert r.returncode == 0 and "written 4, rejected 0" in r.stdout, r.stderr + r.stdout


@pytest.mark.slow
def test_null_markers_dates_and_thousands(tmp_path) -> None:
    (tmp_path / "m.csv").write_text(
        "when,at,x,n,label,big\n"
        "2020-01-01,2020-01-01T10:00:00Z,1.5,3,a,\"1,200\"\n"
        "2020-01-02,2020-01-01T10:00:00.250Z,NA,NA,NA,\"2,500\"\n"
        "NA,2020-01-01 11:00:00+02:00,2.5,N/A,b,300\n"
        "2020-01-04,2020-01-02T10:00:00,,4,a,400\n")
    schema, job, out = _infer(tmp_path, "m.csv")
    assert _source(job) == (
        "  format: csv\n  paths: [m.csv]\n"
        "  # review: 'N/A' fills 1 cells (n: 1); 'NA' fills 4 cells (when: 1, x: 1, n: 1, label: "
        "1); '' (an\n  #         empty cell) is the CSV default\n"
        "  null_values: ['', N/A, NA]\n")
    assert "  when:\n    # review: 1 sampled values are null markers of the source's " \
           "null_values: missing values\n    # review: ISO 8601 dates in all 3 sampled values: " \
           "dtype date (stored as int64 days since 1970-01-01)\n    # review: 1 of 4 sampled " \
           "rows have no value: required, so a run rejects such records as missing_required " \
           "(and counts them)\n    dtype: date\n    shape: []\n" in schema
    assert "  at:\n    # review: ISO 8601 date-times in all 4 sampled values (3 carry a UTC " \
           "offset, the others are read as UTC): dtype timestamp, unit ms (the finest fraction " \
           "seen: 3 digits; stored as int64 ms since 1970-01-01 UTC)\n    dtype: timestamp\n" \
           "    unit: ms\n    shape: []\n" in schema
    assert "    dtype: float32\n    shape: []\n    default: .nan  # fills 2 of 4 sampled " \
           "values\n    allow_nan: true\n" in schema
    assert "    dtype: int64\n    shape: []\n    default: -1  # fills 2 of 4 sampled values\n" \
        in schema
    assert "    vocabulary:\n      - a  # 2 seen\n      - b  # 1 seen\n" not in schema  # 2 labels
    assert "NA" not in schema.split("features:")[1].replace("NaN", "")
    assert "  big:\n    # review: numbers with thousands separators ('1,200', 2 sampled values): " \
           "kept as text" in schema
    assert out.split("\n", 2)[2] == (
        "infer-schema: 6 features from all 4 records of m.csv (csv)\n"
        "  csv: delimiter ',', header row, encoding utf-8\n"
        "  null markers: 'N/A' in 1 cells (n: 1); 'NA' in 4 cells (when: 1, x: 1, n: 1, ...) -> "
        "null_values: ['', 'N/A', 'NA'] on the job's source (missing values)\n"
        "  dates: when (date), at (timestamp, unit ms)\n"
        "  defaults (a run fills and counts them): x NaN fills 2 of 4 sampled values, n -1 fills "
        "2 of 4 sampled values, label '' fills 1 of 4 sampled values\n"
        "  required, but values missing in the sample (a run rejects and counts those records): "
        "when (1 of 4)\n"
        "  kept as strings: label (2 distinct), big (4 distinct)\n"
        "  text that looks like numbers (kept as text): big: numbers with thousands separators "
        "('1,200', 2 sampled values)\n"
        "  output: out/m_csv_6c37dc (the job's; named after its inputs and format)\n")


@pytest.mark.slow
def test_colliding_names_get_distinct_features_with_source(tmp_path) -> None:
    (tmp_path / "c.csv").write_text("Species,species,SPECIES\n1,2,3\n4,5,6\n")
    schema, job, out = _infer(tmp_path, "c.csv")
    body = schema.split("features:\n", 1)[1]
    assert re.findall(r"^  (\w+):\n", body, re.M) == ["species", "species_2", "species_3"]
    assert re.findall(r"    source: (\w+)\n", body) == ["Species", "species", "SPECIES"]
    assert "  names: 'species' and 'Species' both read as feature species: 'species' is " \
           "feature species_2 (source: species); 'SPECIES' and 'Species' both read as feature " \
           "species: 'SPECIES' is feature species_3 (source: SPECIES)\n" in out
    r = cli("run", "job.yaml", cwd=str(tmp_path))
    assert r.returncode == 0 and "written 2, rejected 0" in r.stdout, r.stderr + r.stdout


@pytest.mark.slow
def test_files_with_different_columns_give_optional_features(tmp_path) -> None:
    from etl.read.dataset import load_records  # noqa: PLC0415

    (tmp_path / "part-a.csv").write_text("id,x,kind\n1,0.5,u\n2,1.5,v\n3,2.5,u\n")
    (tmp_path / "part-b.csv").write_text("id,y\n4,7\n5,8\n")
    schema, job, out = _infer(tmp_path, "part-a.csv", "part-b.csv")
    assert "    dtype: float32\n    shape: []\n    default: .nan  # fills 2 of 5 sampled values\n" \
           "    allow_nan: true\n" in schema
    assert "  y:\n    # review: not in 1 of 2 sampled files (part-a.csv): their records have " \
           "no value here (see the default or required line)\n" in schema
    assert "    dtype: int64\n    shape: []\n    default: -1  # fills 3 of 5 sampled values\n" \
        in schema
    assert "  not in every file (optional: a default, or required): x (not in 1 files), kind " \
           "(not in 1 files), y (not in 1 files)\n" in out
    r = cli("run", "job.yaml", "--output", "o", cwd=str(tmp_path))
    assert r.returncode == 0 and "written 5, rejected 0" in r.stdout, r.stderr + r.stdout
    parts = [load_records(str(tmp_path / "o"), s) for s in ("train", "test")]
    got = sorted(zip(*(list(p["id"]) + list(q["id"]) for p, q in [parts]),
                     *(list(p["y"]) + list(q["y"]) for p, q in [parts]), strict=True))
    assert [(int(i), int(y)) for i, y in got] == [(1, -1), (2, -1), (3, -1), (4, 7), (5, 8)]


def test_outputs_are_named_after_inputs_and_never_an_input(tmp_path) -> None:
    from etl.tools.infer.command import output_name  # noqa: PLC0415

    root = str(tmp_path)
    a = output_name("data", "csv", {"paths": [f"{root}/a/data.csv"]}, root)
    b = output_name("data", "csv", {"paths": [f"{root}/b/data.csv"]}, root)
    c = output_name("data", "parquet", {"paths": [f"{root}/a/data.parquet"]}, root)
    assert len({a, b, c}) == 3 and a.startswith("out/data_csv_") and c.startswith("out/data_parq")
    assert a == output_name("data", "csv", {"paths": [f"{root}/a/data.csv"]}, root)
    # a job file inside its input folder: the output goes beside the folder, not into it
    pics = f"{root}/pics"
    got = output_name("pics", "images", {"paths": [pics]}, pics)
    assert got == f"../out/pics_images_{got.rsplit('_', 1)[1]}"
    assert output_name("x", "csv", {"paths": [f"{root}/x.csv"]}, root).startswith("out/x_csv_")


@pytest.mark.slow
def test_json_array_is_sampled_like_json_lines(tmp_path) -> None:
    """A JSON array file (`[{...}, ...]`) is read by the jsonl source element by element:
    infer-schema samples it like JSON Lines and the proposed job reads it back."""
    (tmp_path / "arr.json").write_text('[\n  {"a": 1, "s": "x"},\n  {"a": 2, "s": "y"}\n]\n')
    schema, job, out = _infer(tmp_path, "arr.json")
    assert "source:\n  format: jsonl\n  paths: [arr.json]\n" in job
    assert "  a:\n" in schema and "    dtype: int64\n    shape: []\n" in schema
    r = cli("run", str(tmp_path / "job.yaml"), "--runner=FnApiRunner", "--progress", "none")
    assert r.returncode == 0, r.stderr
    assert "read 2 records" in r.stdout and "written 2, rejected 0" in r.stdout


@pytest.mark.slow
def test_mixed_size_images_propose_variable_shape(tmp_path) -> None:
    from PIL import Image  # noqa: PLC0415

    for cls, sizes in (("a", [(5, 7), (6, 8)]), ("b", [(9, 4)])):
        (tmp_path / "pics" / cls).mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            Image.new("RGB", (w, h)).save(tmp_path / "pics" / cls / f"{i}.png")
    schema, job, out = _infer(tmp_path, "pics")
    assert "  image:\n    # review: images of 3 sizes in 3 sampled (5x7 (1), 6x8 (1), 9x4 (1)): " \
           "shape [null, null, 3] stores each file's png bytes as they are (no re-encode) and " \
           "the readers decode each at its own size; for one fixed shape add resize: [H, W] or " \
           "pad: [H, W] with shape [H, W, 3]\n    dtype: uint8\n    shape: [null, null, 3]\n" \
           "    encoding: png\n" in schema
    assert "  images: image (png, shape [null, null, 3])\n" in out


@pytest.mark.slow
def test_schema_on_stdout_keeps_the_summary_on_stderr(tmp_path) -> None:
    (tmp_path / "s.csv").write_text("a;b\n1;x\n2;y\n")
    r = cli("infer-schema", str(tmp_path / "s.csv"))
    assert r.returncode == 0
    assert r.stdout.startswith("# Inferred by")
    assert "infer-schema: 2 features from all 2 records of s.csv (csv)\n  csv: delimiter ';', " \
           "header row, encoding utf-8\n" in r.stderr
    # told ',' for a ';' file: the reader's one-column check says what it looks like
    r = cli("infer-schema", str(tmp_path / "s.csv"), "--format", "csv", "--delimiter", ",")
    assert r.returncode == 2 and "looks like ';'-separated: set delimiter: ';'" in r.stderr
    r = cli("infer-schema", str(DATA + "/sentences.jsonl"), "--no-header")
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: --delimiter, --encoding and --no-header are for CSV files, not jsonl")


@pytest.mark.slow
def test_parquet_dates_timestamps_and_decimals(tmp_path) -> None:
    import datetime as dt  # noqa: PLC0415
    from decimal import Decimal  # noqa: PLC0415

    pq.write_table(pa.table({
        "day": pa.array([dt.date(2020, 1, i) for i in range(1, 5)], pa.date32()),
        "at": pa.array([1_600_000_000_000 + i for i in range(4)], pa.timestamp("ms", "UTC")),
        "price": pa.array([Decimal("1.25"), Decimal("0.10"), None, Decimal("-3.00")],
                          pa.decimal128(5, 2)),
        "count": pa.array([Decimal(7), Decimal(-2), Decimal(0), Decimal(10**17)],
                          pa.decimal128(18, 0)),
    }), tmp_path / "t.parquet")
    schema, job, out = _infer(tmp_path, "t.parquet")
    assert "  day:\n    # review: Arrow date32[day]: dtype date (int64 days since 1970-01-01)\n" \
           "    dtype: date\n    shape: []\n" in schema
    assert "  at:\n    # review: Arrow timestamp[ms, tz=UTC], time zone UTC: converted to UTC: " \
           "dtype timestamp, unit ms (int64 ms since 1970-01-01 UTC)\n    dtype: timestamp\n" \
           "    unit: ms\n    shape: []\n" in schema
    # decimals: the exact text, or int64 for whole numbers; never left out, never a float
    assert "  price:\n    # review: Arrow decimal128(5, 2): stored as its exact decimal text " \
           "(dtype string); a float would round most decimals, and the run refuses values a " \
           "float32 does not hold exactly\n" in schema
    assert "    dtype: string\n    shape: []\n    default: ''  # fills 1 of 4 sampled values\n" \
        in schema
    assert "  count:\n    # review: Arrow decimal128(18, 0): whole numbers, stored exactly as " \
           "int64\n" in schema
    assert "Left out" not in schema and "left out" not in out
    assert "  dates: day (date), at (timestamp, unit ms)\n" in out
    r = cli("run", "job.yaml", "--output", "o", "--progress", "none", "--runner=FnApiRunner",
            cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    import etl  # noqa: PLC0415

    got = []
    for split in ("train", "test"):
        try:
            rs = etl.open_records(str(tmp_path / "o"), split=split)
        except etl.RecordsError:  # a split the 4 records left empty
            continue
        got += [(rs[i]["price"], int(rs[i]["count"])) for i in range(len(rs))]
    assert sorted(got) == sorted([(b"1.25", 7), (b"0.10", -2), (b"", 0), (b"-3.00", 10**17)])


def test_sniff_does_not_split_text_on_spaces_or_take_names_for_data(tmp_path) -> None:
    from etl.tools.infer.dialect import sniff  # noqa: PLC0415

    (tmp_path / "names.csv").write_text("full name\nJohn Smith\nJane Doe\n")
    d = sniff(str(tmp_path / "names.csv"))
    assert (d.delimiter, d.header, d.names) == (",", True, ["full name"])
    (tmp_path / "mixed.csv").write_text("id,2020\n1,5\n2,6\n")  # one name is text: a header
    assert sniff(str(tmp_path / "mixed.csv")).header is True
    (tmp_path / "spaces.csv").write_text("a b\n1 2\n3 4\n")
    d = sniff(str(tmp_path / "spaces.csv"))
    assert (d.delimiter, d.header, d.names) == (" ", True, ["a", "b"])


def test_values_dates_markers_thousands() -> None:
    from etl.tools.infer.values import date_guess, marker_counts, thousands  # noqa: PLC0415

    def s(*cells: str) -> pa.Array:
        return pa.array(cells, pa.large_string())

    assert date_guess(s("2020-02-30")) is None  # not a date (Arrow alone rolls it over)
    assert date_guess(s("2020-02-30T10:00:00")) is None
    assert date_guess(s("31/02/2020", "1/2/2021")) is None
    got = date_guess(s("01/02/2020", "03/04/2020"))
    assert (got.dtype, got.format) == ("date", "%m/%d/%Y")
    assert got.note.endswith("; '%d/%m/%Y' reads them too: check which is meant")
    got = date_guess(s("13.01.2020", "1.2.2021"))
    assert (got.dtype, got.format) == ("date", "%d.%m.%Y")
    units = [date_guess(s(f"2020-01-01T00:00:00{f}")).unit for f in ("", ".5", ".1234", ".1234567")]
    assert units == ["s", "ms", "us", "ns"]
    assert date_guess(s("2020-01-01", "soon")) is None
    assert marker_counts(s("1", "NA", "2.5", "NA", "?")) == {"NA": 2, "?": 1}
    assert marker_counts(s("2020-01-01", "null")) == {"null": 1}
    assert marker_counts(s("a", "NA")) == {}  # text: NA may be a value
    assert marker_counts(s("NA", "NA")) == {}  # nothing else to be numbers
    assert marker_counts(s("1", "NaN")) == {}  # NaN is a float value, not a marker
    assert thousands(s("1,200", "300")).startswith("numbers with thousands separators ('1,200', "
                                                   "1 sampled values)")
    assert thousands(s("1,200", "abc")) is None


@pytest.mark.slow
def test_dialect_option_refusals(tmp_path) -> None:
    (tmp_path / "a.csv").write_text("a,b\n1,2\n")
    r = cli("infer-schema", str(tmp_path / "a.csv"), "--encoding", "klingon")
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: --encoding 'klingon' is not a Python codec (utf-8, utf-8-sig, latin-1, "
           "cp1252, ...)")
    r = cli("infer-schema", str(tmp_path / "a.csv"), "--delimiter", ";;")
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: --delimiter must be one character, got ';;'")


@pytest.mark.slow
def test_json_lines_date_strings(tmp_path) -> None:
    """JSON date strings reach infer-schema as text (the jsonl source never lets Arrow type them):
    ISO dates, and date-times with the unit of their finest fraction."""
    (tmp_path / "d.jsonl").write_text('{"a": "1970-01-01", "b": "2020-01-02T00:00:00", '
                                      '"c": "2020-01-01T10:00:00.123"}\n'
                                      '{"a": "1971-05-01", "b": "2020-01-02T10:00:00", '
                                      '"c": "2020-01-02T10:00:00"}\n')
    r = cli("infer-schema", str(tmp_path / "d.jsonl"))
    assert r.returncode == 0, r.stderr
    text = joined(r.stdout)
    # the jsonl source hands date-like strings over as text: read as ISO 8601 here
    assert "  a:\n    # review: ISO 8601 dates in all 2 sampled values: dtype date (stored as " \
           "int64 days since 1970-01-01)\n    dtype: date\n    shape: []\n" in text
    assert "    dtype: timestamp\n    unit: s\n    shape: []\n" in text
    assert "    dtype: timestamp\n    unit: ms\n    shape: []\n" in text
    assert "  dates: a (date), b (timestamp, unit s), c (timestamp, unit ms)\n" in r.stderr
