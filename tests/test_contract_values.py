"""The data contract on values that used to change silently: decimals, `encoding: raw` on
text, thousands separators, `default: nan`, and the per-feature missing/defaulted counts
(encoder -> read reports -> manifest -> run summary)."""

from __future__ import annotations

import decimal
import struct

import numpy as np
import pyarrow as pa
import pytest

from cli.summary import missing_lines
from etl.base.errors import SchemaError
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.output.accounting import account, add_missing, missing_section
from etl.shuffle.shard_writer import ShardResult

D = decimal.Decimal


def _encode(features: dict, columns, **kw):
    out = Encoder(schema_from_dict({"features": features})).encode(columns, source="in", **kw)
    return out, {(b.line if b.line is not None else b.record, b.feature): (b.code, b.reason)
                 for b in out.bad}


# ---- decimals ------------------------------------------------------------------------------
def test_decimal128_to_int_float_and_bytes_exactly() -> None:
    batch = pa.record_batch({
        "price": pa.array([D("1.50"), D("-3.00"), D("0.10"), None], pa.decimal128(10, 2)),
        "big": pa.array([D("3"), D("12345678901234567890"), D("-7"), D("0")],
                        pa.decimal128(20, 0)),
    })
    out, bad = _encode({
        "text": {"dtype": "bytes", "source": "price", "required": False, "shape": [-1]},
        "f": {"dtype": "float32", "source": "price", "default": 0.0},
        "whole": {"dtype": "int64", "source": "big"},
    }, batch)
    assert out.storage["text"].to_pylist() == [[b"1.50"], [b"-3.00"], [b"0.10"], []]
    assert out.storage["f"].values.to_pylist()[:2] == [1.5, -3.0]
    assert out.storage["whole"].values.to_pylist()[2:] == [-7, 0]
    assert bad == {
        (1, "whole"): ("out_of_range", "decimal 12345678901234567890 is not a whole number "
                                       "within int64 for int64 (declare dtype: bytes for the "
                                       "exact decimal text)"),
        (2, "f"): ("out_of_range", "decimal 0.10 has no exact float32 value (declare dtype: "
                                   "bytes for the exact decimal text, or int64 for whole "
                                   "numbers)"),
    }


def test_decimal_with_a_fraction_into_an_integer_is_rejected() -> None:
    batch = pa.record_batch({"x": pa.array([D("2.00"), D("2.50")], pa.decimal128(5, 2))})
    out, bad = _encode({"x": {"dtype": "int32"}}, batch)
    assert out.storage["x"].values.to_pylist()[0] == 2
    assert bad == {(1, "x"): ("out_of_range", "decimal 2.50 is not a whole number within "
                                              "int64 for int32 (declare dtype: bytes for the "
                                              "exact decimal text)")}


# ---- encoding: raw on text -------------------------------------------------------------------
def test_raw_numbers_from_text_are_parsed_not_their_bytes() -> None:
    cells = ["7601", "-12", " 5 ", "x"]
    floats = ["0.1", "1e-300", "3.141592653589793", "2.5e10"]
    out, bad = _encode({"a": {"dtype": "int32", "encoding": "raw"},
                        "f": {"dtype": "float64", "encoding": "raw"}},
                       {"a": pa.array(cells), "f": pa.array(floats)}, lines=np.arange(2, 6))
    assert [struct.unpack("<i", b)[0] for b in out.storage["a"].values.to_pylist()[:3]] == [
        7601, -12, 5]
    assert [struct.unpack("<d", b)[0] for b in out.storage["f"].values.to_pylist()] == [
        float(c) for c in floats]
    assert bad == {(5, "a"): ("unparsable_number", "cannot parse 'x' as int32")}


def test_raw_blobs_stay_blobs() -> None:
    blob = np.array([1, 2], "<i4").tobytes()
    out, bad = _encode({"a": {"dtype": "int32", "encoding": "raw", "shape": [2]}},
                       {"a": pa.array([blob], pa.binary())})
    assert bad == {} and out.storage["a"].values.to_pylist() == [blob]


# ---- thousands separators ----------------------------------------------------------------
def test_thousands_separator_gets_a_hint() -> None:
    out, bad = _encode({"w": {"dtype": "int64"}}, {"w": pa.array(["3504", "135,450",
                                                                 "1,234,567", "12,5"])},
                       lines=np.arange(2, 6))
    hint = (" (looks like a thousands separator: remove the commas in the source, or declare "
            "dtype: bytes to keep the text)")
    assert bad == {
        (3, "w"): ("unparsable_number", "cannot parse '135,450' as int64" + hint),
        (4, "w"): ("unparsable_number", "cannot parse '1,234,567' as int64" + hint),
        (5, "w"): ("unparsable_number", "cannot parse '12,5' as int64"),
    }


# ---- default: nan ----------------------------------------------------------------------------
@pytest.mark.parametrize("default", ["nan", "NaN", float("nan")])
def test_default_nan_for_float_features_with_allow_nan(default) -> None:
    schema = schema_from_dict({"features": {"x": {"dtype": "float32", "default": default,
                                                  "allow_nan": True}}})
    f = schema.features[0]
    assert np.isnan(f.default) and f.to_dict()["default"] == "nan"
    assert schema_from_dict(schema.to_dict()).sha256() == schema.sha256()
    out = Encoder(schema).encode({"x": pa.array([1.5, None], pa.float64())})
    got = out.storage["x"].values.to_pylist()
    assert got[0] == 1.5 and np.isnan(got[1]) and out.bad == []
    assert out.missing == {"x": {"missing": 1, "defaulted": 1}}


@pytest.mark.parametrize("spec, message", [
    ({"dtype": "float32", "default": "nan"},
     "default 'nan' stores NaN: add allow_nan: true to the feature (NaN is rejected as "
     "nan_not_allowed otherwise), or choose a number"),
    ({"dtype": "int64", "default": "NaN"}, "default 'NaN' applies to float features only "
                                           "(dtype is int64)"),
])
def test_default_nan_refused_with_the_fix(spec: dict, message: str) -> None:
    with pytest.raises(SchemaError) as e:
        schema_from_dict({"features": {"x": spec}})
    assert str(e.value) == f"<schema>: feature 'x': {message}"


def test_source_nan_still_needs_allow_nan() -> None:
    out, bad = _encode({"x": {"dtype": "float32", "default": 0}},
                       {"x": pa.array(["1", "nan", ""])}, lines=np.arange(2, 5))
    assert bad == {(3, "x"): ("nan_not_allowed", "value nan is not finite (the feature does "
                                                 "not say allow_nan: true)")}
    assert out.missing == {"x": {"missing": 1, "defaulted": 1}}


# ---- missing values counted --------------------------------------------------------------
def test_encoder_counts_missing_and_defaulted_per_feature() -> None:
    columns = {"hp": pa.array([130, None, None, 95, None]),
               "mpg": pa.array([18.0, 15.0, None, None, 20.0]),
               "tags": pa.array([["a"], None, [], None, ["b"]])}
    out, bad = _encode({"hp": {"dtype": "int64", "default": 0},
                        "mpg": {"dtype": "float32"},
                        "tags": {"dtype": "bytes", "shape": [-1], "required": False}}, columns)
    assert sorted(bad) == [(2, "mpg"), (3, "mpg")]
    assert out.rows.tolist() == [0, 1, 4]
    # hp: missing in rows 1, 2, 4; rows 1 and 4 are written with the default
    assert out.missing == {"hp": {"missing": 3, "defaulted": 2},
                           "mpg": {"missing": 2, "defaulted": 0},
                           "tags": {"missing": 2, "defaulted": 1}}
    assert out.storage["hp"].values.to_pylist() == [130, 0, 0, 95, 0]


def test_missing_source_column_is_counted_for_every_row() -> None:
    out, _ = _encode({"a": {"dtype": "int64"}, "b": {"dtype": "int64", "default": 7}},
                     {"a": pa.array([1, 2])})
    assert out.missing == {"b": {"missing": 2, "defaulted": 2}}


def _shard(per_input: dict[int, int]) -> ShardResult:
    return ShardResult("train", 0, 1, "train-00000-of-00001.tfrecord", sum(per_input.values()),
                       10, "0" * 64, per_input)


def test_read_reports_add_up_to_the_manifest_section() -> None:
    """Two read tasks of one file and one of another: their counts add up exactly."""
    parts = [
        [{"ordinal": 0, "split": 0, "path": "a", "read": 3,
          "missing": {"hp": {"missing": 2, "defaulted": 2}}}],
        [{"ordinal": 0, "split": 1, "path": "a", "read": 2,
          "missing": {"hp": {"missing": 1, "defaulted": 0}, "mpg": {"missing": 1, "defaulted": 0}}},
         {"source": "a", "code": "missing_required", "reason": "missing", "line": 9}],
        [{"ordinal": 1, "split": 0, "path": "b", "read": 1}],
    ]
    acc = account(parts, [_shard({0: 4, 1: 1})], {(0, 0), (0, 1), (1, 0)})
    assert acc.missing == {"hp": {"missing": 3, "defaulted": 2},
                           "mpg": {"missing": 1, "defaulted": 0}}
    schema = schema_from_dict({"features": {"hp": {"dtype": "int64", "default": 0},
                                            "mpg": {"dtype": "float32"}}})
    section = missing_section(acc.missing, schema)
    assert section == {"hp": {"missing": 3, "defaulted": 2, "default": 0},
                       "mpg": {"missing": 1, "defaulted": 0}}
    assert missing_lines({"missing_values": section}) == [
        "  missing      hp: 3 value(s), 2 filled with default 0; 1 in records rejected for "
        "another reason",
        "  missing      mpg: 1 value(s), no default: records rejected (missing_required)",
    ]
    total: dict = {}
    add_missing(total, {"x": {"missing": 1, "defaulted": 1}})
    add_missing(total, {"x": {"missing": 2, "defaulted": 0}})
    assert total == {"x": {"missing": 3, "defaulted": 1}}


def test_packed_columns_count_missing_cells_not_bad_ones() -> None:
    out, bad = _encode({"x": {"dtype": "float32", "shape": [2], "source": ["a", "b"]}},
                       {"a": pa.array(["1", "x", "", None]), "b": pa.array(["2", "3", "4", "5"])})
    assert bad == {(1, "x"): ("unparsable_number", "column 'a': cannot parse 'x' as float32"),
                   (2, "x"): ("missing_required", "column 'a': missing value"),
                   (3, "x"): ("missing_required", "column 'a': missing value")}
    assert out.missing == {"x": {"missing": 2, "defaulted": 0}}
