"""Export a schema to tensorflow-metadata (`schema.pbtxt`) so TFX/TFDV tools read our data.

Tensor representations are written explicitly, so tfx_bsl's `CreateTfExampleParserConfig`
rebuilds exactly the parse spec `Schema.parse_spec()` gives (tests pin this).

tfx_bsl's readers (`TFExampleRecord`, `TFSequenceExampleRecord`) also infer a representation
from every `Feature` and refuse a feature that has `shape` without `presence.min_fraction: 1`
(tensor_representation_util._InferTensorRepresentationFromSchema). So a fixed-shape feature
that may be absent (it has a `default:`) states its size as `value_count {min: k max: k}`
instead of `shape`; its explicit dense representation carries the shape and the default,
and the explicit representation wins over the inferred one (tests/test_tfx_readers.py reads
every feature kind through those readers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from etl.formats.kinds import STORAGE_KINDS

if TYPE_CHECKING:
    from etl.contract.schema import Feature, Schema

SEQUENCE_STRUCT = "##SEQUENCE##"
TR = schema_pb2.TensorRepresentation
# TFMD's names for our stored units (TimeDomain.IntegerTimeFormat)
_TIME_FORMATS = {"D": "UNIX_DAYS", "s": "UNIX_SECONDS", "ms": "UNIX_MILLISECONDS",
                 "us": "UNIX_MICROSECONDS", "ns": "UNIX_NANOSECONDS"}


def _base(feature: Feature) -> schema_pb2.Feature:
    kind = STORAGE_KINDS[feature.storage]
    out = schema_pb2.Feature(name=feature.name, type=getattr(schema_pb2, kind.tfmd_type))
    if feature.description:
        out.doc = feature.description
    if feature.vocabulary:
        out.int_domain.min = 0
        out.int_domain.max = len(feature.vocabulary) - 1
        out.int_domain.is_categorical = True
    elif feature.storage == "int64" and feature.dtype != "int64":
        info = np.iinfo(feature.dtype) if feature.dtype != "bool" else None
        out.int_domain.min = 0 if info is None else int(info.min)
        out.int_domain.max = 1 if info is None else int(info.max)
    if feature.time is not None:  # dates and timestamps: int64 since the epoch, in a unit
        fmt = _TIME_FORMATS[feature.time.unit]
        out.time_domain.integer_format = getattr(schema_pb2.TimeDomain, fmt)
    if feature.encoding in ("png", "jpeg"):
        out.image_domain.SetInParent()
    if feature.storage == "float" and not feature.allow_nan:
        # what the encoder enforces (nan_not_allowed), stated for TFDV
        out.float_domain.disallow_nan = True
        out.float_domain.disallow_inf = True
    return out


def _dims(shape: tuple[int, ...]) -> schema_pb2.FixedShape:
    return schema_pb2.FixedShape(dim=[schema_pb2.FixedShape.Dim(size=d) for d in shape])


def _ragged(path: list[str], inner: tuple[int, ...]) -> TR:
    rep = TR(ragged_tensor=TR.RaggedTensor(row_partition_dtype=TR.RowPartitionDType.INT64))
    rep.ragged_tensor.feature_path.step.extend(path)
    for d in inner:
        rep.ragged_tensor.partition.add(uniform_row_length=d)
    return rep


def _context_feature(feature: Feature) -> tuple[schema_pb2.Feature, TR]:
    out = _base(feature)
    if feature.encoding != "values" or feature.fixed:
        shape = () if feature.encoding != "values" else feature.shape
        rep = TR(dense_tensor=TR.DenseTensor(column_name=feature.name, shape=_dims(shape)))
        default = feature.storage_default
        if default is not None:
            setattr(rep.dense_tensor.default_value, STORAGE_KINDS[feature.storage].tfmd_default,
                    default[0])
        if feature.required:
            out.shape.CopyFrom(_dims(shape))
            out.presence.min_fraction = 1.0
        else:
            # may be absent: `shape` would need min_fraction 1 (see the module docstring)
            count = int(np.prod(shape, dtype=np.int64))
            out.value_count.min = count
            out.value_count.max = count
        return out, rep
    out.value_count.min = 0
    if feature.representation == "sparse":
        return out, TR(varlen_sparse_tensor=TR.VarLenSparseTensor(column_name=feature.name))
    return out, _ragged([feature.name], feature.inner_shape)


def schema_to_tfmd(schema: Schema) -> schema_pb2.Schema:
    out = schema_pb2.Schema()
    group = out.tensor_representation_group[""]
    for feature in schema.context:
        proto, rep = _context_feature(feature)
        out.feature.append(proto)
        group.tensor_representation[feature.name].CopyFrom(rep)
    if schema.sequence:
        struct = out.feature.add(name=SEQUENCE_STRUCT, type=schema_pb2.STRUCT)
        for feature in schema.sequence:
            struct.struct_domain.feature.append(_base(feature))
            inner = feature.shape if feature.encoding == "values" and feature.fixed else (
                feature.inner_shape if feature.encoding == "values" else ()
            )
            group.tensor_representation[feature.name].CopyFrom(
                _ragged([SEQUENCE_STRUCT, feature.name], inner)
            )
    return out


def to_pbtxt(schema: Schema) -> str:
    return text_format.MessageToString(schema_to_tfmd(schema))
