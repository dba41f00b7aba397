"""The three storage kinds of a `tf.train.Feature` (Int64List, FloatList, BytesList): one
table that the encoder, the wire writer, the parse spec, the decoder, the record checker and
the TFMD export all read, so a kind is described once.

A schema feature's `storage` (etl.contract.schema.Feature.storage) names its row here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class StorageKind:
    name: str  # Feature.storage: int64 | float | bytes
    list_field: str  # the tf.train.Feature oneof that holds the values
    wire_tag: int  # that field's key byte inside a serialized tf.train.Feature
    numpy: np.dtype  # the values as NumPy holds them (object: Python bytes)
    arrow: pa.DataType  # the leaf type of the encoder's list columns
    tf_dtype: str  # the tf.DType a parse spec reads them as
    tfmd_type: str  # tensorflow_metadata FeatureType
    tfmd_default: str  # the TensorRepresentation.DefaultValue field for a default


STORAGE_KINDS: dict[str, StorageKind] = {k.name: k for k in (
    StorageKind("bytes", "bytes_list", 0x0A, np.dtype(object), pa.large_binary(), "string",
                "BYTES", "bytes_value"),
    StorageKind("float", "float_list", 0x12, np.dtype(np.float32), pa.float32(), "float32",
                "FLOAT", "float_value"),
    StorageKind("int64", "int64_list", 0x1A, np.dtype(np.int64), pa.int64(), "int64", "INT",
                "int_value"),
)}
