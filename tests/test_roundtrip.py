"""Round trip per feature kind and dtype: Encoder -> TFRecord file -> make_dataset -> exact values.

Every case builds a one-feature (or few-feature) schema with `schema_from_dict`, encodes the
input columns, frames the records with `etl.formats.tfrecord.frame_all`, reads them back through
`etl.read.dataset.make_dataset` with shuffling off, and compares with the input exactly (dtype,
shape and values). JPEG is lossy: see `test_jpeg_*` for why the cases there are exact or
within one grey level.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from etl.contract.codec import Encoder
from etl.contract.schema import Schema, schema_from_dict
from etl.formats.tfrecord import Compressor, frame_all
from etl.read.dataset import load_records, make_dataset

RNG = np.random.default_rng(1234)


# ---- helpers -------------------------------------------------------------------------------------
def write_records(path: Any, records: list[bytes], compression: str = "none") -> None:
    comp = Compressor(compression)
    path.write_bytes(comp.compress(frame_all(records)) + comp.flush())


def encode(schema: Schema, columns: dict[str, Any], n: int | None = None) -> list[bytes]:
    out = Encoder(schema).encode(columns)
    assert not out.bad, [b.message() for b in out.bad]
    if n is not None:
        assert len(out.records) == n
    return out.records


def roundtrip(tmp_path: Any, schema: Schema, columns: dict[str, Any], n: int,
              compression: str = "none") -> dict[str, Any]:
    """Encode, write one file, read it back as ONE batch (shuffle off)."""
    records = encode(schema, columns, n)
    ext = {"none": "", "gzip": ".gz", "zlib": ".zz"}[compression]
    write_records(tmp_path / f"data-00000-of-00001.tfrecord{ext}", records, compression)
    ds = make_dataset(str(tmp_path / "*.tfrecord*"), schema=schema, shuffle_buffer=0,
                      batch_size=max(n, 1))
    batches = list(ds)
    assert len(batches) == 1
    assert list(batches[0]) == [f.name for f in schema.features]
    return batches[0]


def example(**features: dict[str, Any]) -> Schema:
    return schema_from_dict({"name": "t", "kind": "example", "features": features})


def py(dtype: str, nested: Any) -> Any:
    """Nested lists with leaves as `RaggedTensor.to_list()` gives them for `dtype`."""
    if isinstance(nested, (list, tuple)):
        return [py(dtype, x) for x in nested]
    if dtype == "bytes":
        return nested.encode() if isinstance(nested, str) else nested
    return np.dtype(dtype).type(nested).item()


def assert_dense(value: Any, expected: Any, dtype: str) -> None:
    assert isinstance(value, tf.Tensor), type(value)
    want = np.asarray(py(dtype, expected) if dtype == "bytes" else expected,
                      object if dtype == "bytes" else dtype)
    assert value.dtype == (tf.string if dtype == "bytes" else tf.as_dtype(dtype))
    got = value.numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want, strict=dtype != "bytes")


def assert_ragged(value: Any, expected: Any, dtype: str, inner: tuple[Any, ...] = ()) -> None:
    """A RaggedTensor [batch, None, *inner] (None for a ragged inner dim) equal to `expected`."""
    assert isinstance(value, tf.RaggedTensor), type(value)
    assert value.dtype == (tf.string if dtype == "bytes" else tf.as_dtype(dtype))
    assert value.shape.as_list() == [len(expected), None, *inner]
    assert value.to_list() == py(dtype, expected)


# ---- values: scalars, fixed vectors and matrices -------------------------------------------------
I64 = np.iinfo(np.int64)
I32 = np.iinfo(np.int32)
DENSE_CASES = [
    # id, feature spec, input column, expected decoded batch
    ("int64_scalar", {"dtype": "int64", "shape": []}, [0, -1, I64.max, I64.min],
     [0, -1, I64.max, I64.min]),
    ("int32_scalar", {"dtype": "int32", "shape": []}, [I32.max, I32.min, 0, 5],
     [I32.max, I32.min, 0, 5]),
    ("uint8_scalar", {"dtype": "uint8", "shape": []}, [0, 255, 17], [0, 255, 17]),
    ("int8_scalar", {"dtype": "int8", "shape": []}, [-128, 127, 0], [-128, 127, 0]),
    ("bool_scalar", {"dtype": "bool", "shape": []}, [True, False, True], [True, False, True]),
    ("float32_scalar", {"dtype": "float32", "shape": [], "allow_nan": True},
     [0.1, -1e30, 3.4e38, -0.0, float("inf"), float("nan"), 1e-45],
     np.array([0.1, -1e30, 3.4e38, -0.0, np.inf, np.nan, 1e-45], np.float32)),
    ("float16_scalar", {"dtype": "float16", "shape": []}, [0.5, -2.0, 65504.0, 1 / 3, 6e-8],
     np.array([0.5, -2.0, 65504.0, 1 / 3, 6e-8], np.float16)),
    ("bytes_scalar", {"dtype": "bytes", "shape": []}, [b"", b"abc", "h\u00e9llo", b"\x00\xff"],
     [b"", b"abc", "h\u00e9llo".encode(), b"\x00\xff"]),
    ("float32_vector4_numpy", {"dtype": "float32", "shape": [4]},
     np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
     np.arange(12, dtype=np.float32).reshape(3, 4) / 7),
    ("int64_vector4_lists", {"dtype": "int64", "shape": [4]},
     [[1, 2, 3, 4], [-5, 6, -7, 8]], [[1, 2, 3, 4], [-5, 6, -7, 8]]),
    ("bytes_vector2", {"dtype": "bytes", "shape": [2]}, [["a", "b"], ["", "cd"]],
     [[b"a", b"b"], [b"", b"cd"]]),
    ("int32_matrix2x3_numpy", {"dtype": "int32", "shape": [2, 3]},
     np.arange(-6, 12, dtype=np.int32).reshape(3, 2, 3),
     np.arange(-6, 12, dtype=np.int32).reshape(3, 2, 3)),
    ("float32_matrix2x3_nested_lists", {"dtype": "float32", "shape": [2, 3]},
     [[[1, 2, 3], [4, 5, 6]], [[0.5, 0, -1], [2, 2, 2]]],
     np.array([[[1, 2, 3], [4, 5, 6]], [[0.5, 0, -1], [2, 2, 2]]], np.float32)),
    ("uint8_matrix2x3_flat_lists", {"dtype": "uint8", "shape": [2, 3]},
     [[1, 2, 3, 4, 5, 255]], [[[1, 2, 3], [4, 5, 255]]]),
]


@pytest.mark.parametrize("spec,column,expected", [c[1:] for c in DENSE_CASES],
                         ids=[c[0] for c in DENSE_CASES])
def test_dense_values(tmp_path, spec, column, expected):
    schema = example(x=spec)
    out = roundtrip(tmp_path, schema, {"x": column}, len(column))
    assert_dense(out["x"], expected, spec["dtype"])


# ---- values: ragged and sparse -------------------------------------------------------------------
RAGGED_CASES = [
    ("int64_ragged", {"dtype": "int64", "shape": [-1], "required": False},
     [[1, 2, 3], [], [I64.min], None], [[1, 2, 3], [], [I64.min], []], ()),
    ("uint8_ragged", {"dtype": "uint8", "shape": [-1]}, [[0, 255], [7]], [[0, 255], [7]], ()),
    ("float16_ragged", {"dtype": "float16", "shape": [-1]}, [[0.5], [1.5, -2.0]],
     [[0.5], [1.5, -2.0]], ()),
    ("bytes_ragged", {"dtype": "bytes", "shape": [-1]}, [["a"], ["b", "", "c"]],
     [["a"], ["b", "", "c"]], ()),
    ("float32_ragged_by3_flat", {"dtype": "float32", "shape": [-1, 3], "required": False},
     [[1, 2, 3, 4, 5, 6], [], [7, 8, 0.1]],
     [[[1, 2, 3], [4, 5, 6]], [], [[7, 8, 0.1]]], (3,)),
    ("int32_ragged_by3_nested", {"dtype": "int32", "shape": [-1, 3]},
     [[[1, 2, 3]], [[4, 5, 6], [-7, 8, 9]]], [[[1, 2, 3]], [[4, 5, 6], [-7, 8, 9]]], (3,)),
]


@pytest.mark.parametrize("spec,column,expected,inner", [c[1:] for c in RAGGED_CASES],
                         ids=[c[0] for c in RAGGED_CASES])
def test_ragged_values(tmp_path, spec, column, expected, inner):
    schema = example(x=spec)
    out = roundtrip(tmp_path, schema, {"x": column}, len(column))
    assert_ragged(out["x"], expected, spec["dtype"], inner)


@pytest.mark.parametrize("dtype,column", [
    ("int64", [[3, 1, 2], [], [-9]]),
    ("bytes", [["x", "yy"], [], ["z"]]),
    ("float32", [[0.25], [], [1.5, -3.0]]),
], ids=["int64", "bytes", "float32"])
def test_sparse_varlen(tmp_path, dtype, column):
    schema = example(x={"dtype": dtype, "shape": [-1], "representation": "sparse",
                        "required": False})
    out = roundtrip(tmp_path, schema, {"x": column}, len(column))
    sp = out["x"]
    assert isinstance(sp, tf.SparseTensor)
    assert sp.dtype == (tf.string if dtype == "bytes" else tf.as_dtype(dtype))
    longest = max(len(r) for r in column)
    assert sp.dense_shape.numpy().tolist() == [len(column), longest]
    want_idx = [[r, j] for r, row in enumerate(column) for j in range(len(row))]
    assert sp.indices.numpy().tolist() == want_idx
    assert sp.values.numpy().tolist() == py(dtype, [v for row in column for v in row])


# ---- raw tensor bytes ----------------------------------------------------------------------------
RAW_CASES = [
    ("uint8", [2, 3], np.arange(18, dtype=np.uint8).reshape(3, 2, 3) * 14),
    ("int16", [3], np.array([[-32768, 0, 32767], [1, -1, 2]], np.int16)),
    ("float32", [2, 2], np.array([[[0.1, np.nan], [np.inf, -0.0]]], np.float32)),
    ("float64", [2], np.array([[0.1, 1e300], [-5e-324, np.pi]], np.float64)),
    ("bool", [3], np.array([[True, False, True], [False, False, True]])),
    ("int64", [2], np.array([[I64.min, I64.max]], np.int64)),
]


@pytest.mark.parametrize("dtype,shape,block", [c for c in RAW_CASES],
                         ids=[c[0] for c in RAW_CASES])
def test_raw_tensors(tmp_path, dtype, shape, block):
    spec = {"dtype": dtype, "shape": shape, "encoding": "raw"}
    if dtype.startswith("float"):
        spec["allow_nan"] = True  # the float32 case carries NaN and Inf
    out = roundtrip(tmp_path, example(x=spec), {"x": block}, len(block))
    assert_dense(out["x"], block, dtype)


def test_raw_from_encoded_blobs(tmp_path):
    """Sources that already hold tensor bytes (e.g. IDX rows) pass them through unchanged."""
    block = np.array([[1, -2, 3], [2**31 - 1, 0, -(2**31)]], np.int32)
    blobs = [row.astype("<i4").tobytes() for row in block]
    schema = example(x={"dtype": "int32", "shape": [3], "encoding": "raw"})
    out = roundtrip(tmp_path, schema, {"x": blobs}, 2)
    assert_dense(out["x"], block, "int32")


# ---- images --------------------------------------------------------------------------------------
PNG_CASES = [
    ("uint8_rgb", "uint8", [4, 5, 3]),
    ("uint8_grey", "uint8", [6, 2, 1]),
    ("uint8_rgba", "uint8", [3, 3, 4]),
    ("uint16_grey", "uint16", [4, 5, 1]),
    ("uint16_rgb", "uint16", [2, 3, 3]),
    ("uint16_rgba", "uint16", [5, 2, 4]),
]


@pytest.mark.parametrize("dtype,shape", [c[1:] for c in PNG_CASES], ids=[c[0] for c in PNG_CASES])
def test_png_lossless(tmp_path, dtype, shape):
    info = np.iinfo(dtype)
    pixels = RNG.integers(0, int(info.max) + 1, size=(3, *shape), dtype=dtype)
    pixels[0] = 0
    pixels[1, 0, 0] = info.max
    schema = example(img={"dtype": dtype, "shape": shape, "encoding": "png"})
    out = roundtrip(tmp_path, schema, {"img": pixels}, 3)
    assert_dense(out["img"], pixels, dtype)


def test_png_from_encoded_files(tmp_path):
    """Image-folder sources hand over PNG file bytes; they decode to the same pixels."""
    from PIL import Image

    pixels = RNG.integers(0, 256, size=(2, 5, 4, 3), dtype=np.uint8)
    files = []
    for p in pixels:
        buf = io.BytesIO()
        Image.fromarray(p).save(buf, format="PNG")
        files.append(buf.getvalue())
    schema = example(img={"dtype": "uint8", "shape": [5, 4, 3], "encoding": "png"})
    out = roundtrip(tmp_path, schema, {"img": files}, 2)
    assert_dense(out["img"], pixels, "uint8")


def test_jpeg_constant_grey_is_exact(tmp_path):
    # JPEG is lossy, but a constant 8x8 grey block has only a DC coefficient, 8*(v-128),
    # which the quality-95 DC quantiser (step 2) keeps exactly; with one channel there is
    # no colour conversion, so these images decode bit-exactly.
    values = [0, 1, 77, 128, 200, 255]
    pixels = np.stack([np.full((16, 8, 1), v, np.uint8) for v in values])
    schema = example(img={"dtype": "uint8", "shape": [16, 8, 1], "encoding": "jpeg"})
    out = roundtrip(tmp_path, schema, {"img": pixels}, len(values))
    assert_dense(out["img"], pixels, "uint8")


def test_jpeg_rgb_within_one_level(tmp_path):
    # Three channels go through RGB -> YCbCr -> RGB, which rounds: constant colours come back
    # within one level. A smooth gradient is really lossy (chroma subsampling, quantisation):
    # checked by its PSNR.
    flat = np.stack([np.broadcast_to(np.array(c, np.uint8), (8, 16, 3))
                     for c in [(0, 0, 0), (255, 255, 255), (200, 30, 90), (1, 128, 254)]])
    schema = example(img={"dtype": "uint8", "shape": [8, 16, 3], "encoding": "jpeg"})
    out = roundtrip(tmp_path, schema, {"img": flat}, 4)
    got = out["img"].numpy()
    assert out["img"].dtype == tf.uint8 and got.shape == flat.shape
    assert np.abs(got.astype(int) - flat.astype(int)).max() <= 1

    ramp = np.linspace(0, 255, 16 * 16, dtype=np.float64).reshape(16, 16)
    smooth = np.stack([ramp, ramp.T, 255 - ramp], axis=-1).astype(np.uint8)[None]
    schema = example(img={"dtype": "uint8", "shape": [16, 16, 3], "encoding": "jpeg"})
    (tmp_path / "smooth").mkdir()
    got = roundtrip(tmp_path / "smooth", schema, {"img": smooth}, 1)["img"].numpy()
    mse = np.mean((got.astype(np.float64) - smooth) ** 2)
    assert 10 * np.log10(255**2 / mse) > 30  # PSNR in dB; quality 95 gives ~35 here


# ---- packing, vocabularies, defaults -------------------------------------------------------------
def test_packed_columns(tmp_path):
    schema = example(
        features={"dtype": "float32", "shape": [3], "source": ["a", "b", "c"]},
        ids={"dtype": "int16", "shape": [2], "source": ["x", "y"]},
    )
    cols = {"a": [1.5, 2.0], "b": np.array([0.1, -3.0]), "c": ["4", " 5.25 "],
            "x": [1, -2], "y": np.array([300, 32767], np.int64)}
    out = roundtrip(tmp_path, schema, cols, 2)
    assert_dense(out["features"], np.array([[1.5, 0.1, 4], [2.0, -3.0, 5.25]], np.float32),
                 "float32")
    assert_dense(out["ids"], [[1, 300], [-2, 32767]], "int16")


def test_vocabulary_labels(tmp_path):
    schema = example(
        label={"dtype": "int64", "shape": [], "vocabulary": ["cat", "dog", "bird"]},
        tags={"dtype": "int32", "shape": [-1], "vocabulary": {"a": 1, "b": 0}, "required": False},
        small={"dtype": "uint8", "shape": [], "vocabulary": ["x", "y"], "oov_id": 2},
    )
    cols = {"label": ["dog", "cat", "bird", "dog"], "tags": [["a", "b"], [], ["b"], ["a"]],
            "small": ["y", "unknown", "x", "z"]}
    out = roundtrip(tmp_path, schema, cols, 4)
    assert_dense(out["label"], [1, 0, 2, 1], "int64")
    assert_ragged(out["tags"], [[1, 0], [], [0], [1]], "int32")
    assert_dense(out["small"], [1, 2, 0, 2], "uint8")


DEFAULTS = {
    "count": {"dtype": "int64", "shape": [], "default": 7},
    "weights": {"dtype": "float32", "shape": [3], "default": 1.5},
    "code": {"dtype": "bytes", "shape": [2], "default": "zz"},
    "flag": {"dtype": "bool", "shape": [], "default": True},
    "kind": {"dtype": "int64", "shape": [], "vocabulary": ["x", "y"], "default": "y"},
}


def test_defaults_for_none_values(tmp_path):
    schema = example(key={"dtype": "int64", "shape": []}, **DEFAULTS)
    cols = {"key": [0, 1, 2], "count": [None, 3, None], "weights": [None, [1, 2, 3], None],
            "code": [["a", "b"], None, None], "flag": [None, False, None],
            "kind": ["x", None, "y"]}
    out = roundtrip(tmp_path, schema, cols, 3)
    assert_dense(out["count"], [7, 3, 7], "int64")
    assert_dense(out["weights"], [[1.5] * 3, [1, 2, 3], [1.5] * 3], "float32")
    assert_dense(out["code"], [[b"a", b"b"], [b"zz"] * 2, [b"zz"] * 2], "bytes")
    assert_dense(out["flag"], [True, False, True], "bool")
    assert_dense(out["kind"], [0, 1, 1], "int64")


def test_defaults_for_missing_columns(tmp_path):
    schema = example(key={"dtype": "int64", "shape": []}, **DEFAULTS)
    out = roundtrip(tmp_path, schema, {"key": [5, 6]}, 2)
    assert_dense(out["key"], [5, 6], "int64")
    assert_dense(out["count"], [7, 7], "int64")
    assert_dense(out["weights"], [[1.5] * 3] * 2, "float32")
    assert_dense(out["code"], [[b"zz"] * 2] * 2, "bytes")
    assert_dense(out["flag"], [True, True], "bool")
    assert_dense(out["kind"], [1, 1], "int64")


# ---- compression and batching --------------------------------------------------------------------
MIXED = {
    "id": {"dtype": "int64", "shape": []},
    "x": {"dtype": "float32", "shape": [2]},
    "r": {"dtype": "int32", "shape": [-1], "required": False},
    "img": {"dtype": "uint8", "shape": [2, 2, 1], "encoding": "raw"},
    "s": {"dtype": "bytes", "shape": []},
}


def mixed_columns(n: int) -> dict[str, Any]:
    return {
        "id": np.arange(n), "x": np.arange(2 * n, dtype=np.float32).reshape(n, 2) / 3,
        "r": [list(range(i % 4)) for i in range(n)],
        "img": (np.arange(4 * n) % 251).astype(np.uint8).reshape(n, 2, 2, 1),
        "s": [f"rec{i}" for i in range(n)],
    }


def test_compressed_files(tmp_path, compression):
    schema = example(**MIXED)
    cols = mixed_columns(50)
    out = roundtrip(tmp_path, schema, cols, 50, compression=compression)
    assert_dense(out["id"], cols["id"], "int64")
    assert_dense(out["x"], cols["x"], "float32")
    assert_ragged(out["r"], cols["r"], "int32")
    assert_dense(out["img"], cols["img"], "uint8")
    assert_dense(out["s"], cols["s"], "bytes")


def test_batches_across_files_keep_order(tmp_path):
    """Shuffle off: file order, then record order; small batches and load_records agree."""
    schema = example(**MIXED)
    cols = mixed_columns(23)
    records = encode(schema, cols, 23)
    write_records(tmp_path / "a-00000-of-00002.tfrecord", records[:10])
    write_records(tmp_path / "a-00001-of-00002.tfrecord.gz", records[10:], "gzip")
    pattern = str(tmp_path / "a-*")
    ds = make_dataset(pattern, schema=schema, shuffle_buffer=0, batch_size=4)
    sizes = [int(b["id"].shape[0]) for b in ds]
    assert sizes == [4, 4, 4, 4, 4, 3]
    ds = make_dataset(pattern, schema=schema, shuffle_buffer=0, batch_size=4, drop_remainder=True)
    assert [b["id"].shape.as_list() for b in ds] == [[4]] * 5
    got = load_records([str(tmp_path / "a-00000-of-00002.tfrecord"),
                        str(tmp_path / "a-00001-of-00002.tfrecord.gz")], schema=schema)
    np.testing.assert_array_equal(got["id"], cols["id"], strict=False)
    assert got["r"] == cols["r"]
    np.testing.assert_array_equal(got["img"], cols["img"], strict=True)


# ---- SequenceExample -----------------------------------------------------------------------------
SEQ = {
    "name": "seq",
    "kind": "sequence_example",
    "context": {
        "id": {"dtype": "int64", "shape": []},
        "title": {"dtype": "bytes", "shape": []},
        "emb": {"dtype": "float32", "shape": [2]},
        "tags": {"dtype": "int64", "shape": [-1], "required": False},
    },
    "sequence": {
        "tok": {"dtype": "int32", "shape": []},
        "word": {"dtype": "bytes", "shape": []},
        "vec": {"dtype": "float32", "shape": [3]},
        "rag": {"dtype": "uint8", "shape": [-1]},
        "patch": {"dtype": "uint8", "shape": [2, 2], "encoding": "raw"},
        "delta": {"dtype": "float64", "shape": [], "encoding": "raw"},
    },
}
STEPS = [3, 0, 1, 5]


def seq_columns() -> dict[str, Any]:
    cols: dict[str, list[Any]] = {k: [] for k in ["id", "title", "emb", "tags", "tok", "word",
                                                   "vec", "rag", "patch", "delta"]}
    for i, s in enumerate(STEPS):
        cols["id"].append(100 + i)
        cols["title"].append(f"t{i}")
        cols["emb"].append([i / 4, -i])
        cols["tags"].append(list(range(i)))
        cols["tok"].append([i * 10 + j for j in range(s)])
        cols["word"].append([f"w{i}.{j}" for j in range(s)])
        cols["vec"].append([[j, j + 0.5, -j] for j in range(s)])
        cols["rag"].append([list(range(j % 3)) for j in range(s)])
        cols["patch"].append([[[j, 255 - j], [i, 7]] for j in range(s)])
        cols["delta"].append([[j / 3] for j in range(s)])
    return cols


def check_sequence(out: dict[str, Any], cols: dict[str, Any], rows: list[int]) -> None:
    def pick(name: str) -> list[Any]:
        return [cols[name][r] for r in rows]

    assert_dense(out["id"], pick("id"), "int64")
    assert_dense(out["title"], pick("title"), "bytes")
    assert_dense(out["emb"], np.array(pick("emb"), np.float32), "float32")
    assert_ragged(out["tags"], pick("tags"), "int64")
    assert_ragged(out["tok"], pick("tok"), "int32")
    assert_ragged(out["word"], pick("word"), "bytes")
    assert_ragged(out["vec"], pick("vec"), "float32", (3,))
    assert_ragged(out["rag"], pick("rag"), "uint8", (None,))
    assert_ragged(out["patch"], pick("patch"), "uint8", (2, 2))
    # float64 per step through raw bytes: exact, not rounded to float32
    assert_ragged(out["delta"], [[j / 3 for j in range(STEPS[r])] for r in rows], "float64")


def test_sequence_example(tmp_path):
    schema = schema_from_dict(SEQ)
    cols = seq_columns()
    out = roundtrip(tmp_path, schema, cols, len(STEPS))
    check_sequence(out, cols, list(range(len(STEPS))))


def test_sequence_example_one_record_batches(tmp_path):
    """Batches of one, including a record with zero steps (no padding to borrow a shape from)."""
    schema = schema_from_dict(SEQ)
    cols = seq_columns()
    write_records(tmp_path / "s.tfrecord.zz", encode(schema, cols, len(STEPS)), "zlib")
    ds = make_dataset(str(tmp_path / "s.tfrecord.zz"), schema=schema, shuffle_buffer=0,
                      batch_size=1)
    for row, batch in enumerate(ds):
        check_sequence(batch, cols, [row])


def test_sequence_example_without_context(tmp_path):
    schema = schema_from_dict({"kind": "sequence_example", "sequence": {
        "tok": {"dtype": "int64", "shape": []}, "vec": {"dtype": "float16", "shape": [2]}}})
    cols = {"tok": [[1, 2], [], [3]], "vec": [[[0.5, 1], [2, 3]], [], [[-1, 0]]]}
    out = roundtrip(tmp_path, schema, cols, 3)
    assert_ragged(out["tok"], cols["tok"], "int64")
    assert_ragged(out["vec"], cols["vec"], "float16", (2,))
