"""The encoder validates what it writes: each bad row becomes exactly one BadRecord with a
reason code, its position (1-based line for text sources, record index and byte offset for
binary ones) and the feature; every other row of the batch is written unchanged.

Covers issue 9 point 5: int64 overflow in CSV text, uint8 > 255, float32 overflow, NaN/Inf
unless `allow_nan: true`, oversized records, and PNG/JPEG headers checked against the shape.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from etl.base.units import DEFAULT_MAX_RECORD_BYTES
from etl.contract.codec import EncodedBatch, Encoder
from etl.contract.schema import Schema, schema_from_dict

I64_MAX = 2**63 - 1


def example(**features: dict[str, Any]) -> Schema:
    return schema_from_dict({"name": "t", "kind": "example", "features": features})


def bad_of(out: EncodedBatch) -> list[tuple[Any, ...]]:
    return [(b.code, b.line, b.record, b.byte, b.feature) for b in out.bad]


def csv_column(cells: list[str]) -> pa.Array:
    """A column as the CSV reader's careful path hands it over: text cells."""
    return pa.array(cells, pa.large_string())


def assert_good_rows_unchanged(schema: Schema, columns: dict[str, Any], out: EncodedBatch) -> None:
    """The rows that passed encode to the same bytes as when encoded without the bad ones."""
    alone = Encoder(schema).encode({k: [v[i] for i in out.rows.tolist()] if isinstance(v, list)
                                    else v.take(pa.array(out.rows)) for k, v in columns.items()})
    assert alone.bad == [] and alone.records == out.records


# ---- ranges ------------------------------------------------------------------------------------
def test_int64_overflow_in_csv_text_is_one_out_of_range_row():
    schema = example(n={"dtype": "int64", "shape": []}, s={"dtype": "bytes", "shape": []})
    cells = ["1", "-5", str(I64_MAX), "9223372036854775808", str(-(2**63)), "12"]
    columns = {"n": csv_column(cells), "s": csv_column(list("abcdef"))}
    lines = np.array([2, 3, 4, 5, 7, 8])  # line 6: a quoted newline in the row before
    out = Encoder(schema).encode(columns, source="big.csv", positions=np.arange(6), lines=lines)
    assert bad_of(out) == [("out_of_range", 5, None, None, "n")]
    assert out.bad[0].reason == ("value 9223372036854775808 out of range for int64 "
                                 "[-9223372036854775808, 9223372036854775807]")
    assert out.bad[0].message().startswith("big.csv:5: feature 'n': value 9223372036854775808")
    assert out.rows.tolist() == [0, 1, 2, 4, 5]
    assert_good_rows_unchanged(schema, columns, out)


def test_unparsable_and_overflowing_cells_in_one_batch():
    schema = example(n={"dtype": "int64", "shape": []})
    cells = ["7", "abc", "1" * 30, "1_000", "", " 8 "]
    out = Encoder(schema).encode({"n": csv_column(cells)}, source="f.csv",
                                 lines=np.arange(2, 8))
    assert bad_of(out) == [("unparsable_number", 3, None, None, "n"),
                           ("out_of_range", 4, None, None, "n"),
                           ("unparsable_number", 5, None, None, "n"),
                           ("missing_required", 6, None, None, "n")]
    assert out.rows.tolist() == [0, 5]


def test_python_int_beyond_int64_from_json():
    schema = example(n={"dtype": "int64", "shape": []})
    out = Encoder(schema).encode({"n": [1, 2**70, 3]}, source="j.jsonl", lines=np.array([1, 2, 3]))
    assert bad_of(out) == [("out_of_range", 2, None, None, "n")]
    assert str(2**70) in out.bad[0].reason


@pytest.mark.parametrize("column", [csv_column(["1", "255", "256", "0"]),
                                    np.array([1, 255, 256, 0], np.int64),
                                    pa.array([1, 255, 256, 0], pa.int64()),
                                    np.array([1.0, 255.0, 256.0, 0.0])],
                         ids=["text", "numpy_int64", "arrow_int64", "numpy_float"])
def test_uint8_256_is_out_of_range(column):
    schema = example(u={"dtype": "uint8", "shape": []})
    out = Encoder(schema).encode({"u": column}, source="u.bin", positions=np.array([10, 11, 12, 13]),
                                 offsets=np.array([0, 100, 200, 300]))
    assert bad_of(out) == [("out_of_range", None, 12, 200, "u")]
    found = "256.0" if isinstance(column, np.ndarray) and column.dtype.kind == "f" else "256"
    assert out.bad[0].message() == (f"u.bin: record 12, byte 200: feature 'u': value {found} out "
                                    "of range for uint8 [0, 255] [out_of_range]")


def test_float_near_int64_max_is_out_of_range():
    # float(2**63 - 1) rounds up to 2**63, which no int64 holds
    schema = example(n={"dtype": "int64", "shape": []})
    out = Encoder(schema).encode({"n": np.array([1.0, 2.0**63, -(2.0**63)])})
    assert bad_of(out) == [("out_of_range", None, 1, None, "n")]


# text is quoted as written; numbers as Python prints them
@pytest.mark.parametrize("column,said", [(csv_column(["1.5", "1e39", "-2"]), "1e39"),
                                         (np.array([1.5, 1e39, -2.0]), "1e+39"),
                                         (pa.array([1.5, 1e39, -2.0]), "1e+39")],
                         ids=["text", "numpy_float64", "arrow_float64"])
def test_float32_overflow_is_out_of_range(column, said):
    schema = example(x={"dtype": "float32", "shape": []})
    out = Encoder(schema).encode({"x": column}, lines=np.array([2, 3, 4]))
    assert bad_of(out) == [("out_of_range", 3, None, None, "x")]
    assert out.bad[0].reason == f"value {said} overflows float32"


def test_float_text_beyond_float64_is_out_of_range_even_with_allow_nan():
    schema = example(x={"dtype": "float32", "shape": [], "allow_nan": True})
    out = Encoder(schema).encode({"x": csv_column(["1e400", "inf", "nan"])}, lines=np.array([2, 3, 4]))
    assert bad_of(out) == [("out_of_range", 2, None, None, "x")]
    assert out.rows.tolist() == [1, 2]


# ---- NaN and Inf ---------------------------------------------------------------------------------
NAN_COLUMNS = {
    "text": ({"dtype": "float32", "shape": []}, csv_column(["1", "nan", "2", "-inf"])),
    "numpy": ({"dtype": "float32", "shape": []}, np.array([1, np.nan, 2, -np.inf], np.float32)),
    "arrow": ({"dtype": "float16", "shape": []}, pa.array([1, None, 2, None], pa.float64()).fill_null(
        float("nan")).to_numpy()),
    "vector": ({"dtype": "float32", "shape": [2]}, [[1, 1], [1, np.nan], [2, 2], [np.inf, 0]]),
    "ragged": ({"dtype": "float32", "shape": [-1]}, [[1], [np.nan], [], [1, -np.inf]]),
    "raw_numbers": ({"dtype": "float64", "shape": [2], "encoding": "raw"},
                    np.array([[1, 1], [np.nan, 0], [2, 2], [0, np.inf]])),
    "raw_blobs": ({"dtype": "float32", "shape": [2], "encoding": "raw"},
                  [np.array(r, "<f4").tobytes() for r in ([1, 1], [0, np.nan], [2, 2], [np.inf, 0])]),
}


@pytest.mark.parametrize("spec,column", list(NAN_COLUMNS.values()), ids=list(NAN_COLUMNS))
def test_nan_and_inf_rejected_unless_allow_nan(spec, column):
    out = Encoder(example(x=spec)).encode({"x": column}, source="f", lines=np.array([2, 3, 4, 5]))
    assert bad_of(out) == [("nan_not_allowed", 3, None, None, "x"),
                           ("nan_not_allowed", 5, None, None, "x")]
    assert out.rows.tolist() == [0, 2]
    allowed = Encoder(example(x={**spec, "allow_nan": True})).encode({"x": column})
    assert allowed.bad == [] and allowed.rows.tolist() == [0, 1, 2, 3]


def test_nan_in_a_sequence_feature_and_in_a_packed_column():
    schema = schema_from_dict({"name": "s", "kind": "sequence_example",
                               "context": {"p": {"dtype": "float32", "shape": [2],
                                                 "source": ["a", "b"]}},
                               "sequence": {"v": {"dtype": "float32", "shape": []}}})
    out = Encoder(schema).encode({"a": [1.0, 2.0, float("nan")], "b": [0.0, 0.0, 0.0],
                                  "v": [[1.0, 2.0], [3.0, float("nan")], [4.0]]},
                                 lines=np.array([1, 2, 3]))
    assert bad_of(out) == [("nan_not_allowed", 2, None, None, "v"),
                           ("nan_not_allowed", 3, None, None, "p")]
    assert out.bad[1].reason.startswith("column 'a': value nan is not finite")


# ---- one reason per row, positions ---------------------------------------------------------------
def test_each_rejected_row_once_with_its_first_reason():
    schema = example(a={"dtype": "int8", "shape": []}, b={"dtype": "float32", "shape": []})
    out = Encoder(schema).encode({"a": [1, 500, 2], "b": [float("nan"), float("nan"), 0.0]},
                                 lines=np.array([4, 5, 6]))
    assert bad_of(out) == [("nan_not_allowed", 4, None, None, "b"),
                           ("out_of_range", 5, None, None, "a")]
    assert out.rows.tolist() == [2]


def test_scalar_for_list_is_one_wrong_type_row():
    """JSON Lines `"tokens": "oops"` among lists rejects that line only."""
    schema = example(tokens={"dtype": "int64", "shape": [-1]}, id={"dtype": "int64", "shape": []})
    columns = {"tokens": [[1, 2], [3], "oops", [], [4, 5, 6]], "id": [1, 2, 3, 4, 5]}
    out = Encoder(schema).encode(columns, source="s.jsonl", lines=np.array([1, 2, 3, 4, 5]))
    assert bad_of(out) == [("wrong_type", 3, None, None, "tokens")]
    assert out.bad[0].reason == "expected a list of values for shape [-1], found 'oops'"
    assert_good_rows_unchanged(schema, columns, out)


def test_list_for_scalar_is_wrong_type():
    schema = example(id={"dtype": "int64", "shape": []})
    out = Encoder(schema).encode({"id": [1, [2, 3], 4]}, lines=np.array([1, 2, 3]))
    assert bad_of(out) == [("wrong_type", 2, None, None, "id")]


def test_positions_without_lines_give_record_and_byte():
    schema = example(u={"dtype": "uint8", "shape": []})
    out = Encoder(schema).encode({"u": [1, 300]}, source="x.tfrecord",
                                 positions=np.array([7, 8]), offsets=np.array([0, 40]))
    assert bad_of(out) == [("out_of_range", None, 8, 40, "u")]
    no_offsets = Encoder(schema).encode({"u": [1, 300]}, source="x.npy", positions=np.array([7, 8]))
    assert bad_of(no_offsets) == [("out_of_range", None, 8, None, "u")]
    assert no_offsets.bad[0].where() == "x.npy: record 8"


# ---- oversized records ---------------------------------------------------------------------------
def test_oversized_record_rejected_before_it_is_returned():
    schema = example(blob={"dtype": "bytes", "shape": []}, id={"dtype": "int64", "shape": []})
    columns = {"blob": [b"a" * 10, b"b" * 500, b"c" * 90, b"d" * 60], "id": [1, 2, 3, 4]}
    sizes = [len(r) for r in Encoder(schema).encode(columns).records]
    limit = 200
    assert [s > limit for s in sizes] == [False, True, False, False]
    out = Encoder(schema, max_record_bytes=limit).encode(
        columns, source="big.bin", positions=np.array([0, 1, 2, 3]),
        offsets=np.array([0, 20, 540, 650]))
    assert bad_of(out) == [("oversized_record", None, 1, 20, "")]
    assert out.bad[0].reason == f"serialized record is {sizes[1]} bytes, over max_record_bytes {limit}"
    assert out.rows.tolist() == [0, 2, 3] and len(out.array) == 3
    assert out.records == [r for i, r in enumerate(Encoder(schema).encode(columns).records) if i != 1]
    assert Encoder(schema).max_record_bytes == DEFAULT_MAX_RECORD_BYTES == 64 * 2**20


def test_oversized_and_invalid_rows_are_each_reported_once():
    schema = example(blob={"dtype": "bytes", "shape": []}, n={"dtype": "int8", "shape": []})
    out = Encoder(schema, max_record_bytes=64).encode(
        {"blob": [b"x" * 100, b"y" * 100, b"z"], "n": [1, 999, 2]}, lines=np.array([1, 2, 3]))
    assert bad_of(out) == [("oversized_record", 1, None, None, ""),
                           ("out_of_range", 2, None, None, "n")]
    assert out.rows.tolist() == [2]


# ---- images ----------------------------------------------------------------------------------------
def png(h: int, w: int, mode: str = "RGB", **kw: Any) -> bytes:
    buf = io.BytesIO()
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    pixels = (np.arange(h * w * channels) % 251).astype(np.uint8).reshape(h, w, channels)
    Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode).save(buf, "PNG", **kw)
    return buf.getvalue()


def jpeg(h: int, w: int, mode: str = "RGB", **kw: Any) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (w, h), 128 if mode == "L" else (10, 120, 200)).save(buf, "JPEG", **kw)
    return buf.getvalue()


def test_png_of_the_wrong_size_is_wrong_shape():
    schema = example(img={"dtype": "uint8", "shape": [16, 16, 3], "encoding": "png"})
    blobs = [png(16, 16), png(32, 32), png(16, 16, "L"), png(16, 8), png(16, 16, "RGBA")]
    out = Encoder(schema).encode({"img": blobs}, source="imgs", positions=np.arange(5) + 100)
    assert bad_of(out) == [("wrong_shape", None, 101, None, "img"),
                           ("wrong_shape", None, 103, None, "img")]
    assert out.bad[0].reason == ("PNG image is 32x32x3 (height x width x channels), shape "
                                 "[16, 16, 3] expects 16x16")
    assert out.bad[1].reason.startswith("PNG image is 16x8x3 ")
    # grey and RGBA PNGs of the right size pass: the decoder converts channels
    assert out.rows.tolist() == [0, 2, 4]


def test_broken_png_headers_are_bad_image():
    schema = example(img={"dtype": "uint16", "shape": [4, 4, 1], "encoding": "png"})
    good = png(4, 4, "L")
    no_ihdr = good[:12] + b"IHDX" + good[16:]
    bad_depth = bytearray(good)
    bad_depth[24] = 3  # bit depth 3 does not exist
    blobs = [good, good[:20], b"GIF89a" + b"\0" * 40, no_ihdr, bytes(bad_depth), b""]
    out = Encoder(schema).encode({"img": blobs}, lines=np.arange(1, 7))
    assert [(b.code, b.line, b.reason) for b in out.bad] == [
        ("bad_image", 2, "PNG header is truncated (20 bytes)"),
        ("bad_image", 3, "not a PNG image (no PNG signature)"),
        ("bad_image", 4, "PNG header is broken (no IHDR chunk first)"),
        ("bad_image", 5, "PNG header is broken (colour type 0, bit depth 3, 4x4)"),
        ("bad_image", 6, "not a PNG image (0 bytes)"),
    ]
    assert out.rows.tolist() == [0]


def test_jpeg_headers_are_read_through_app_segments():
    schema = example(img={"dtype": "uint8", "shape": [12, 20, 3], "encoding": "jpeg"})
    exif = Image.Exif()
    exif[0x010E] = "x" * 3000  # a long APP1 segment before the frame header
    plain = jpeg(12, 20)
    sof = plain.index(b"\xff\xc0")
    filled = plain[:sof] + b"\xff\xff" + plain[sof:]  # fill bytes before a marker are allowed
    blobs = [plain, jpeg(12, 20, progressive=True), jpeg(12, 20, exif=exif.tobytes()),
             jpeg(20, 12), jpeg(12, 20, "L"), jpeg(12, 21, progressive=True), filled]
    out = Encoder(schema).encode({"img": blobs}, lines=np.arange(1, 8))
    assert [(b.code, b.line, b.reason) for b in out.bad] == [
        ("wrong_shape", 4, "JPEG image is 20x12x3 (height x width x channels), shape [12, 20, 3] "
                           "expects 12x20"),
        ("wrong_shape", 6, "JPEG image is 12x21x3 (height x width x channels), shape [12, 20, 3] "
                           "expects 12x20"),
    ]
    assert out.rows.tolist() == [0, 1, 2, 4, 6]


def test_broken_jpeg_headers_are_bad_image():
    schema = example(img={"dtype": "uint8", "shape": [8, 8, 1], "encoding": "jpeg"})
    good = jpeg(8, 8, "L")
    sof = good.index(b"\xff\xc0")
    blobs = [good, good[: sof + 6], b"\xff\xd8\xff\xda\x00\x02", b"\x89PNG\r\n\x1a\n",
             good[:2] + b"\x00" + good[3:], good[:sof]]
    out = Encoder(schema).encode({"img": blobs}, lines=np.arange(1, 7))
    assert [(b.code, b.line, b.reason) for b in out.bad] == [
        ("bad_image", 2, "JPEG frame header is truncated"),
        ("bad_image", 3, "JPEG header is broken (image data before a frame header)"),
        ("bad_image", 4, "not a JPEG image (no SOI marker)"),
        ("bad_image", 5, "JPEG header is broken (no marker at byte 2)"),
        ("bad_image", 6, "JPEG header is truncated (no frame header)"),
    ]


def test_images_per_step_are_checked_too():
    schema = schema_from_dict({"name": "v", "kind": "sequence_example",
                               "sequence": {"frame": {"dtype": "uint8", "shape": [4, 6, 3],
                                                      "encoding": "png"}}})
    frames = [[png(4, 6), png(4, 6)], [png(4, 6), png(6, 4)], [png(4, 6)], [b"junk", png(4, 6)]]
    out = Encoder(schema).encode({"frame": frames}, lines=np.array([1, 2, 3, 4]))
    assert [(b.code, b.line) for b in out.bad] == [("wrong_shape", 2), ("bad_image", 4)]
    assert out.rows.tolist() == [0, 2]


def test_numpy_fraction_into_an_integer_is_out_of_range():
    # NumPy leaves carry no nulls: only the fractional value is bad, its record named
    schema = example(n={"dtype": "int32", "shape": [2]})
    out = Encoder(schema).encode({"n": np.array([[1.0, 2.0], [3.0, 4.5], [5.0, 6.0]])},
                                 source="n.npy", positions=np.array([0, 1, 2]))
    assert bad_of(out) == [("out_of_range", None, 1, None, "n")]
    assert out.bad[0].reason == "expected an integer for int32, found 4.5"
    assert out.rows.tolist() == [0, 2]
