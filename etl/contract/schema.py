"""The data contract: a YAML schema file read once into feature objects.

Each `Feature` owns every direction of one feature: how a raw column becomes its stored
lists (`to_storage`), which `tf.io` parse feature reads it back (`parse_feature`), and how
the parsed tensor is restored to the declared dtype and shape (`decode`). The encoder, the
reader and the TFMD export all derive from these objects, so writer and reader cannot drift.

TensorFlow is imported lazily: loading and checking a schema, and encoding, never pay for it.

Feature keys: `dtype`, `shape`, `encoding` (values | raw | png | jpeg), `default`, `required`,
`source`, `vocabulary` / `vocabulary_file`, `oov_id`, `representation` (ragged | sparse),
`description`, and `allow_nan` (float dtypes only, default false): NaN and +-Inf are
rejected as `nan_not_allowed` unless the feature says `allow_nan: true`, because a NaN that
slips into training data poisons every gradient it touches, and a float32 overflow (1e39)
silently becomes Inf. `default: nan` (YAML `.nan` or the text nan/NaN) needs `allow_nan`.

`dtype: date` and `dtype: timestamp` (with `unit`, `timezone`, `format`; etl.contract.dates)
are int64 features underneath: `Feature.dtype` is "int64" and `Feature.time` says how text
and Arrow dates become that integer, so every reader and statistic treats them as int64.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from etl.base.errors import SchemaError
from etl.base.yaml_load import MAX_BYTES, load_yaml
from etl.contract.dates import TimeSpec, parse_one, time_spec
from etl.formats.kinds import STORAGE_KINDS
from etl.storage import fs

KINDS = ("example", "sequence_example")
ENCODINGS = ("values", "raw", "png", "jpeg")
REPRESENTATIONS = ("ragged", "sparse")

_ALIASES = {
    "string": "bytes", "str": "bytes", "binary": "bytes", "float": "float32",
    "double": "float64", "int": "int64", "half": "float16", "boolean": "bool",
}
_INT_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOAT_DTYPES = ("float16", "float32", "float64")
DTYPES = (*_INT_DTYPES, *_FLOAT_DTYPES, "bytes")
TIME_DTYPES = ("date", "timestamp")  # stored as int64 (etl.contract.dates)
# tf.io.decode_raw's out_type list (TF 2.21): uint32/uint64 are not decodable from raw bytes.
_RAW_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
               "float16", "float32", "float64")
_FEATURE_KEYS = {"dtype", "shape", "encoding", "default", "required", "source", "vocabulary",
                 "vocabulary_file", "oov_id", "representation", "description", "allow_nan",
                 "resize", "pad", "unit", "timezone", "format"}
_IMAGE_ENCODINGS = ("png", "jpeg")
_NAN_TEXT = ("nan", "NaN", "NAN")
_SECTIONS = ("features", "context", "sequence")
VOCABULARY_MAX_CHARS = 256 * 2**20  # 10M labels of 25 characters; /dev/zero is refused


def text_number_type(dtype: str) -> str:
    """The Arrow type a number feature's text is parsed into: the declared float32 directly
    (one rounding of the decimal, as tf.io.decode_csv and strtof give: through float64 a
    decimal just past a float32 midpoint rounds twice and can land one unit lower), float64
    for float16 (Arrow parses no half floats), int64 for every integer dtype."""
    if dtype == "float32":
        return "float32"
    return "float64" if dtype in _FLOAT_DTYPES else "int64"


def _tf() -> Any:
    import tensorflow as tf  # noqa: PLC0415 - heavy, only on the reading side

    return tf


@dataclass(frozen=True)
class Feature:
    """One declared feature. `shape` is per record (per step for sequence features)."""

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    encoding: str = "values"
    default: Any = None
    required: bool = True
    source: tuple[str, ...] = ()
    vocabulary: tuple[str, ...] = ()
    oov_id: int | None = None
    representation: str = "ragged"
    is_sequence: bool = False
    description: str = ""
    allow_nan: bool = False
    resize: tuple[int, int] | None = None  # png/jpeg: every image resized to [height, width]
    pad: tuple[int, int] | None = None  # png/jpeg: every image zero-padded to [height, width]
    time: TimeSpec | None = None  # date / timestamp features (dtype is then int64)

    # ---- derived facts -------------------------------------------------------------
    @property
    def storage(self) -> str:
        """Which tf.train list holds the values: 'int64', 'float' or 'bytes'."""
        if self.encoding != "values" or self.dtype == "bytes":
            return "bytes"
        return "float" if self.dtype in _FLOAT_DTYPES else "int64"

    @property
    def numpy_dtype(self) -> np.dtype:
        """The declared dtype as NumPy sees it (object for bytes)."""
        return np.dtype(object) if self.dtype == "bytes" else np.dtype(self.dtype)

    @property
    def storage_numpy_dtype(self) -> np.dtype:
        return STORAGE_KINDS[self.storage].numpy

    @property
    def fixed(self) -> bool:
        """True when every record (or step) has exactly `value_count` values."""
        return all(d >= 0 for d in self.shape)

    @property
    def variable_image(self) -> bool:
        """A png/jpeg feature of shape [null, null, C]: each record holds one encoded image of
        its own height and width, decoded by the readers to its own size."""
        return (self.encoding in _IMAGE_ENCODINGS and len(self.shape) == 3
                and self.shape[0] == -1 and self.shape[1] == -1)

    @property
    def value_count(self) -> int:
        """Values per record (per step) for fixed shapes; per outer row when ragged."""
        return int(np.prod([d for d in self.shape if d >= 0], dtype=np.int64))

    @property
    def inner_shape(self) -> tuple[int, ...]:
        """Shape below the ragged outer dimension (the whole shape when fixed)."""
        return self.shape[1:] if not self.fixed else self.shape

    @property
    def sources(self) -> tuple[str, ...]:
        return self.source or (self.name,)

    @property
    def vocabulary_index(self) -> dict[str, int]:
        return {v: i for i, v in enumerate(self.vocabulary)}

    @property
    def raw_record_bytes(self) -> int:
        return self.value_count * np.dtype(self.dtype).itemsize

    @property
    def storage_default(self) -> list[Any] | None:
        """The default as a flat storage-typed list (the form FixedLenFeature and TFMD use)."""
        if self.default is None:
            return None
        value = self.default
        if self.vocabulary and isinstance(value, str):
            value = self.vocabulary_index[value]
        if self.storage == "bytes":
            value = value.encode() if isinstance(value, str) else bytes(value)
        elif self.storage == "float":
            value = float(value)
        else:
            value = int(value)
        return [value] * self.value_count

    # ---- the reading side ------------------------------------------------------------
    def parse_feature(self) -> Any:
        """The `tf.io` feature that parses this feature from a serialized proto."""
        tf = _tf()
        storage_dtype = getattr(tf, STORAGE_KINDS[self.storage].tf_dtype)
        if self.encoding != "values":
            if self.is_sequence:
                return tf.io.FixedLenSequenceFeature([], tf.string, allow_missing=True)
            return tf.io.FixedLenFeature([], tf.string)
        if self.fixed:
            if self.is_sequence:
                return tf.io.FixedLenSequenceFeature(
                    list(self.shape), storage_dtype, allow_missing=True
                )
            return tf.io.FixedLenFeature(
                list(self.shape), storage_dtype, default_value=self.storage_default
            )
        if self.representation == "sparse":
            return tf.io.VarLenFeature(storage_dtype)
        return tf.io.RaggedFeature(
            dtype=storage_dtype,
            value_key=self.name,
            partitions=[tf.io.RaggedFeature.UniformRowLength(d) for d in self.shape[1:]],
            row_splits_dtype=tf.int64,
        )

    def decode(self, parsed: Any, lengths: Any = None) -> Any:
        """Restore the declared dtype and shape of a batch parsed with `parse_feature`.

        `lengths` are the per-record step counts `parse_sequence_example` returns for
        FixedLenSequenceFeature; with them, padded steps become a RaggedTensor.
        """
        tf = _tf()
        value = parsed
        if self.is_sequence and self.fixed and lengths is not None:
            value = tf.RaggedTensor.from_tensor(parsed, lengths=lengths)
        if self.encoding == "values":
            if self.dtype == "bytes" or self.storage_numpy_dtype == self.numpy_dtype:
                return value
            return tf.cast(value, tf.as_dtype(self.dtype))
        if isinstance(value, tf.RaggedTensor):
            return value.with_flat_values(self._decode_blobs(value.flat_values))
        return self._decode_blobs(value)

    def _decode_blobs(self, blobs: Any) -> Any:
        """A vector of raw/png/jpeg blobs -> tensor [N, *shape] of the declared dtype."""
        tf = _tf()
        out_type = tf.as_dtype(self.dtype)
        if self.encoding == "raw":
            flat = tf.io.decode_raw(blobs, out_type, little_endian=True)
            return tf.reshape(flat, [-1, *self.shape])
        channels = self.shape[-1]
        if self.encoding == "png":
            def decode_one(b: Any) -> Any:
                return tf.io.decode_png(b, channels=channels, dtype=out_type)
        else:
            def decode_one(b: Any) -> Any:
                return tf.io.decode_jpeg(b, channels=channels, dct_method="INTEGER_ACCURATE")
        if self.variable_image:
            # each image keeps its own size: a RaggedTensor [batch, (height), (width), C]
            def ragged_one(b: Any) -> Any:
                return tf.RaggedTensor.from_tensor(decode_one(b), ragged_rank=1,
                                                   row_splits_dtype=tf.int64)

            return tf.map_fn(ragged_one, blobs, fn_output_signature=tf.RaggedTensorSpec(
                [None, None, channels], out_type, ragged_rank=1, row_splits_dtype=tf.int64))
        images = tf.map_fn(
            decode_one, blobs, fn_output_signature=tf.TensorSpec([None, None, channels], out_type)
        )
        return tf.ensure_shape(images, [None, *self.shape])

    # ---- description -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape)}
        if self.time is not None:
            out.update(self.time.to_dict())
        if self.encoding != "values":
            out["encoding"] = self.encoding
        if self.default is not None:
            # a NaN default as the text "nan": float("nan") != itself, which would make
            # two loads of one schema differ
            nan = isinstance(self.default, float) and self.default != self.default
            out["default"] = "nan" if nan else self.default
        elif not self.required:
            out["required"] = False
        if self.source and self.source != (self.name,):
            out["source"] = self.source[0] if len(self.source) == 1 else list(self.source)
        if self.vocabulary:
            out["vocabulary"] = list(self.vocabulary)
        if self.oov_id is not None:
            out["oov_id"] = self.oov_id
        if self.representation != "ragged":
            out["representation"] = self.representation
        if self.description:
            out["description"] = self.description
        if self.allow_nan:
            out["allow_nan"] = True
        if self.resize:
            out["resize"] = list(self.resize)
        if self.pad:
            out["pad"] = list(self.pad)
        return out


@dataclass(frozen=True)
class Schema:
    """A dataset's record layout: `context` features, plus `sequence` features for SequenceExample.

    For `kind: example` all features live in `context`.
    """

    name: str
    kind: str
    context: tuple[Feature, ...]
    sequence: tuple[Feature, ...] = ()
    path: str | None = field(default=None, compare=False)

    @property
    def features(self) -> tuple[Feature, ...]:
        return self.context + self.sequence

    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(f"schema {self.name!r} has no feature {name!r}")

    @property
    def source_columns(self) -> list[str]:
        """Every raw column the encoder reads, in declaration order."""
        seen: dict[str, None] = {}
        for f in self.features:
            for s in f.sources:
                seen.setdefault(s, None)
        return list(seen)

    def numeric_columns(self) -> dict[str, str]:
        """Raw columns that each hold one number per record for exactly one numeric feature:
        column -> "float32", "float64" (float16 features) or "int64": the type the careful
        path's text parsing gives (etl.contract.columns, `_parse_text`). Text sources may parse
        these up front (the CSV fast path); the encoder then sees the same Arrow numbers."""
        uses: dict[str, list[Feature]] = {}
        for f in self.features:
            for column in f.sources:
                uses.setdefault(column, []).append(f)
        out: dict[str, str] = {}
        for column, features in uses.items():
            f = features[0]
            scalar = f.shape == () or len(f.sources) == int(np.prod(f.shape, dtype=np.int64))
            if (len(features) > 1 or f.is_sequence or f.encoding != "values" or f.vocabulary
                    or f.dtype in ("bytes", "bool") or f.time is not None or not scalar):
                continue
            out[column] = text_number_type(f.dtype)
        return out

    def text_columns(self) -> list[str]:
        """Raw columns that must reach the encoder as the source's own text: those a
        `bytes` feature stores, and those a `date`/`timestamp` feature parses (its zone rule
        needs to see whether the text had an offset). A reader that infers types (pyarrow.json
        turns "2010-01-01T12:00:00+02:00" into a naive UTC timestamp) reads these as strings."""
        seen: dict[str, None] = {}
        for f in self.features:
            if f.dtype == "bytes" and f.encoding == "values" or f.time is not None:
                for column in f.sources:
                    seen.setdefault(column, None)
        return list(seen)

    def parse_spec(self) -> Any:
        """`tf.io.parse_example` features, or the (context, sequence) pair for SequenceExample."""
        context = {f.name: f.parse_feature() for f in self.context}
        if self.kind == "example":
            return context
        return context, {f.name: f.parse_feature() for f in self.sequence}

    def parse_and_decode(self, serialized: Any) -> dict[str, Any]:
        """A batch (vector) of serialized protos -> dict of decoded tensors, all vectorised."""
        tf = _tf()
        if self.kind == "example":
            parsed = tf.io.parse_example(serialized, self.parse_spec())
            return {f.name: f.decode(parsed[f.name]) for f in self.context}
        context_spec, sequence_spec = self.parse_spec()
        context, sequence, lengths = tf.io.parse_sequence_example(
            serialized, context_features=context_spec, sequence_features=sequence_spec
        )
        out = {f.name: f.decode(context[f.name]) for f in self.context}
        for f in self.sequence:
            out[f.name] = f.decode(sequence[f.name], lengths.get(f.name))
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "example":
            out["features"] = {f.name: f.to_dict() for f in self.context}
        else:
            out["context"] = {f.name: f.to_dict() for f in self.context}
            out["sequence"] = {f.name: f.to_dict() for f in self.sequence}
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def sha256(self) -> str:
        """Fingerprint of the contract (not of the file's formatting or comments)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()


# ---- loading and validation ------------------------------------------------------------
def load_schema(path: str | os.PathLike[str]) -> Schema:
    """Read and validate a schema YAML file (local path or any remote path etl.storage.fs reads)."""
    path = os.fspath(path)
    text = fs.read_text_as(path, "schema file", SchemaError, limit=4 * MAX_BYTES)  # bounded: /dev/zero
    doc = load_yaml(text, path, "schema file", SchemaError)
    try:
        return schema_from_dict(doc, path=path)
    except _DeclaredTwice as e:
        lines = _declared_at(text, e.names[0])
        if len(lines) < 2:
            raise
        raise SchemaError(f"{path}:{lines[1]}: feature name(s) {e.names} declared twice "
                          f"({e.names[0]!r} first at line {lines[0]}); give each feature its "
                          "own name") from None


class _DeclaredTwice(SchemaError):
    """Two features of one schema share a name (`names`, sorted): `load_schema` adds lines."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


def _declared_at(text: str, name: str) -> list[int]:
    """1-based lines of the keys declaring feature `name` (under features/context/sequence),
    in file order; keys compared as the name they make (`1` and `"1"` are both '1'). Only
    on the error path: the text already parsed, so this composes it again (no objects built
    beyond the keys)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        root = loader.get_single_node()
        if not isinstance(root, yaml.MappingNode):
            return []
        found = []
        for key, section in root.value:
            if not (isinstance(key, yaml.ScalarNode) and key.value in _SECTIONS
                    and isinstance(section, yaml.MappingNode)):
                continue
            for feature, _ in section.value:
                if (isinstance(feature, yaml.ScalarNode)
                        and str(loader.construct_object(feature)) == name):
                    found.append(feature.start_mark.line + 1)
        return sorted(found)
    except (yaml.YAMLError, ValueError, TypeError):
        return []
    finally:
        loader.dispose()


def schema_from_dict(doc: Any, path: str | None = None) -> Schema:
    where = path or "<schema>"
    if not isinstance(doc, Mapping):
        raise SchemaError(f"{where}: a schema must be a mapping, got {type(doc).__name__}")
    unknown = set(doc) - {"name", "kind", "features", "context", "sequence", "description"}
    if unknown:
        raise SchemaError(f"{where}: unknown top-level key(s) {sorted(unknown)}")
    kind = doc.get("kind", "example")
    if kind not in KINDS:
        raise SchemaError(f"{where}: kind must be one of {list(KINDS)}, got {kind!r}")
    name = str(doc.get("name") or (os.path.splitext(fs.basename(path))[0] if path else "data"))
    base_dir = fs.dirname(path) if path else "."  # vocabulary files are relative to the schema
    if kind == "example":
        if "sequence" in doc or "context" in doc:
            raise SchemaError(f"{where}: kind 'example' takes 'features', not context/sequence")
        context = _features(doc.get("features"), "features", False, where, base_dir)
        sequence: tuple[Feature, ...] = ()
    else:
        if "features" in doc:
            raise SchemaError(f"{where}: kind 'sequence_example' takes 'context' and 'sequence'")
        # context is optional: a SequenceExample may carry feature lists only
        context = (_features(doc["context"], "context", False, where, base_dir)
                   if doc.get("context") else ())
        sequence = _features(doc.get("sequence"), "sequence", True, where, base_dir)
    names = [f.name for f in context + sequence]
    seen: set[str] = set()  # a set, not names.count per name: 100k features stay linear
    dupes = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
    if dupes:
        raise _DeclaredTwice(f"{where}: feature name(s) {dupes} declared twice", dupes)
    if not names:
        raise SchemaError(f"{where}: no features declared")
    return Schema(name=name, kind=kind, context=context, sequence=sequence, path=path)


def _features(
    section: Any, label: str, is_sequence: bool, where: str, base_dir: str
) -> tuple[Feature, ...]:
    if not isinstance(section, Mapping) or not section:
        raise SchemaError(f"{where}: '{label}' must be a non-empty mapping of feature name -> spec")
    return tuple(
        _feature(str(n), spec, is_sequence, where, base_dir) for n, spec in section.items()
    )


def _feature(name: str, spec: Any, is_sequence: bool, where: str, base_dir: str) -> Feature:
    def fail(msg: str) -> SchemaError:
        return SchemaError(f"{where}: feature {name!r}: {msg}")

    if not isinstance(spec, Mapping):
        raise fail(f"spec must be a mapping, got {spec!r}")
    unknown = set(spec) - _FEATURE_KEYS
    if unknown:
        raise fail(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_FEATURE_KEYS)}")
    if "dtype" not in spec:
        raise fail("missing 'dtype'")
    dtype, time = _dtype_and_time(spec, fail)
    encoding = str(spec.get("encoding", "values"))
    if encoding not in ENCODINGS:
        raise fail(f"unknown encoding {encoding!r}; expected one of {list(ENCODINGS)}")
    image = encoding in _IMAGE_ENCODINGS or any(spec.get(k) is not None for k in ("resize", "pad"))
    shape = _shape(spec.get("shape", []), fail, image=image)
    shape, resize, pad = _image_size_rule(spec, shape, encoding, is_sequence, fail)
    representation = str(spec.get("representation", "ragged"))
    if representation not in REPRESENTATIONS:
        raise fail(f"representation must be one of {list(REPRESENTATIONS)}, got {representation!r}")
    fixed = all(d >= 0 for d in shape)
    _check_encoding(dtype, shape, encoding, representation, is_sequence, fail)

    allow_nan = _allow_nan(spec, dtype, fail)
    vocabulary, oov_id = _labels(spec, dtype, encoding, fail, base_dir)

    default = _default_value(spec.get("default"), dtype, allow_nan, time, fail, vocabulary)
    required = bool(spec.get("required", default is None))
    _check_default(default, required, dtype, encoding, fixed, is_sequence, vocabulary, allow_nan,
                   fail)

    source_t = _source_columns(spec.get("source", name), shape, fixed, fail)

    return Feature(
        name=name, dtype=dtype, shape=shape, encoding=encoding, default=default,
        required=required, source=source_t, vocabulary=vocabulary,
        oov_id=None if oov_id is None else int(oov_id), representation=representation,
        is_sequence=is_sequence, description=str(spec.get("description", "")),
        allow_nan=allow_nan, resize=resize, pad=pad, time=time,
    )


def _dtype_and_time(spec: Mapping[str, Any], fail: Any) -> tuple[str, TimeSpec | None]:
    """The stored dtype (an alias resolved; a date or timestamp is int64) and the TimeSpec of
    a date or timestamp."""
    dtype = _ALIASES.get(str(spec["dtype"]), str(spec["dtype"]))
    time = None
    if dtype in TIME_DTYPES:
        time = time_spec(dtype, spec, fail)
        if spec.get("encoding", "values") != "values" or "vocabulary" in spec or (
                "vocabulary_file" in spec):
            raise fail(f"a {dtype} feature is stored as int64 values: no encoding or vocabulary")
        dtype = "int64"
    elif "unit" in spec or "timezone" in spec or "format" in spec:
        raise fail("unit, timezone and format belong to dtype: date or dtype: timestamp")
    if dtype not in DTYPES:
        raise fail(f"unknown dtype {spec['dtype']!r}; expected one of "
                   f"{[*DTYPES, *TIME_DTYPES]}")
    return dtype, time


def _allow_nan(spec: Mapping[str, Any], dtype: str, fail: Any) -> bool:
    allow_nan = spec.get("allow_nan", False)
    if not isinstance(allow_nan, bool):
        raise fail(f"allow_nan must be true or false, got {allow_nan!r}")
    if allow_nan and dtype not in _FLOAT_DTYPES:
        raise fail(f"allow_nan applies to float dtypes only, got {dtype!r}")
    return allow_nan


def _labels(spec: Mapping[str, Any], dtype: str, encoding: str, fail: Any,
            base_dir: str) -> tuple[tuple[str, ...], Any]:
    """(vocabulary, oov_id): labels of an integer feature with encoding: values."""
    vocabulary = _vocabulary(spec, fail, base_dir)
    if vocabulary and dtype not in _INT_DTYPES[1:]:
        raise fail(f"a vocabulary maps labels to integer ids; dtype must be an integer, got {dtype!r}")
    if vocabulary and encoding != "values":
        raise fail("a vocabulary needs encoding: values")
    oov_id = spec.get("oov_id")
    if oov_id is not None and not vocabulary:
        raise fail("oov_id needs a vocabulary")
    return vocabulary, oov_id


def _default_value(default: Any, dtype: str, allow_nan: bool, time: TimeSpec | None,
                   fail: Any, vocabulary: tuple[str, ...] = ()) -> Any:
    """`default:` as the value stored: the text nan/NaN as float NaN (float features with
    allow_nan only), a date/timestamp default given as text as its stored integer."""
    if isinstance(default, str) and default in _NAN_TEXT and dtype != "bytes" and not vocabulary:
        if dtype not in _FLOAT_DTYPES:
            raise fail(f"default {default!r} applies to float features only (dtype is {dtype})")
        if not allow_nan:
            raise fail(f"default {default!r} stores NaN: add allow_nan: true to the feature "
                       "(NaN is rejected as nan_not_allowed otherwise), or choose a number")
        return float("nan")
    if time is not None and isinstance(default, str):
        try:
            return parse_one(time, default)
        except ValueError as e:
            raise fail(f"default: {e}") from None
    if time is not None and isinstance(default, (dt.date, dt.datetime)):
        return parse_one(time, default.isoformat())
    return default


def _check_encoding(dtype: str, shape: tuple[int, ...], encoding: str, representation: str,
                    is_sequence: bool, fail: Any) -> None:
    """What each encoding and representation needs of the dtype and shape."""
    fixed = all(d >= 0 for d in shape)
    if encoding == "values":
        if dtype == "float64":
            raise fail("float64 values would be rounded to float32 by tf.train.FloatList; "
                       "declare dtype float32 or use encoding: raw")
        if dtype == "uint64":
            raise fail("uint64 values do not fit tf.train.Int64List; use encoding: raw with a "
                       "smaller dtype or int64")
    else:
        variable_image = (encoding in _IMAGE_ENCODINGS and len(shape) == 3
                          and shape[0] == -1 and shape[1] == -1)
        if variable_image and is_sequence:
            raise fail("images of any size (shape [null, null, C]) are context features only; "
                       "give a sequence feature a fixed shape, or 'resize'/'pad'")
        if not fixed and not variable_image:
            raise fail(f"encoding {encoding!r} needs a fully defined shape, got {list(shape)}")
        if encoding == "raw" and dtype not in _RAW_DTYPES:
            raise fail(f"dtype {dtype!r} cannot be decoded from raw bytes; "
                       f"raw supports {list(_RAW_DTYPES)}")
        if encoding in ("png", "jpeg"):
            allowed = ("uint8", "uint16") if encoding == "png" else ("uint8",)
            # tf.io.decode_png cannot return 2 channels (grey+alpha): 1, 3 or 4 only
            channels = (1, 3, 4) if encoding == "png" else (1, 3)
            if dtype not in allowed:
                raise fail(f"{encoding} images must be dtype {' or '.join(allowed)}, got {dtype!r}")
            if len(shape) != 3 or shape[-1] not in channels:
                raise fail(f"{encoding} images need shape [height, width, channels] with channels "
                           f"in {list(channels)}, got {list(shape)}")
    if representation == "sparse" and (fixed or len(shape) != 1 or is_sequence):
        raise fail("representation: sparse (VarLenFeature) needs shape [-1] on a context feature")


def _check_default(default: Any, required: bool, dtype: str, encoding: str, fixed: bool,
                   is_sequence: bool, vocabulary: tuple[str, ...] | None, allow_nan: bool,
                   fail: Any) -> None:
    """A default makes a feature optional; only fixed-shape context values can have one."""
    if default is not None and required:
        raise fail("a feature with a default cannot be required")
    if default is not None:
        if encoding != "values" or not fixed or is_sequence:
            raise fail("defaults are supported for fixed-shape context values only")
        if vocabulary and isinstance(default, str) and default not in vocabulary:
            raise fail(f"default {default!r} is not in the vocabulary")
        if dtype == "bytes" and not isinstance(default, (str, bytes)):
            raise fail(f"default for a bytes feature must be a string, got {default!r}")
        if dtype != "bytes" and not vocabulary and not isinstance(default, (int, float, bool)):
            raise fail(f"default for a {dtype} feature must be a number, got {default!r}")
        if isinstance(default, float) and not np.isfinite(default) and not allow_nan:
            raise fail(f"default {default!r} is not finite; set allow_nan: true to allow it")
    elif not required and fixed and not is_sequence:
        raise fail("an optional fixed-shape feature needs a 'default' (what a missing value reads as)")
    if not required and encoding != "values":
        raise fail(f"encoding {encoding!r} features must be required")


def _source_columns(source: Any, shape: tuple[int, ...], fixed: bool, fail: Any) -> tuple[str, ...]:
    """`source:` as a tuple of column names (several pack into one vector)."""
    if isinstance(source, str):
        source_t: tuple[str, ...] = (source,)
    elif isinstance(source, Sequence) and source and all(isinstance(s, str) for s in source):
        source_t = tuple(source)
        if len(source_t) > 1 and (not fixed or len(shape) != 1 or shape[0] != len(source_t)):
            raise fail(f"packing {len(source_t)} source columns needs shape [{len(source_t)}], "
                       f"got {list(shape)}")
    else:
        raise fail(f"source must be a column name or a list of names, got {source!r}")
    return source_t


def _shape(raw: Any, fail: Any, image: bool = False) -> tuple[int, ...]:
    """The declared shape; -1 (or null) only first, except png/jpeg images (`image`), which
    may be [null, null, channels] (any height and width)."""
    if isinstance(raw, int):
        raw = [raw]
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise fail(f"shape must be a list of ints, got {raw!r}")
    dims: list[int] = []
    for i, d in enumerate(raw):
        if d is None:
            d = -1
        if not isinstance(d, int) or isinstance(d, bool) or d < -1 or d == 0:
            raise fail(f"bad shape {list(raw)}: dimension {i} is {d!r}; use a positive int, "
                       "or -1 (variable) for the first dimension")
        any_size = image and i == 1 and len(raw) == 3 and dims[0] == -1
        if d == -1 and i != 0 and not any_size:
            hint = "; png/jpeg images of any size are [null, null, channels]" if image else ""
            raise fail(f"bad shape {list(raw)}: only the first dimension may be variable "
                       f"(-1){hint}")
        dims.append(d)
    return tuple(dims)


def _image_size_rule(spec: Mapping[str, Any], shape: tuple[int, ...], encoding: str,
                     is_sequence: bool, fail: Any
                     ) -> tuple[tuple[int, ...], tuple[int, int] | None, tuple[int, int] | None]:
    """`resize: [H, W]` or `pad: [H, W]`: images of any size stored at one fixed size, by a
    rule the schema names (etl.contract.image_fit). The shape may say [null, null, C] (it
    becomes [H, W, C]) or [H, W, C] itself; anything else disagrees."""
    keys = [k for k in ("resize", "pad") if spec.get(k) is not None]
    if not keys:
        return shape, None, None
    if len(keys) == 2:
        raise fail("give 'resize' or 'pad', not both")
    key = keys[0]
    if encoding not in _IMAGE_ENCODINGS:
        raise fail(f"'{key}' applies to images stored as png or jpeg; add 'encoding: png' "
                   f"(got encoding {encoding!r})")
    if is_sequence:
        raise fail(f"'{key}' applies to context features only")
    raw = spec[key]
    if (not isinstance(raw, Sequence) or isinstance(raw, str) or len(raw) != 2
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in raw)):
        raise fail(f"'{key}' must be [height, width] in pixels (positive ints), got {raw!r}")
    size = (int(raw[0]), int(raw[1]))
    if len(shape) == 3 and shape[0] == -1 and shape[1] == -1:
        shape = (*size, shape[2])
    elif len(shape) == 3 and tuple(shape[:2]) != size:
        raise fail(f"'{key}: {list(size)}' and shape {list(shape)} disagree; write shape "
                   f"[{size[0]}, {size[1]}, {shape[2]}] or [null, null, {shape[2]}]")
    return shape, (size if key == "resize" else None), (size if key == "pad" else None)


def _vocabulary(spec: Mapping[str, Any], fail: Any, base_dir: str) -> tuple[str, ...]:
    vocab = spec.get("vocabulary")
    vocab_file = spec.get("vocabulary_file")
    if vocab is not None and vocab_file is not None:
        raise fail("give 'vocabulary' or 'vocabulary_file', not both")
    if vocab_file is not None:
        try:
            full = fs.resolve(base_dir, str(vocab_file))
            text = fs.read_text_as(full, "vocabulary_file", SchemaError, VOCABULARY_MAX_CHARS)
            vocab = [line for line in text.split("\n") if line.strip()]
        except ValueError as e:  # a relative path leaving the bucket
            raise fail(str(e)) from e
        except OSError as e:
            raise fail(f"cannot read vocabulary_file {full!r}: {fs.first_line(e)}") from e
    if vocab is None:
        return ()
    if isinstance(vocab, Mapping):
        ids = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in ids] != list(range(len(ids))):
            raise fail("a vocabulary mapping must assign ids 0..N-1 exactly once")
        vocab = [k for k, _ in ids]
    if not isinstance(vocab, Sequence) or isinstance(vocab, str) or not vocab:
        raise fail(f"vocabulary must be a non-empty list of labels, got {vocab!r}")
    labels = tuple(str(v) for v in vocab)
    if len(set(labels)) != len(labels):
        raise fail("vocabulary has duplicate labels")
    return labels
