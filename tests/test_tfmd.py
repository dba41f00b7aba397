"""The TFMD export rebuilds our parse spec through tfx_bsl, the way TFX tools would read it."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.tfxio import tensor_representation_util as tru

from etl.contract.codec import Encoder
from etl.contract.schema import load_schema, schema_from_dict
from etl.contract.tfmd import SEQUENCE_STRUCT, schema_to_tfmd, to_pbtxt
from tests.handmade import EVERY_KIND

SCHEMAS = os.path.join(os.path.dirname(__file__), os.pardir, "schemas")

def feature_types(tfmd: schema_pb2.Schema) -> dict[str, int]:
    return {f.name: f.type for f in tfmd.feature}


@pytest.mark.parametrize("name", [f.name for f in EVERY_KIND.context])
def test_example_parser_config_equals_parse_spec(name):
    tfmd = schema_to_tfmd(EVERY_KIND)
    reps = tru.GetTensorRepresentationsFromSchema(tfmd)
    assert set(reps) == {f.name for f in EVERY_KIND.context}
    config = tru.CreateTfExampleParserConfig(reps[name], feature_types(tfmd)[name])
    assert config == EVERY_KIND.parse_spec()[name]


@pytest.mark.parametrize("file", ["mnist", "iris", "digits"])
def test_bundled_schemas_parser_config(file):
    schema = load_schema(os.path.join(SCHEMAS, f"{file}.yaml"))
    tfmd = schema_to_tfmd(schema)
    reps = tru.GetTensorRepresentationsFromSchema(tfmd)
    types = feature_types(tfmd)
    assert {n: tru.CreateTfExampleParserConfig(r, types[n]) for n, r in reps.items()} == (
        schema.parse_spec())


def test_pbtxt_parses_back():
    text = to_pbtxt(EVERY_KIND)
    assert text_format.Parse(text, schema_pb2.Schema()) == schema_to_tfmd(EVERY_KIND)


def test_domains_and_presence():
    features = {f.name: f for f in schema_to_tfmd(EVERY_KIND).feature}
    assert (features["u8"].int_domain.min, features["u8"].int_domain.max) == (0, 255)
    assert (features["flag"].int_domain.min, features["flag"].int_domain.max) == (0, 1)
    label = features["label"].int_domain
    assert (label.min, label.max, label.is_categorical) == (0, 2, True)
    assert features["png"].HasField("image_domain")
    assert features["i64"].presence.min_fraction == 1.0
    assert features["count"].presence.min_fraction == 0.0  # has a default: may be absent
    # tfx_bsl refuses `shape` without min_fraction 1: a feature that may be absent gives its
    # size as value_count (its dense representation keeps the shape and the default)
    for name, k in (("count", 1), ("weights", 3), ("code", 2), ("kind", 1)):
        assert not features[name].HasField("shape")
        assert (features[name].value_count.min, features[name].value_count.max) == (k, k)
    assert features["matrix"].shape.dim[1].size == 3 and features["matrix"].presence.min_fraction == 1
    domain = features["weights"].float_domain
    assert (domain.disallow_nan, domain.disallow_inf) == (True, True)
    assert not features["i64"].HasField("float_domain")
    nan_ok = schema_to_tfmd(schema_from_dict({"name": "n", "kind": "example", "features": {
        "x": {"dtype": "float32", "shape": [], "allow_nan": True}}}))
    assert not nan_ok.feature[0].HasField("float_domain")
    assert features["raw"].type == schema_pb2.BYTES


# ---- SequenceExample -----------------------------------------------------------------------------
# tfx_bsl can only describe a sequence feature as a RaggedFeature over the feature list
# (CreateTfSequenceExampleParserConfig accepts nothing else for a two-step path), and a
# RaggedFeature always keeps the "values of this step" dimension: a feature with exactly k
# values per step comes back as [batch, (steps), (1 row of k)] where our decoder gives
# [batch, (steps), k] (or [batch, (steps)] for k = 1 scalars). TFMD has no representation
# that tfx_bsl turns into FixedLenSequenceFeature, so the export cannot make the specs equal;
# the tests check the extra dimension holds exactly one row per step and then compare the
# values exactly. Ragged-per-step features ([-1]) compare directly.
def drop_step_row_dim(rt: tf.RaggedTensor) -> tf.RaggedTensor:
    """[batch, (steps), (1 row), *k] -> our [batch, (steps), *k], checking the row is single."""
    per_step = rt.values  # one entry per step
    np.testing.assert_array_equal(per_step.row_lengths().numpy(), 1)
    return rt.with_values(per_step.values)


def tfx_parse(schema, records):
    context_spec, sequence_spec = tru.CreateTfSequenceExampleParserConfig(schema_to_tfmd(schema))
    return tf.io.parse_sequence_example(tf.constant(records, tf.string),
                                        context_features=context_spec,
                                        sequence_features=sequence_spec)[:2]


def test_sentences_sequence_parser_config():
    schema = load_schema(os.path.join(SCHEMAS, "sentences.yaml"))
    context_spec, sequence_spec = tru.CreateTfSequenceExampleParserConfig(schema_to_tfmd(schema))
    ours_context, _ = schema.parse_spec()
    assert context_spec == ours_context
    assert sequence_spec == {"tokens": tf.io.RaggedFeature(
        tf.int64, value_key="tokens", partitions=(), row_splits_dtype=tf.int64)}

    tokens = [[5, 6, 7], [], [9], list(range(40))]
    records = Encoder(schema).encode({"id": [10, 11, 12, 13],
                                      "length": [len(t) for t in tokens],
                                      "tokens": tokens}).records
    context, sequence = tfx_parse(schema, records)
    ours = schema.parse_and_decode(tf.constant(records))
    for name in ("id", "length"):
        np.testing.assert_array_equal(context[name].numpy(), ours[name].numpy(), strict=True)
    theirs = drop_step_row_dim(sequence["tokens"])
    assert theirs.dtype == ours["tokens"].dtype == tf.int64
    assert theirs.to_list() == ours["tokens"].to_list() == tokens


def test_sequence_values_match_for_every_step_kind():
    schema = schema_from_dict({"name": "steps", "kind": "sequence_example",
                               "context": {"id": {"dtype": "int64", "shape": []},
                                           "tags": {"dtype": "bytes", "shape": [-1]}},
                               "sequence": {
                                   "tok": {"dtype": "int64", "shape": []},
                                   "vec": {"dtype": "float32", "shape": [3]},
                                   "rag": {"dtype": "int64", "shape": [-1]},
                                   "word": {"dtype": "bytes", "shape": []},
                               }})
    steps = [2, 0, 3]
    cols = {
        "id": [1, 2, 3], "tags": [["a"], ["b", "c"], ["d"]],
        "tok": [list(range(s)) for s in steps],
        "vec": [[[j, j / 2, -j] for j in range(s)] for s in steps],
        "rag": [[list(range(j)) for j in range(s)] for s in steps],
        "word": [[f"w{j}" for j in range(s)] for s in steps],
    }
    records = Encoder(schema).encode(cols).records
    context, sequence = tfx_parse(schema, records)
    ours = schema.parse_and_decode(tf.constant(records))
    np.testing.assert_array_equal(context["id"].numpy(), ours["id"].numpy(), strict=True)
    assert context["tags"].to_list() == ours["tags"].to_list()
    assert sequence["rag"].to_list() == ours["rag"].to_list()  # ragged per step: as is
    for name in ("tok", "vec", "word"):
        theirs = drop_step_row_dim(sequence[name])
        assert theirs.dtype == ours[name].dtype
        assert theirs.to_list() == ours[name].to_list(), name


def test_sequence_struct_layout():
    schema = load_schema(os.path.join(SCHEMAS, "sentences.yaml"))
    tfmd = schema_to_tfmd(schema)
    struct = [f for f in tfmd.feature if f.name == SEQUENCE_STRUCT]
    assert len(struct) == 1 and struct[0].type == schema_pb2.STRUCT
    assert [f.name for f in struct[0].struct_domain.feature] == ["tokens"]
    rep = tfmd.tensor_representation_group[""].tensor_representation["tokens"]
    assert list(rep.ragged_tensor.feature_path.step) == [SEQUENCE_STRUCT, "tokens"]
