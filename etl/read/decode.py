"""Serialized Examples and SequenceExamples -> NumPy, without TensorFlow: the decoder of the
random-access reader (etl.read.random_access), for Grain, PyTorch and plain NumPy users.

The same contract as the tf.data path (`Schema.parse_and_decode`): every decision is read
off the schema's `Feature` objects (storage kind, dtype, shape, encoding, default,
representation), and tfx_bsl's decoder is given the dataset's own TFMD schema
(etl.contract.tfmd), the one tests pin to `parse_spec()`. What a batch of n records gives:

- a fixed-shape context feature: one array [n, *shape] of the declared dtype; a missing
  optional feature reads as its `default:` (as `FixedLenFeature(default_value=...)` does);
  `bytes` features are object arrays of Python `bytes`;
- a ragged or sparse context feature ([-1, ...]): a list of n arrays [k_i, *inner]
  (a missing optional one is empty);
- a sequence feature: a list of n arrays [steps_i, *shape] (a list of per-step arrays when
  the per-step shape is ragged); no feature list at all reads as 0 steps;
- `raw`: the little-endian bytes as the declared dtype; `png`/`jpeg`: decoded with Pillow to
  the declared channels (grey -> RGB and RGBA -> RGB as `tf.io.decode_png` does; an 8-bit PNG
  read as uint16 is scaled by 257 as TensorFlow does). JPEG pixels are those of
  `tf.io.decode_jpeg(dct_method="INTEGER_ACCURATE")` exactly, the method the tf.data path
  uses too (etl.contract.schema), so both readers give the same pixels (tested). One
  difference: 16-bit PNGs with 3 or 4 channels are refused when the reader opens (Pillow has
  no 16-bit colour mode). Images of any size (shape [null, null, C]) are a list of n arrays
  [height_i, width_i, C], each of its own size (make_dataset: a RaggedTensor).

Why tfx_bsl: its C++ batch decoders parse a list of serialized records into Arrow list
columns without TensorFlow (≈ 1 µs per ~180-byte Example here), so a batch costs one C++
call plus a few NumPy operations per feature, not Python work per value. One known bug
(tfx_bsl 1.21, pinned in tests/test_tfx_readers.py): its SequenceExample decoder keeps only
the low 32 bits of int64 values in feature lists. Every integer dtype narrower than int64
fits, so only `int64` sequence features are left out of its schema and read with protobuf
(a private descriptor pool: no clash with TensorFlow's own `tf.train` classes).
"""

from __future__ import annotations

import functools
import io
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from etl.base.errors import EtlError
from etl.contract.schema import Feature, Schema
from etl.contract.tfmd import SEQUENCE_STRUCT, schema_to_tfmd

_PIL_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_ALL = np.ones(4096, bool)
_ALL.flags.writeable = False


class RecordDecodeError(EtlError, ValueError):
    """A record that does not decode with the dataset's schema; the message names it."""


def is_dense(f: Feature) -> bool:
    """A feature whose batch is one array [n, *shape] (else a list of per-record arrays)."""
    return not f.is_sequence and f.fixed


def check_decodable(schema: Schema, where: str) -> None:
    """Refuse, before any record is read, what this decoder cannot give exactly."""
    for f in schema.features:
        if f.encoding == "png" and f.dtype == "uint16" and f.shape[-1] > 1:
            raise RecordDecodeError(
                f"{where}: feature {f.name!r}: 16-bit PNGs with {f.shape[-1]} channels cannot be "
                "decoded without TensorFlow (Pillow has no 16-bit colour mode); read this "
                "dataset with etl.make_dataset")


class RecordDecoder:
    """Decodes batches of serialized records of one schema. tfx_bsl's decoders keep state
    between the features of a batch, so each thread gets its own (Grain reads with several
    threads per worker), made on first use; pickling keeps only the schema."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self._sequence = schema.kind == "sequence_example"
        # int64 feature lists go around tfx_bsl's 32-bit bug (see the module docstring)
        self._by_proto = tuple(f for f in schema.sequence
                               if f.encoding == "values" and f.dtype == "int64")
        self._mine = threading.local()  # .decoder (tfx_bsl), .proto (SequenceExample class)

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["schema"])  # type: ignore[misc]

    def decode(self, records: list[bytes], name: Callable[[int], str]) -> dict[str, Any]:
        """A batch of serialized records -> feature name -> array [n, *shape] or list of n
        arrays (see the module docstring). `name(i)` says where record i is, for errors."""
        n = len(records)
        batch = self._decode_batch(records, name)
        out: dict[str, Any] = {}
        columns = dict(zip(batch.schema.names, batch.columns, strict=True))
        for f in self.schema.context:
            col = columns.get(f.name)
            out[f.name] = _context(f, col, n, name)
        if self._sequence:
            struct = columns.get(SEQUENCE_STRUCT)
            protos = self._proto_steps(records) if self._by_proto else {}
            for f in self.schema.sequence:
                if f.name in protos:
                    col = protos[f.name]
                elif struct is None:
                    col = None
                else:
                    col = struct.field(f.name)
                    if struct.null_count:  # a record without feature_lists: 0 steps
                        col = pa.LargeListArray.from_arrays(
                            _offsets_with_nulls(col, struct.is_null()), col.values)
                out[f.name] = _sequence(f, col, n, name)
        return out

    # ---- tfx_bsl ----------------------------------------------------------------------------
    def _make(self) -> Any:
        tfmd = schema_to_tfmd(self.schema)
        if not self._sequence:
            from tfx_bsl.coders import example_coder  # noqa: PLC0415 - C++ extension, on first decode

            return example_coder.ExamplesToRecordBatchDecoder(tfmd.SerializeToString())
        from tfx_bsl.coders import sequence_example_coder  # noqa: PLC0415 - as above

        skip = {f.name for f in self._by_proto}
        for feature in tfmd.feature:
            if feature.name == SEQUENCE_STRUCT:
                kept = [f for f in feature.struct_domain.feature if f.name not in skip]
                del feature.struct_domain.feature[:]
                feature.struct_domain.feature.extend(kept)
        for name in skip:
            del tfmd.tensor_representation_group[""].tensor_representation[name]
        return sequence_example_coder.SequenceExamplesToRecordBatchDecoder(
            SEQUENCE_STRUCT, tfmd.SerializeToString())

    def _decode_batch(self, records: list[bytes], name: Callable[[int], str]) -> pa.RecordBatch:
        mine = self._mine
        if getattr(mine, "decoder", None) is None:
            mine.decoder = self._make()
        try:
            return mine.decoder.DecodeBatch(records)
        except RuntimeError as e:
            # a decoder that failed keeps half-built state: later batches need a fresh one
            mine.decoder = None
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            for i, record in enumerate(records):
                try:
                    self._make().DecodeBatch([record])
                except RuntimeError:
                    raise RecordDecodeError(f"{name(i)}: does not decode with the dataset's "
                                            f"schema: {first}") from e
            raise RecordDecodeError(f"{name(0)} and the {len(records) - 1} records after it "
                                    f"do not decode together: {first}") from e

    # ---- int64 feature lists ----------------------------------------------------------------
    def _proto_steps(self, records: list[bytes]) -> dict[str, pa.Array]:
        """int64 feature lists as list<list<int64>> columns, read with protobuf."""
        mine = self._mine
        if getattr(mine, "proto", None) is None:
            mine.proto = _sequence_example_class()
        parse = mine.proto.FromString
        per: dict[str, tuple[list[int], list[int], list[np.ndarray]]] = {
            f.name: ([0], [0], []) for f in self._by_proto}
        for record in records:
            lists = parse(record).feature_lists.feature_list
            for key, (rec_offsets, step_offsets, values) in per.items():
                steps = lists[key].feature if key in lists else ()
                for step in steps:
                    v = np.fromiter(step.int64_list.value, np.int64)
                    values.append(v)
                    step_offsets.append(step_offsets[-1] + len(v))
                rec_offsets.append(rec_offsets[-1] + len(steps))
        out = {}
        for key, (rec_offsets, step_offsets, values) in per.items():
            flat = pa.array(np.concatenate(values) if values else np.zeros(0, np.int64))
            steps = pa.LargeListArray.from_arrays(pa.array(step_offsets, pa.int64()), flat)
            out[key] = pa.LargeListArray.from_arrays(pa.array(rec_offsets, pa.int64()), steps)
        return out


# ---- one feature ------------------------------------------------------------------------------
def _lists(col: pa.Array | None, n: int) -> tuple[np.ndarray, Any, np.ndarray]:
    """(offsets [n+1], values, present mask) of a list column; None: the feature is absent
    from every record of the batch. The offsets are read off Arrow's buffer (no copy)."""
    if col is None:
        return np.zeros(n + 1, np.int64), None, np.zeros(n, bool)
    offsets = np.frombuffer(col.buffers()[1], np.int64, n + 1, col.offset * 8)
    present = (~col.is_null().to_numpy(zero_copy_only=False) if col.null_count
               else _ALL[:n] if n <= len(_ALL) else np.ones(n, bool))
    first = int(offsets[0])
    values = col.values
    if first or len(values) != offsets[-1]:
        values = values.slice(first, int(offsets[-1]) - first)
        offsets = offsets - first
    return offsets, values, present


@functools.lru_cache(maxsize=4096)
def _value_count(f: Feature) -> int:
    return f.value_count  # np.prod per call costs more than the rest of a one-record decode


def _values(f: Feature, values: Any) -> np.ndarray:
    """Stored values as the declared dtype (what `Feature.decode`'s cast gives)."""
    if values is None:
        return np.zeros(0, f.numpy_dtype)
    if f.storage == "bytes":
        return values.to_numpy(zero_copy_only=False)
    arr = values.to_numpy()  # a read-only view of Arrow's buffer: the copy makes it ours
    return arr.copy() if arr.dtype == f.numpy_dtype else arr.astype(f.numpy_dtype)


def _context(f: Feature, col: pa.Array | None, n: int, name: Callable[[int], str]) -> Any:
    offsets, values, present = _lists(col, n)
    k = _value_count(f)
    if f.encoding == "values" and f.fixed and values is not None and len(values) == n * k and (
            n == 1 or (offsets[1:] - offsets[:-1] == k).all()):
        return _values(f, values).reshape(n, *f.shape)  # the common case: every record full
    counts = np.diff(offsets)
    if f.encoding != "values":
        if not present.all() or (counts != 1).any():
            i = int(np.flatnonzero(~present | (counts != 1))[0])
            raise RecordDecodeError(f"{name(i)}: feature {f.name!r} ({f.encoding}) holds "
                                    f"{int(counts[i])} values, expected 1")
        return _blobs(f, values, name)
    if not f.fixed:
        k = max(f.value_count, 1)  # values per outer row
        bad = np.flatnonzero(counts % k)
        if len(bad):
            raise RecordDecodeError(f"{name(int(bad[0]))}: feature {f.name!r} holds "
                                    f"{int(counts[bad[0]])} values, not a multiple of {k}")
        flat = _values(f, values).reshape(-1, *f.inner_shape)
        return np.split(flat, offsets[1:-1] // k)
    flat = _values(f, values)
    wrong = np.flatnonzero(present & (counts != k) | ~present & (f.default is None))
    if len(wrong):
        i = int(wrong[0])
        what = (f"holds {int(counts[i])} values, shape {list(f.shape)} needs {k}" if present[i]
                else "is missing and has no default")
        raise RecordDecodeError(f"{name(i)}: feature {f.name!r} {what}")
    default = f.storage_default or []
    out = np.empty((n, k), f.numpy_dtype)
    out[~present] = np.asarray(default, dtype=f.storage_numpy_dtype).astype(f.numpy_dtype)
    out[present] = flat.reshape(-1, k)
    return out.reshape(n, *f.shape)


def _sequence(f: Feature, col: pa.Array | None, n: int, name: Callable[[int], str]) -> list[Any]:
    """A list<list<...>> column (records -> steps -> values) -> n arrays [steps, *shape]."""
    rec_offsets, steps, _ = _lists(col, n)  # a missing feature list: 0 steps
    if steps is None or not len(steps):
        empty = np.zeros((0, *([d for d in f.shape if d >= 0] if f.fixed else [])),
                         f.numpy_dtype)
        return [empty if f.fixed or f.encoding != "values" else [] for _ in range(n)]
    step_offsets, values, _ = _lists(steps, len(steps))
    counts = np.diff(step_offsets)
    step_record = np.searchsorted(rec_offsets, np.arange(len(steps)), side="right") - 1
    if f.encoding != "values":
        bad = np.flatnonzero(counts != 1)
        if len(bad):
            raise RecordDecodeError(f"{name(int(step_record[bad[0]]))}: feature {f.name!r} "
                                    f"step {int(bad[0] - rec_offsets[step_record[bad[0]]])} "
                                    f"holds {int(counts[bad[0]])} blobs, expected 1")
        per_step = _blobs(f, values, lambda i: name(int(step_record[i])))
        return np.split(per_step, rec_offsets[1:-1])
    flat = _values(f, values)
    if f.fixed:
        k = f.value_count
        bad = np.flatnonzero(counts != k)
        if len(bad):
            raise RecordDecodeError(f"{name(int(step_record[bad[0]]))}: feature {f.name!r} has "
                                    f"a step of {int(counts[bad[0]])} values, shape "
                                    f"{list(f.shape)} needs {k}")
        return np.split(flat.reshape(-1, *f.shape), rec_offsets[1:-1])
    k = max(f.value_count, 1)
    bad = np.flatnonzero(counts % k)
    if len(bad):
        raise RecordDecodeError(f"{name(int(step_record[bad[0]]))}: feature {f.name!r} has a "
                                f"step of {int(counts[bad[0]])} values, not a multiple of {k}")
    per_step = [v.reshape(-1, *f.inner_shape) for v in np.split(flat, step_offsets[1:-1])]
    return [per_step[a:b] for a, b in zip(rec_offsets[:-1].tolist(), rec_offsets[1:].tolist(),
                                          strict=True)]


def _blobs(f: Feature, blobs: Any, name: Callable[[int], str]) -> np.ndarray:
    """One raw/png/jpeg blob per row -> array [rows, *shape] of the declared dtype."""
    rows = len(blobs)
    if f.encoding == "raw":
        size = f.raw_record_bytes
        buffers = blobs.buffers()
        offsets = np.frombuffer(buffers[1], np.int64)[blobs.offset: blobs.offset + rows + 1]
        bad = np.flatnonzero(np.diff(offsets) != size)
        if len(bad):
            raise RecordDecodeError(f"{name(int(bad[0]))}: feature {f.name!r} (raw) holds "
                                    f"{int(np.diff(offsets)[bad[0]])} bytes, shape "
                                    f"{list(f.shape)} of {f.dtype} needs {size}")
        if not rows:
            return np.zeros((0, *f.shape), f.numpy_dtype)
        data = np.frombuffer(buffers[2], np.uint8)[int(offsets[0]): int(offsets[-1])]
        little = np.dtype(f.dtype).newbyteorder("<")
        return data.view(little).astype(f.numpy_dtype).reshape(rows, *f.shape)
    variable = f.variable_image
    out: Any = [] if variable else np.empty((rows, *f.shape), f.numpy_dtype)
    for i, blob in enumerate(blobs.to_pylist()):
        try:
            pixels = _image(f, blob)
        except (OSError, ValueError, SyntaxError) as e:  # Pillow's errors for broken images
            raise RecordDecodeError(f"{name(i)}: feature {f.name!r}: cannot decode the "
                                    f"{f.encoding} image: {e}") from e
        if variable:
            out.append(pixels)
        else:
            out[i] = pixels
    return out


def _image(f: Feature, blob: bytes) -> np.ndarray:
    """One PNG/JPEG as `tf.io.decode_png/decode_jpeg(channels=C)` gives it."""
    from PIL import Image  # noqa: PLC0415 - only for image features

    channels = f.shape[-1]
    with Image.open(io.BytesIO(blob)) as img:
        if f.encoding == "jpeg" and channels == 1:
            img.draft("L", img.size)  # libjpeg's own colour -> grey, as TensorFlow asks it
        if img.mode in ("I;16", "I;16B", "I;16L", "I") and f.dtype == "uint16" and channels == 1:
            pixels = np.asarray(img).astype(np.uint16)
        elif img.mode in ("I;16", "I;16B", "I;16L", "I"):
            # 16-bit grey as uint8 (and grey -> RGB[A]): the high byte, as libpng's strip_16
            grey = (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)
            pixels = np.repeat(grey[..., None], channels, axis=-1)
            if channels == 4:
                pixels[..., 3] = 255
        else:
            pixels = np.asarray(img.convert(_PIL_MODES[channels]))
            if f.dtype == "uint16":
                pixels = pixels.astype(np.uint16) * 257
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if pixels.shape[-1] != f.shape[-1] or not f.variable_image and pixels.shape != tuple(f.shape):
        raise ValueError(f"the image is {'x'.join(map(str, pixels.shape))}, shape "
                         f"{list(f.shape)} expected")
    return pixels


def _offsets_with_nulls(col: pa.Array, null: pa.Array) -> pa.Array:
    """List offsets where the struct row is null (no feature_lists) counts as 0 steps."""
    offsets = col.offsets.to_numpy().copy()
    counts = np.diff(offsets)
    counts[null.to_numpy(zero_copy_only=False)] = 0
    return pa.array(np.concatenate([[offsets[0]], offsets[0] + np.cumsum(counts)]), pa.int64())


# ---- protobuf classes for tf.train.SequenceExample, in a private pool -------------------------
def _sequence_example_class() -> Any:
    """tf.train.SequenceExample's wire layout as a protobuf class built here (field numbers
    from tensorflow/core/example/{feature,example}.proto), in its own descriptor pool, so it
    never clashes with TensorFlow's classes in a process that also imports TensorFlow."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: PLC0415

    fd = descriptor_pb2.FileDescriptorProto(name="etl_sequence_example.proto",
                                            package="etl_wire", syntax="proto3")
    t = descriptor_pb2.FieldDescriptorProto
    repeated, optional = t.LABEL_REPEATED, t.LABEL_OPTIONAL

    def message(name: str, fields: list[tuple[str, int, int, int, str]],
                oneof: bool = False) -> descriptor_pb2.DescriptorProto:
        msg = fd.message_type.add(name=name)
        if oneof:
            msg.oneof_decl.add(name="kind")
        for field_name, number, label, ftype, type_name in fields:
            field = msg.field.add(name=field_name, number=number, label=label, type=ftype)
            if type_name:
                field.type_name = type_name
            if oneof:
                field.oneof_index = 0
        return msg

    def map_of(msg: descriptor_pb2.DescriptorProto, field: str, entry: str, value: str) -> None:
        nested = msg.nested_type.add(name=entry)
        nested.options.map_entry = True
        nested.field.add(name="key", number=1, label=optional, type=t.TYPE_STRING)
        nested.field.add(name="value", number=2, label=optional, type=t.TYPE_MESSAGE,
                         type_name=value)
        msg.field.add(name=field, number=1, label=repeated, type=t.TYPE_MESSAGE,
                      type_name=f".etl_wire.{msg.name}.{entry}")

    message("BytesList", [("value", 1, repeated, t.TYPE_BYTES, "")])
    message("FloatList", [("value", 1, repeated, t.TYPE_FLOAT, "")])
    message("Int64List", [("value", 1, repeated, t.TYPE_INT64, "")])
    message("Feature", [("bytes_list", 1, optional, t.TYPE_MESSAGE, ".etl_wire.BytesList"),
                        ("float_list", 2, optional, t.TYPE_MESSAGE, ".etl_wire.FloatList"),
                        ("int64_list", 3, optional, t.TYPE_MESSAGE, ".etl_wire.Int64List")],
            oneof=True)
    map_of(message("Features", []), "feature", "FeatureEntry", ".etl_wire.Feature")
    message("FeatureList", [("feature", 1, repeated, t.TYPE_MESSAGE, ".etl_wire.Feature")])
    map_of(message("FeatureLists", []), "feature_list", "FeatureListEntry",
           ".etl_wire.FeatureList")
    message("SequenceExample", [
        ("context", 1, optional, t.TYPE_MESSAGE, ".etl_wire.Features"),
        ("feature_lists", 2, optional, t.TYPE_MESSAGE, ".etl_wire.FeatureLists")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("etl_wire.SequenceExample"))
