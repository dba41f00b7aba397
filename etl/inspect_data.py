"""What the CLI's `spec` and `inspect` commands print.

`spec_text` shows the `tf.io` parse spec a schema gives. `inspect` prints the first records
of TFRecord files: decoded with the dataset's schema when a `schema.yaml` sits beside the
data (or one is given), else as `tf.train.Example` / `tf.train.SequenceExample` text.
TensorFlow is imported only inside the functions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from etl import fs
from etl.errors import EtlError
from etl.schema import Feature, Schema, load_schema
from etl.tfrecord import compression_of, read_file

SCHEMA_FILE = "schema.yaml"
MAX_TEXT_LINES = 60  # per record, for raw proto text
MAX_BYTES_SHOWN = 48  # per bytes value


class InspectError(EtlError, ValueError):
    """Nothing to inspect at the given paths."""


def spec_text(schema: Schema | str | os.PathLike[str]) -> str:
    """The schema's parse spec, one feature per line with what `decode` makes of it."""
    s = schema if isinstance(schema, Schema) else load_schema(schema)
    spec = s.parse_spec()
    where = f" ({s.path})" if s.path else ""
    lines = [f"# schema {s.name!r}, kind {s.kind}{where}"]
    if s.kind == "example":
        lines.append("# tf.io.parse_example(serialized, features)")
        lines += _spec_dict("features", spec, s.context)
    else:
        context, sequence = spec
        lines.append("# tf.io.parse_sequence_example(serialized, context_features, "
                     "sequence_features)")
        lines += _spec_dict("context_features", context, s.context)
        lines += _spec_dict("sequence_features", sequence, s.sequence)
    return "\n".join(lines)


def _spec_dict(label: str, spec: dict[str, Any], features: Sequence[Feature]) -> list[str]:
    lines = [f"{label} = {{"]
    for f in features:
        lines.append(f"    {f.name!r}: {spec[f.name]!r},  # -> {_decoded_desc(f)}")
    lines.append("}")
    return lines


def _decoded_desc(f: Feature) -> str:
    outer = ["batch", "steps"] if f.is_sequence else ["batch"]
    dims = outer + [str(d) if d >= 0 else "None" for d in f.shape]
    kind = ("SparseTensor" if f.representation == "sparse" and not f.fixed
            else "RaggedTensor" if f.is_sequence or not f.fixed else "Tensor")
    how = f", decoded from {f.encoding}" if f.encoding != "values" else ""
    vocab = f", ids of {len(f.vocabulary)} labels" if f.vocabulary else ""
    return f"{kind} {f.dtype}[{', '.join(dims)}]{how}{vocab}"


# ---- inspect -------------------------------------------------------------------------------------
def inspect(
    paths_or_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    limit: int = 5,
    schema: Schema | str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """Yield printable blocks: one header per file, then one block per record (`limit` in all).

    Decoded with `schema`, else with the `schema.yaml` beside the data, else shown as raw
    `tf.train.Example` (or `SequenceExample`) text. Compression is taken from the extension.
    """
    files, found_schema = _files_and_schema(paths_or_dir)
    if schema is not None:
        schema_obj: Schema | None = schema if isinstance(schema, Schema) else load_schema(schema)
    else:
        schema_obj = load_schema(found_schema) if found_schema else None
    if schema_obj is None:
        yield "# no schema.yaml beside the data: showing raw protos"
    else:
        yield f"# decoded with schema {schema_obj.name!r} ({schema_obj.path or 'given'})"
    shown = 0
    for path in files:
        if shown >= limit:
            break
        compression = compression_of(path)
        yield f"== {path}" + (f" ({compression})" if compression != "none" else "")
        for offset, data in read_file(path, compression):
            if shown >= limit:
                break
            head = f"-- record {shown} (offset {offset}, {len(data)} bytes)"
            body = _decoded(schema_obj, data) if schema_obj else _proto_text(data)
            yield head + "\n" + body
            shown += 1
    if shown == 0:
        yield "(no records)"


def _files_and_schema(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> tuple[list[str], str | None]:
    items = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [
        os.fspath(p) for p in paths
    ]
    files: list[str] = []
    schema_path: str | None = None
    for item in items:
        if fs.isdir(item):
            root = _dataset_root(item)
            found = _glob(fs.join(root, "*.tfrecord*"))
            if not found:
                raise InspectError(f"{item}: no *.tfrecord* files in this directory")
            files += found
            candidate = fs.join(root, SCHEMA_FILE)
        elif any(c in item for c in "*?["):
            try:
                found = _glob(item)
            except OSError as e:  # e.g. no such bucket
                raise InspectError(f"cannot list {item!r}: {str(e).strip().splitlines()[0]}") from e
            if not found:
                raise InspectError(f"no files match {item!r}")
            files += found
            candidate = fs.join(fs.dirname(found[0]), SCHEMA_FILE)
        else:
            if not fs.exists(item):
                raise InspectError(f"no such file: {item}")
            files.append(item)
            candidate = fs.join(fs.dirname(item), SCHEMA_FILE)
        if schema_path is None and fs.exists(candidate):
            schema_path = candidate
    return list(dict.fromkeys(files)), schema_path


def _glob(pattern: str) -> list[str]:
    return [path for path, _ in fs.match(pattern)]


def _dataset_root(path: str) -> str:
    """The folder holding a dataset's shards: on object stores an output may publish
    versions below itself, named by its `_SUCCESS` (etl.manifest.dataset_dir)."""
    from etl.manifest import dataset_dir  # noqa: PLC0415 - only for a dataset directory

    return dataset_dir(path)


# ---- one record, decoded with the schema ---------------------------------------------------------
def _decoded(schema: Schema, data: bytes) -> str:
    import tensorflow as tf  # noqa: PLC0415

    try:
        batch = schema.parse_and_decode(tf.constant([data], tf.string))
    except (tf.errors.InvalidArgumentError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"  cannot decode with schema {schema.name!r}: {first}\n" + _proto_text(data)
    lines = []
    for f in schema.features:
        value = batch[f.name]
        if isinstance(value, tf.SparseTensor):
            value = tf.RaggedTensor.from_sparse(value)
        if isinstance(value, tf.RaggedTensor):
            row = value[0]
            shape = _shape_text(row.shape)
            values = row.to_list() if isinstance(row, tf.RaggedTensor) else row.numpy()
        else:
            full = value.numpy()
            values = full[0]
            if not isinstance(values, np.ndarray):  # a scalar of the record
                values = np.array(values, dtype=full.dtype)
            shape = _shape_text(values.shape)
        text = _format(values)
        lines.append(f"  {f.name}: {f.dtype} {shape} ={'' if text[:1] == chr(10) else ' '}{text}")
    return "\n".join(lines)


def _shape_text(shape: Any) -> str:
    return "[" + ", ".join("None" if d is None else str(d) for d in list(shape)) + "]"


def _format(values: Any) -> str:
    if isinstance(values, list):
        text = repr(_truncate_lists(values))
        return text if len(text) <= 400 else text[:397] + "..."
    if values.dtype == object:
        values = np.vectorize(_short_bytes, otypes=[object])(values) if values.size else values
    if values.ndim == 3 and values.shape[-1] == 1:
        values = values[..., 0]  # a one-channel image reads best as a 2-D grid
    text = np.array2string(values, threshold=64, edgeitems=3, max_line_width=100,
                           separator=", ")
    return text if "\n" not in text else "\n    " + text.replace("\n", "\n    ")


def _short_bytes(b: Any) -> Any:
    if isinstance(b, bytes) and len(b) > MAX_BYTES_SHOWN:
        return b[:MAX_BYTES_SHOWN] + b"..." + f"({len(b)} bytes)".encode()
    return b


def _truncate_lists(values: Any, limit: int = 10) -> Any:
    if isinstance(values, list):
        head = [_truncate_lists(v, limit) for v in values[:limit]]
        return head + ["..."] if len(values) > limit else head
    return _short_bytes(values)


# ---- one record, raw proto text ------------------------------------------------------------------
def _proto_text(data: bytes) -> str:
    from google.protobuf.message import DecodeError  # noqa: PLC0415
    from tensorflow.core.example import example_pb2  # noqa: PLC0415

    msg: Any = None
    try:
        example = example_pb2.Example.FromString(data)
    except DecodeError:
        example = None
    # A SequenceExample's context IS field 1 of an Example, so its bytes also parse as an
    # Example (feature_lists left as unknown fields): prefer SequenceExample when it has
    # feature lists, or when the Example parse found nothing in non-empty bytes.
    try:
        seq = example_pb2.SequenceExample.FromString(data)
    except DecodeError:
        seq = None
    if seq is not None and (seq.feature_lists.feature_list or (
            example is not None and not example.features.feature and data)):
        msg, label = seq, "tf.train.SequenceExample"
    elif example is not None:
        msg, label = example, "tf.train.Example"
    if msg is None:
        return f"  <not a tf.train.Example: {_short_bytes(data)!r}>"
    from google.protobuf import text_format  # noqa: PLC0415

    text = text_format.MessageToString(msg, as_one_line=False)
    lines = [_clip(line) for line in text.rstrip("\n").splitlines()]
    if len(lines) > MAX_TEXT_LINES:
        more = len(lines) - MAX_TEXT_LINES
        lines = lines[:MAX_TEXT_LINES] + [f"... ({more} more lines)"]
    return f"  {label}\n" + "\n".join("  " + line for line in lines)


def _clip(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."
