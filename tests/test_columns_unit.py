"""Unit tests of etl/contract/columns.py, called directly on small Arrow/NumPy columns (no
pipeline, no subprocess): what each raw column becomes in storage, and which rows are refused
with which reason. Every other test reaches this module only end to end."""

from __future__ import annotations

import decimal
import io
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from etl.base.errors import ConfigError
from etl.contract.columns import Converted, as_arrow, compose, nest, rows_of, to_storage
from etl.contract.schema import Feature, schema_from_dict

D = decimal.Decimal
MISSING_REQUIRED = ("missing_required", "missing required value")


def feat(sequence: bool = False, **spec: Any) -> Feature:
    """The feature `x` as the schema loader builds it from `spec` (sources, defaults, ...)."""
    doc = ({"kind": "sequence_example", "sequence": {"x": spec}} if sequence
           else {"features": {"x": spec}})
    return schema_from_dict(doc).features[0]


def convert(feature: Feature, col: Any) -> tuple[list[Any], dict[int, tuple[str, str]],
                                                  list[bool], Converted]:
    out = to_storage(feature, {"x": col}, len(col))
    assert out.missing is not None
    return out.storage.to_pylist(), out.bad, out.missing.tolist(), out


# ---- numbers from text ---------------------------------------------------------------------
def test_integers_parsed_from_text_with_each_refusal_named() -> None:
    col = pa.array([" 7", "-3", "", None, "1.5", "1_000", "99999999999", "12,345"])
    values, bad, missing, out = convert(feat(dtype="int32"), col)
    # whitespace is trimmed; refused and missing rows hold a placeholder 0 (dropped later)
    assert values == [[7], [-3], [0], [0], [0], [0], [0], [0]]
    assert out.storage.type == pa.large_list(pa.int64())  # int32 is stored in an Int64List
    assert bad == {
        # empty text once trimmed and NULL are both a missing value, not a parse error
        2: MISSING_REQUIRED,
        3: MISSING_REQUIRED,
        4: ("unparsable_number", "cannot parse '1.5' as int32"),
        # Python's int() reads "1_000"; Arrow and every other reader do not
        5: ("unparsable_number", "cannot parse '1_000' as int32"),
        6: ("out_of_range", "value 99999999999 out of range for int32 [-2147483648, 2147483647]"),
        7: ("unparsable_number", "cannot parse '12,345' as int32 (looks like a thousands "
                                 "separator: remove the commas in the source, or declare "
                                 "dtype: bytes to keep the text)"),
    }
    assert missing == [False, False, True, True, False, False, False, False]


def test_text_beyond_int64_is_out_of_range_not_unparsable() -> None:
    values, bad, _, _ = convert(feat(dtype="int64", default=0),
                                pa.array(["9223372036854775808", "x"]))
    assert values == [[0], [0]]
    assert bad == {
        0: ("out_of_range", "value 9223372036854775808 out of range for int64 "
                            "[-9223372036854775808, 9223372036854775807]"),
        1: ("unparsable_number", "cannot parse 'x' as int64"),
    }


def test_float_text_overflow_and_nonfinite_without_allow_nan() -> None:
    values, bad, _, out = convert(feat(dtype="float32"),
                                  pa.array(["1.5", "1e400", "inf", "nan", "abc"]))
    assert out.storage.type == pa.large_list(pa.float32())
    assert values[0] == [1.5] and values[4] == [0.0]
    assert bad == {
        # "1e400" parses as inf: an overflow of the text, not an Inf the source meant
        1: ("out_of_range", "value 1e400 overflows float32"),
        2: ("nan_not_allowed", "value inf is not finite (the feature does not say "
                               "allow_nan: true)"),
        3: ("nan_not_allowed", "value nan is not finite (the feature does not say "
                               "allow_nan: true)"),
        4: ("unparsable_number", "cannot parse 'abc' as float32"),
    }


def test_allow_nan_keeps_inf_and_nan() -> None:
    values, bad, _, _ = convert(feat(dtype="float32", allow_nan=True),
                                pa.array(["inf", "nan", "2"]))
    assert bad == {}
    assert values[0] == [float("inf")] and np.isnan(values[1][0]) and values[2] == [2.0]


# ---- numbers from numbers ------------------------------------------------------------------
def test_float64_beyond_float32_overflows() -> None:
    values, bad, _, _ = convert(feat(dtype="float32"), pa.array([1e39, 2.0]))
    assert values[1] == [2.0]
    assert bad == {0: ("out_of_range", "value 1e+39 overflows float32")}


def test_floats_into_an_integer_must_be_whole() -> None:
    values, bad, _, _ = convert(feat(dtype="int32"), pa.array([1.0, 1.5, float("nan")]))
    assert values == [[1], [0], [0]]
    assert bad == {1: ("out_of_range", "expected an integer for int32, found 1.5"),
                   2: ("out_of_range", "expected an integer for int32, found nan")}


def test_numpy_values_range_checked_against_the_declared_dtype() -> None:
    values, bad, _, _ = convert(feat(dtype="uint8"), np.array([1, 300, -1]))
    assert values == [[1], [0], [0]]
    assert bad == {1: ("out_of_range", "value 300 out of range for uint8 [0, 255]"),
                   2: ("out_of_range", "value -1 out of range for uint8 [0, 255]")}


def test_a_block_past_the_lazy_mask_size_still_names_each_bad_value() -> None:
    """A NumPy block of more than heap.LAZY_ZEROS_BYTES values gets its bad mask from pages
    of its own (etl.base.heap.lazy_zeros): a bad value is still written to it and named."""
    rows, k = 2_048, 1_024  # 2M uint16 values, rows of 1,024
    block = np.arange(rows * k, dtype=np.uint32).reshape(rows, k) % 200
    block[1_500, 7] = 300
    block[2_047, 1_023] = 256
    out = to_storage(feat(dtype="uint8", shape=[k]), {"x": block.astype(np.uint16)}, rows)
    assert out.bad == {1_500: ("out_of_range", "value 300 out of range for uint8 [0, 255]"),
                       2_047: ("out_of_range", "value 256 out of range for uint8 [0, 255]")}
    stored = out.storage.values.to_numpy()
    assert len(stored) == rows * k
    assert np.array_equal(stored[:1_500 * k], (np.arange(1_500 * k) % 200).astype(np.uint8))


def test_numpy_block_rows_become_fixed_lists() -> None:
    values, bad, missing, _ = convert(feat(dtype="uint8", shape=[2]),
                                      np.array([[1, 2], [3, 4]], np.uint8))
    assert (values, bad, missing) == ([[1, 2], [3, 4]], {}, [False, False])


def test_booleans_are_stored_as_zero_and_one() -> None:
    values, bad, _, _ = convert(feat(dtype="int64"), pa.array([True, False]))
    assert (values, bad) == ([[1], [0]], {})


def test_a_date_column_into_a_number_feature_is_refused_whole() -> None:
    with pytest.raises(ConfigError) as e:
        convert(feat(dtype="int64"), pa.array([1], pa.date32()))
    assert str(e.value) == ("column 'x' is date32[day], not a number for dtype int64: declare "
                            "dtype: date (stored as int64 days since 1970-01-01)")


# ---- decimals: exact or refused ------------------------------------------------------------
def test_decimal_into_an_integer_only_when_whole() -> None:
    values, bad, missing, _ = convert(feat(dtype="int64"),
                                      pa.array([D("2.00"), D("2.50"), None], pa.decimal128(5, 2)))
    assert values == [[2], [0], [0]]
    assert bad == {1: ("out_of_range", "decimal 2.50 is not a whole number within int64 for "
                                       "int64 (declare dtype: bytes for the exact decimal text)"),
                   2: MISSING_REQUIRED}
    assert missing == [False, False, True]


def test_decimal_into_a_float_only_when_the_float_holds_it_exactly() -> None:
    values, bad, missing, _ = convert(feat(dtype="float32", default=0.0),
                                      pa.array([D("0.10"), D("1.50"), None], pa.decimal128(5, 2)))
    # 1.5 is a binary fraction; 0.1 is not (float32 0.1 is 0.100000001490116...)
    assert values[1:] == [[1.5], [0.0]]  # NULL: the default
    assert bad == {0: ("out_of_range", "decimal 0.10 has no exact float32 value (declare dtype: "
                                       "bytes for the exact decimal text, or int64 for whole "
                                       "numbers)")}
    assert missing == [False, False, True]


def test_decimal_into_a_raw_float64_is_its_exact_value_not_its_text() -> None:
    """A decimal column (Parquet, a database's numeric) into `float64, encoding: raw`: the
    value's 8 little-endian bytes when float64 holds it exactly, refused when not (it once
    stored the decimal's text as the blob and failed every record on its length)."""
    values, bad, _, _ = convert(feat(dtype="float64", shape=[], encoding="raw"),
                                pa.array([D("1.50"), D("0.10"), D("-2.25")], pa.decimal128(5, 2)))
    assert values[0] == [np.float64(1.5).tobytes()] and values[2] == [np.float64(-2.25).tobytes()]
    assert bad == {1: ("out_of_range", "decimal 0.10 has no exact float64 value (declare dtype: "
                                       "bytes for the exact decimal text, or int64 for whole "
                                       "numbers)")}


def test_decimal_into_bytes_keeps_the_exact_text() -> None:
    values, bad, _, _ = convert(feat(dtype="bytes"),
                                pa.array([D("0.10"), D("-1.50")], pa.decimal128(5, 2)))
    assert (values, bad) == ([[b"0.10"], [b"-1.50"]], {})


# ---- NULL -> missing -----------------------------------------------------------------------
def test_null_takes_the_default() -> None:
    values, bad, missing, _ = convert(feat(dtype="int64", default=5), pa.array([1, None, 3]))
    assert (values, bad, missing) == ([[1], [5], [3]], {}, [False, True, False])


def test_null_in_an_optional_variable_length_feature_is_an_empty_list() -> None:
    values, bad, missing, _ = convert(feat(dtype="int64", shape=[-1], required=False),
                                      pa.array([1, None, 3]))
    assert (values, bad, missing) == ([[1], [], [3]], {}, [False, True, False])


def test_null_in_a_required_feature_is_refused() -> None:
    values, bad, missing, _ = convert(feat(dtype="int64"), pa.array([1, None, 3]))
    assert values == [[1], [0], [3]]
    assert (bad, missing) == ({1: MISSING_REQUIRED}, [False, True, False])


def test_null_text_into_bytes_is_missing() -> None:
    values, bad, missing, _ = convert(feat(dtype="bytes"), pa.array(["a", None, "é"]))
    assert values == [[b"a"], [b""], ["é".encode()]]
    assert (bad, missing) == ({1: MISSING_REQUIRED}, [False, True, False])


def test_an_absent_source_column_refuses_every_row_of_a_required_feature() -> None:
    out = to_storage(feat(dtype="int64"), {}, 2)
    why = ("missing_required", "source column 'x' is missing")
    assert out.storage.to_pylist() == [[0], [0]]
    assert out.bad == {0: why, 1: why}
    assert out.missing is not None and out.missing.tolist() == [True, True]


# ---- lists, ragged and fixed ---------------------------------------------------------------
def test_ragged_lists_keep_their_lengths_and_empty_is_a_value() -> None:
    values, bad, missing, _ = convert(feat(dtype="int64", shape=[-1]),
                                      pa.array([[1, 2], [], None, [3]]))
    assert values == [[1, 2], [], [], [3]]
    assert bad == {2: MISSING_REQUIRED}  # an empty list is a value, a NULL list is not
    assert missing == [False, False, True, False]


def test_ragged_outer_dimension_needs_whole_inner_rows() -> None:
    values, bad, _, _ = convert(feat(dtype="int64", shape=[-1, 2]),
                                pa.array([[1, 2, 3, 4], [5]]))
    assert values == [[1, 2, 3, 4], [5]]
    assert bad == {1: ("wrong_shape", "value count is not a multiple of 2 for shape [-1, 2]")}


def test_fixed_shape_with_the_wrong_count_is_refused_and_padded() -> None:
    values, bad, _, _ = convert(feat(dtype="float32", shape=[2]), pa.array([[1, 2], [3], [4, 5]]))
    assert values == [[1.0, 2.0], [0.0, 0.0], [4.0, 5.0]]  # the layout stays valid
    assert bad == {1: ("wrong_shape", "expected 2 value(s) for shape [2], found 1")}


def test_a_single_value_among_lists_is_the_wrong_type() -> None:
    values, bad, missing, _ = convert(feat(dtype="int64", shape=[-1]), [[1, 2], 3, None])
    assert values == [[1, 2], [], []]
    assert bad == {1: ("wrong_type", "expected a list of values for shape [-1], found 3"),
                   2: MISSING_REQUIRED}
    assert missing == [False, True, True]


def test_sequence_features_store_steps_of_values() -> None:
    values, bad, missing, out = convert(feat(dtype="int64", sequence=True),
                                        pa.array([[1, 2], [3], None]))
    assert out.storage.type == pa.large_list(pa.large_list(pa.int64()))
    assert values == [[[1], [2]], [[3]], []]
    assert (bad, missing) == ({2: MISSING_REQUIRED}, [False, False, True])


def test_sequence_steps_of_a_fixed_shape() -> None:
    values, bad, _, _ = convert(feat(dtype="int64", shape=[2], sequence=True),
                                pa.array([[[1, 2], [3, 4]], [[5]]]))
    assert values == [[[1, 2], [3, 4]], [[5, 0]]]
    assert bad == {1: ("wrong_shape", "expected 2 value(s) per step for shape [2], found 1")}


# ---- vocabularies, packed columns, raw blobs, images ---------------------------------------
def test_vocabulary_labels_become_ids() -> None:
    values, bad, missing, _ = convert(feat(dtype="int64", vocabulary=["cat", "dog"]),
                                      pa.array(["dog", "cat", "cow", None]))
    assert values == [[1], [0], [-1], [0]]
    assert bad == {2: ("not_in_vocabulary", "'cow' not in vocabulary (expected one of 'cat', "
                                            "'dog')"),
                   3: MISSING_REQUIRED}
    assert missing == [False, False, False, True]


def test_unknown_labels_take_the_oov_id() -> None:
    values, bad, _, _ = convert(feat(dtype="int64", vocabulary=["cat", "dog"], oov_id=2),
                                pa.array(["dog", "cow"]))
    assert (values, bad) == ([[1], [2]], {})


def test_several_scalar_columns_packed_into_one_vector() -> None:
    f = feat(dtype="float32", shape=[2], source=["a", "b"])
    out = to_storage(f, {"a": pa.array([1.0, None]), "b": pa.array(["2", "z"])}, 2)
    assert out.storage.to_pylist() == [[1.0, 2.0], [0.0, 0.0]]
    # a row keeps its first reason: column a's NULL, before column b's unparsable "z"
    assert out.bad == {1: ("missing_required", "column 'a': missing value")}
    assert out.missing is not None and out.missing.tolist() == [False, True]


def test_raw_numbers_become_little_endian_blobs() -> None:
    values, bad, _, _ = convert(feat(dtype="uint16", shape=[2], encoding="raw"),
                                pa.array([[1, 2], [3]]))
    assert values == [[b"\x01\x00\x02\x00"], [b"\x00\x00\x00\x00"]]
    assert bad == {1: ("wrong_shape", "expected 2 values for uint16[2], found 1")}


def _png(height: int, width: int) -> bytes:
    from PIL import Image  # noqa: PLC0415

    buf = io.BytesIO()
    Image.fromarray(np.zeros((height, width), np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_png_headers_checked_without_decoding() -> None:
    f = feat(dtype="uint8", shape=[2, 2, 1], encoding="png")
    good, other, junk = _png(2, 2), _png(3, 2), b"not an image at all, but long enough"
    values, bad, _, _ = convert(f, pa.array([good, other, junk], pa.binary()))
    assert values == [[good], [other], [junk]]  # blobs are stored as they are
    assert bad == {
        1: ("wrong_shape", "PNG image is 3x2x1 (height x width x channels), shape [2, 2, 1] "
                           "expects 2x2"),
        2: ("bad_image", "not a PNG image (no PNG signature)"),
    }


# ---- the helpers -----------------------------------------------------------------------------
def test_nest_compose_and_rows_of() -> None:
    nested = nest(pa.array([[[1], [2, 3]], [], [[4]]]), 3)
    assert [lv.tolist() for lv in nested.levels] == [[0, 2, 2, 3], [0, 1, 3, 4]]
    assert nested.leaves.to_pylist() == [1, 2, 3, 4]
    offsets = compose(nested.levels, 3)
    assert offsets.tolist() == [0, 3, 3, 4]  # rows straight to leaves
    # leaves 1 and 3 (values 2 and 4) sit in rows 0 and 2
    assert rows_of(np.array([False, True, False, True]), offsets).tolist() == [0, 2]


def test_as_arrow_normalises_source_columns() -> None:
    same = as_arrow([np.zeros(2), np.ones(2)])  # equal shapes: one NumPy block
    assert isinstance(same, np.ndarray) and same.shape == (2, 2)
    assert as_arrow([np.zeros(2), np.ones(3)]).to_pylist() == [[0.0, 0.0], [1.0, 1.0, 1.0]]
    assert as_arrow(["3", 3]).to_pylist() == ["3", "3"]  # mixed: text, checked later
    assert as_arrow(pa.chunked_array([[1], [2]])).to_pylist() == [1, 2]
