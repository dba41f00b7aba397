"""Schema checks and encoder bad-record reasons: every message names the feature and the value."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf
import yaml

from etl.base.errors import RecordError, SchemaError
from etl.contract.codec import Encoder
from etl.contract.schema import load_schema, schema_from_dict

SCHEMAS = os.path.join(os.path.dirname(__file__), os.pardir, "schemas")


def example(**features):
    return schema_from_dict({"name": "t", "kind": "example", "features": features})


# ---- schema errors -------------------------------------------------------------------------------
FEATURE_ERRORS = [
    # id, spec of feature 'bad', fragments the message must contain
    ("unknown_dtype", {"dtype": "complex64"}, ["unknown dtype 'complex64'", "float32"]),
    ("missing_dtype", {"shape": [3]}, ["missing 'dtype'"]),
    ("zero_dim", {"dtype": "int64", "shape": [0]}, ["bad shape [0]", "dimension 0 is 0"]),
    ("zero_inner_dim", {"dtype": "int64", "shape": [3, 0]}, ["bad shape [3, 0]",
                                                             "dimension 1 is 0"]),
    ("variable_not_first", {"dtype": "int64", "shape": [3, -1]},
     ["bad shape [3, -1]", "only the first dimension may be variable"]),
    ("non_int_dim", {"dtype": "int64", "shape": ["a"]}, ["bad shape ['a']", "dimension 0 is 'a'"]),
    ("float_dim", {"dtype": "int64", "shape": [2.5]}, ["dimension 0 is 2.5"]),
    ("bool_dim", {"dtype": "int64", "shape": [True]}, ["dimension 0 is True"]),
    ("negative_dim", {"dtype": "int64", "shape": [-2]}, ["dimension 0 is -2"]),
    ("shape_string", {"dtype": "int64", "shape": "3"}, ["shape must be a list of ints"]),
    ("float64_values", {"dtype": "float64", "shape": []},
     ["float64 values would be rounded to float32", "encoding: raw"]),
    ("double_alias", {"dtype": "double", "shape": [2]}, ["float64 values"]),
    ("uint64_values", {"dtype": "uint64", "shape": []}, ["uint64 values do not fit"]),
    ("optional_fixed_without_default", {"dtype": "int64", "shape": [3], "required": False},
     ["optional fixed-shape feature needs a 'default'"]),
    ("default_and_required", {"dtype": "int64", "shape": [], "default": 1, "required": True},
     ["a feature with a default cannot be required"]),
    ("default_on_ragged", {"dtype": "int64", "shape": [-1], "default": 1},
     ["defaults are supported for fixed-shape context values only"]),
    ("default_wrong_type", {"dtype": "int64", "shape": [], "default": "x"},
     ["default for a int64 feature must be a number", "'x'"]),
    ("default_not_in_vocabulary", {"dtype": "int64", "shape": [], "vocabulary": ["a"],
                                   "default": "b"}, ["default 'b' is not in the vocabulary"]),
    ("png_two_channels", {"dtype": "uint8", "shape": [4, 4, 2], "encoding": "png"},
     ["png images need shape [height, width, channels]", "[1, 3, 4]", "[4, 4, 2]"]),
    ("png_five_channels", {"dtype": "uint16", "shape": [4, 4, 5], "encoding": "png"},
     ["channels in [1, 3, 4]", "[4, 4, 5]"]),
    ("png_no_channel_dim", {"dtype": "uint8", "shape": [4, 4], "encoding": "png"},
     ["png images need shape [height, width, channels]"]),
    ("png_float", {"dtype": "float32", "shape": [4, 4, 1], "encoding": "png"},
     ["png images must be dtype uint8 or uint16", "'float32'"]),
    ("jpeg_uint16", {"dtype": "uint16", "shape": [4, 4, 3], "encoding": "jpeg"},
     ["jpeg images must be dtype uint8"]),
    ("jpeg_four_channels", {"dtype": "uint8", "shape": [4, 4, 4], "encoding": "jpeg"},
     ["channels in [1, 3]"]),
    ("raw_variable_shape", {"dtype": "uint8", "shape": [-1], "encoding": "raw"},
     ["encoding 'raw' needs a fully defined shape"]),
    ("raw_uint32", {"dtype": "uint32", "shape": [2], "encoding": "raw"},
     ["dtype 'uint32' cannot be decoded from raw bytes"]),
    ("unknown_encoding", {"dtype": "int64", "encoding": "zip"}, ["unknown encoding 'zip'"]),
    ("unknown_key", {"dtype": "int64", "dims": [3]}, ["unknown key(s) ['dims']", "allowed"]),
    ("unknown_representation", {"dtype": "int64", "shape": [-1], "representation": "dense"},
     ["representation must be one of ['ragged', 'sparse']", "'dense'"]),
    ("sparse_fixed", {"dtype": "int64", "shape": [3], "representation": "sparse"},
     ["representation: sparse (VarLenFeature) needs shape [-1]"]),
    ("vocabulary_float", {"dtype": "float32", "vocabulary": ["a"]},
     ["dtype must be an integer", "'float32'"]),
    ("vocabulary_duplicates", {"dtype": "int64", "vocabulary": ["a", "a"]},
     ["vocabulary has duplicate labels"]),
    ("vocabulary_bad_ids", {"dtype": "int64", "vocabulary": {"a": 0, "b": 2}},
     ["must assign ids 0..N-1"]),
    ("oov_without_vocabulary", {"dtype": "int64", "oov_id": 3}, ["oov_id needs a vocabulary"]),
    ("pack_wrong_shape", {"dtype": "float32", "shape": [3], "source": ["a", "b"]},
     ["packing 2 source columns needs shape [2]", "[3]"]),
    ("source_not_names", {"dtype": "float32", "source": 3}, ["source must be a column name"]),
    ("spec_not_mapping", "int64", ["spec must be a mapping", "'int64'"]),
    ("allow_nan_on_int", {"dtype": "int64", "allow_nan": True},
     ["allow_nan applies to float dtypes only", "'int64'"]),
    ("allow_nan_not_bool", {"dtype": "float32", "allow_nan": "yes"},
     ["allow_nan must be true or false", "'yes'"]),
    ("nan_default", {"dtype": "float32", "default": float("nan")},
     ["default nan is not finite", "allow_nan: true"]),
]


@pytest.mark.parametrize("spec,fragments", [c[1:] for c in FEATURE_ERRORS],
                         ids=[c[0] for c in FEATURE_ERRORS])
def test_feature_errors_name_the_feature(spec, fragments):
    with pytest.raises(SchemaError) as err:
        example(ok={"dtype": "int64", "shape": []}, bad=spec)
    message = str(err.value)
    assert "feature 'bad'" in message
    for fragment in fragments:
        assert fragment in message, message


SCHEMA_ERRORS = [
    ("not_mapping", ["a", "b"], "a schema must be a mapping"),
    ("unknown_top_key", {"kind": "example", "feature": {}}, "unknown top-level key(s) ['feature']"),
    ("unknown_kind", {"kind": "tensor", "features": {"a": {"dtype": "int64"}}},
     "kind must be one of ['example', 'sequence_example'], got 'tensor'"),
    ("example_with_sequence", {"kind": "example", "context": {"a": {"dtype": "int64"}}},
     "kind 'example' takes 'features'"),
    ("sequence_with_features", {"kind": "sequence_example", "features": {"a": {"dtype": "int64"}}},
     "kind 'sequence_example' takes 'context' and 'sequence'"),
    ("no_features", {"kind": "example", "features": {}}, "'features' must be a non-empty mapping"),
    ("duplicate_names", {"kind": "sequence_example", "context": {"a": {"dtype": "int64"}},
                         "sequence": {"a": {"dtype": "int64"}}},
     "feature name(s) ['a'] declared twice"),
    ("sparse_sequence", {"kind": "sequence_example", "sequence": {
        "s": {"dtype": "int64", "shape": [-1], "representation": "sparse"}}},
     "feature 's': representation: sparse"),
]


@pytest.mark.parametrize("doc,fragment", [c[1:] for c in SCHEMA_ERRORS],
                         ids=[c[0] for c in SCHEMA_ERRORS])
def test_schema_errors(doc, fragment):
    with pytest.raises(SchemaError) as err:
        schema_from_dict(doc)
    assert fragment in str(err.value)


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: example\nfeatures:\n  pixels: {dtype: uint8, shape: [28, 0]}\n")
    with pytest.raises(SchemaError, match=r"broken\.yaml: feature 'pixels': bad shape \[28, 0\]"):
        load_schema(path)
    path.write_text("kind: example\nfeatures: [unclosed\n")
    with pytest.raises(SchemaError, match=r"broken\.yaml: not valid YAML"):
        load_schema(path)


def test_schema_errors_are_value_errors():
    with pytest.raises(ValueError):
        example(bad={"dtype": "nope"})


# ---- specs of the bundled schemas ----------------------------------------------------------------
def test_spec_mnist():
    schema = load_schema(os.path.join(SCHEMAS, "mnist.yaml"))
    assert schema.parse_spec() == {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }


def test_spec_iris():
    schema = load_schema(os.path.join(SCHEMAS, "iris.yaml"))
    assert schema.parse_spec() == {
        "features": tf.io.FixedLenFeature([4], tf.float32),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    assert schema.feature("features").sources == ("sepal_length", "sepal_width",
                                                  "petal_length", "petal_width")
    assert schema.feature("label").vocabulary_index == {
        "Iris-setosa": 0, "Iris-versicolor": 1, "Iris-virginica": 2}


def test_spec_sentences():
    schema = load_schema(os.path.join(SCHEMAS, "sentences.yaml"))
    assert schema.parse_spec() == (
        {"id": tf.io.FixedLenFeature([], tf.int64), "length": tf.io.FixedLenFeature([], tf.int64)},
        {"tokens": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True)},
    )


def test_spec_every_kind():
    schema = example(
        d={"dtype": "int32", "shape": [2, 3], "default": 4},
        r={"dtype": "float32", "shape": [-1, 3]},
        s={"dtype": "bytes", "shape": [-1], "representation": "sparse"},
        p={"dtype": "uint16", "shape": [8, 8, 1], "encoding": "png"},
    )
    assert schema.parse_spec() == {
        "d": tf.io.FixedLenFeature([2, 3], tf.int64, default_value=[4] * 6),
        "r": tf.io.RaggedFeature(tf.float32, value_key="r", row_splits_dtype=tf.int64,
                                 partitions=[tf.io.RaggedFeature.UniformRowLength(3)]),
        "s": tf.io.VarLenFeature(tf.string),
        "p": tf.io.FixedLenFeature([], tf.string),
    }


@pytest.mark.parametrize("name", ["mnist", "iris", "sentences", "digits"])
def test_yaml_round_trip(name):
    schema = load_schema(os.path.join(SCHEMAS, f"{name}.yaml"))
    again = schema_from_dict(yaml.safe_load(schema.to_yaml()))
    assert again == schema
    assert again.sha256() == schema.sha256()


def test_allow_nan_round_trips_and_changes_the_fingerprint():
    plain = example(x={"dtype": "float32", "shape": []})
    nan_ok = example(x={"dtype": "float32", "shape": [], "allow_nan": True})
    assert (plain.feature("x").allow_nan, nan_ok.feature("x").allow_nan) == (False, True)
    assert "allow_nan" not in plain.to_yaml()  # absent key: fingerprints of old schemas stay
    assert nan_ok.to_dict()["features"]["x"] == {"dtype": "float32", "shape": [], "allow_nan": True}
    again = schema_from_dict(yaml.safe_load(nan_ok.to_yaml()))
    assert again == nan_ok and again.sha256() == nan_ok.sha256() != plain.sha256()
    values = [1.0, float("nan"), float("inf"), -float("inf")]
    assert [(b.record, b.code) for b in Encoder(plain).encode({"x": values}).bad] == [
        (1, "nan_not_allowed"), (2, "nan_not_allowed"), (3, "nan_not_allowed")]
    out = Encoder(nan_ok).encode({"x": values})
    assert out.bad == [] and out.rows.tolist() == [0, 1, 2, 3]


# ---- encoder bad-record reasons ------------------------------------------------------------------
ENCODE_SCHEMA = {
    "n": {"dtype": "int64", "shape": []},
    "u": {"dtype": "uint8", "shape": []},
    "v": {"dtype": "float32", "shape": [3]},
    "h": {"dtype": "float16", "shape": []},
    "lab": {"dtype": "int64", "shape": [], "vocabulary": ["cat", "dog", "bird"]},
    "tags": {"dtype": "int64", "shape": [-1], "vocabulary": ["a", "b"], "required": False},
    "pair": {"dtype": "int8", "shape": [2], "source": ["p1", "p2"]},
    "m": {"dtype": "int32", "shape": [-1, 2], "required": False},
    "raw": {"dtype": "uint8", "shape": [2], "encoding": "raw"},
}
GOOD = {"n": 1, "u": 2, "v": [1.0, 2.0, 3.0], "h": 0.5, "lab": "dog", "tags": ["a"], "p1": 1,
        "p2": -1, "m": [1, 2], "raw": b"\x01\x02"}
BAD_RECORDS = [
    # id, change to a good record, feature named, reason code, fragments of the reason
    ("text_in_int", {"n": "abc"}, "n", "unparsable_number", ["'abc'", "int64"]),
    ("fraction_in_int", {"n": 2.5}, "n", "out_of_range", ["expected an integer for int64", "2.5"]),
    ("uint8_too_big", {"u": 300}, "u", "out_of_range", ["300", "out of range", "uint8 [0, 255]"]),
    ("uint8_negative", {"u": -1}, "u", "out_of_range", ["-1", "out of range"]),
    ("float16_overflow", {"h": 70000.0}, "h", "out_of_range", ["70000.0", "overflows float16"]),
    ("nan", {"h": float("nan")}, "h", "nan_not_allowed", ["nan", "allow_nan: true"]),
    ("too_few_values", {"v": [1.0, 2.0]}, "v", "wrong_shape",
     ["expected 3 value(s) for shape [3], found 2"]),
    ("too_many_values", {"v": [1, 2, 3, 4]}, "v", "wrong_shape", ["expected 3 value(s)", "found 4"]),
    ("vocabulary_miss", {"lab": "cow"}, "lab", "not_in_vocabulary",
     ["'cow'", "not in vocabulary", "'cat', 'dog', 'bird'"]),
    ("vocabulary_miss_in_list", {"tags": ["a", "zz"]}, "tags", "not_in_vocabulary",
     ["'zz'", "'a', 'b'"]),
    ("missing_required", {"n": None}, "n", "missing_required", ["missing required value"]),
    ("packed_column_bad", {"p2": 200}, "pair", "out_of_range",
     ["column 'p2'", "200", "int8 [-128, 127]"]),
    ("packed_column_missing", {"p1": None}, "pair", "missing_required",
     ["column 'p1'", "missing value"]),
    ("ragged_not_multiple", {"m": [1, 2, 3]}, "m", "wrong_shape", ["not a multiple of 2", "[-1, 2]"]),
    ("raw_wrong_length", {"raw": b"\x01"}, "raw", "wrong_shape", ["raw blob has 1 bytes, expected 2"]),
    ("scalar_for_list", {"v": 7.0}, "v", "wrong_type", ["expected a list of values", "found 7.0"]),
]


@pytest.mark.parametrize("change,feature,code,fragments", [c[1:] for c in BAD_RECORDS],
                         ids=[c[0] for c in BAD_RECORDS])
def test_encoder_bad_record_reasons(change, feature, code, fragments):
    schema = example(**ENCODE_SCHEMA)
    bad = {**GOOD, **change}
    out = Encoder(schema).encode_records([GOOD, bad, GOOD], source="in.jsonl")
    assert out.rows.tolist() == [0, 2] and len(out.records) == 2
    assert len(out.bad) == 1
    rec = out.bad[0]
    assert (rec.source, rec.record, rec.line, rec.feature, rec.code) == (
        "in.jsonl", 1, None, feature, code)
    for fragment in fragments:
        assert fragment in rec.reason, rec.reason
    assert rec.message().startswith(f"in.jsonl: record 1: feature {feature!r}: ")
    assert rec.message().endswith(f" [{code}]")


def test_each_bad_row_names_its_own_value():
    schema = example(lab=ENCODE_SCHEMA["lab"], u=ENCODE_SCHEMA["u"])
    out = Encoder(schema).encode({"lab": ["cow", "dog", "pig"], "u": [1, 256, 1000]})
    # each row once, with its first reason (features in schema order: lab before u)
    reasons = {b.record: (b.feature, b.code, b.reason) for b in out.bad}
    assert out.rows.tolist() == [] and len(out.bad) == 3
    assert reasons[0][:2] == ("lab", "not_in_vocabulary") and reasons[0][2].startswith("'cow'")
    assert reasons[2][:2] == ("lab", "not_in_vocabulary") and reasons[2][2].startswith("'pig'")
    assert reasons[1] == ("u", "out_of_range", "value 256 out of range for uint8 [0, 255]")


def test_missing_required_column():
    schema = example(a={"dtype": "int64", "shape": []}, b={"dtype": "float32", "shape": [2]})
    out = Encoder(schema).encode({"a": [1, 2]})
    assert [(b.record, b.feature, b.code, b.reason) for b in out.bad] == [
        (0, "b", "missing_required", "source column 'b' is missing"),
        (1, "b", "missing_required", "source column 'b' is missing")]


def test_encode_one_raises_naming_the_feature():
    schema = example(**ENCODE_SCHEMA)
    with pytest.raises(RecordError, match=r"record 0: feature 'u': value 300 out of range .*"
                                          r"\[out_of_range\]"):
        Encoder(schema).encode_one({**GOOD, "u": 300})
