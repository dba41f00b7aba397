"""What the CLI's `spec` and `inspect` commands print.

`spec_text` shows the `tf.io` parse spec a schema gives. `inspect` prints the first records
of TFRecord files: decoded with the dataset's schema when a `schema.yaml` sits beside the
data (or one is given), else as `tf.train.Example` / `tf.train.SequenceExample` text.
With `images=DIR` the image features of the records shown are also written as PNG files (the
decoded pixels, unscaled) into DIR, local or gs://, which must be new, empty, or hold only
what an earlier `inspect --images` wrote there (a marker file lists those files and their
checksums: nothing else is ever overwritten).
TensorFlow and Pillow are imported only inside the functions.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from etl.base.errors import EXIT_CONFIG, EtlError, VerifyError
from etl.contract.images import is_image, png_bytes
from etl.contract.schema import Feature, Schema, load_schema
from etl.formats.record_index import INDEX_SUFFIX
from etl.formats.shards import (
    ADAPTER_FOR_FORMAT,
    adapter_of,
    is_shard_name,
    read_shard,
    shard_stem,
)
from etl.formats.tfrecord import compression_of
from etl.output.layout import SCHEMA_FILE, SUCCESS
from etl.storage import fs

MAX_TEXT_LINES = 60  # per record, for raw proto text
MAX_BYTES_SHOWN = 48  # per bytes value


IMAGES_MARKER = ".tfrecord-etl-inspect.json"  # in an --images DIR: the PNG files we wrote


class InspectError(EtlError, ValueError):
    """Nothing to inspect at the given paths."""


class NotTFRecord(InspectError):
    """A file given to inspect is not a TFRecord file at all (a usage problem: exit 2)."""

    exit_code = EXIT_CONFIG


class ImagesDirError(InspectError):
    """`--images DIR` cannot be used: it holds files inspect did not write, or nothing in the
    data is an image. A usage problem (exit 2), found before any file is written."""

    exit_code = EXIT_CONFIG


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
    images: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """Yield printable blocks: one header per file, then one block per record (`limit` in all).

    Decoded with `schema`, else with the `schema.yaml` beside the data, else shown as raw
    `tf.train.Example` (or `SequenceExample`) text. Compression is taken from the extension.
    `images`: a folder (local or gs://) that receives each image feature of the records shown
    as `<file stem>-record<n>-<feature>.png` (n counts records within that file); each
    record's block names its files. Refused (ImagesDirError) before anything is read when
    the folder holds files an earlier `inspect --images` did not write.
    """
    items = [os.fspath(paths_or_dir)] if isinstance(paths_or_dir, (str, os.PathLike)) else [
        os.fspath(p) for p in paths_or_dir
    ]
    files, found_schema = _files_and_schema(items)
    if schema is not None:
        schema_obj: Schema | None = schema if isinstance(schema, Schema) else load_schema(schema)
    else:
        schema_obj = load_schema(found_schema) if found_schema else None
    sink: _ImageSink | None = None
    if images is not None:
        sink = _ImageSink.open(os.fspath(images), schema_obj, _outputs_of(items, files))
    if schema_obj is None:
        yield "# no schema.yaml beside the data: showing raw protos"
    else:
        yield f"# decoded with schema {schema_obj.name!r} ({schema_obj.path or 'given'})"
    shown = 0
    stems = _file_stems(files)
    for path in files:
        if shown >= limit:
            break
        compression = compression_of(path)
        yield f"== {path}" + (f" ({compression})" if compression != "none" else "")
        at = adapter_of(path).position  # "offset" in a TFRecord file, "index" in an ArrayRecord
        for index, (offset, data) in enumerate(_records(path)):
            if shown >= limit:
                break
            head = f"-- record {shown} ({at} {offset}, {len(data)} bytes)"
            if schema_obj is None:
                body = _proto_text(data)
            else:
                body, batch = _decoded_batch(schema_obj, data)
                if sink is not None and batch is not None:
                    written = sink.write(f"{stems[path]}-record{index}", batch)
                    body += "".join(f"\n  {line}" for line in written)
            yield head + "\n" + body
            shown += 1
    if shown == 0:
        yield "(no records)"
    if sink is not None:
        yield sink.summary()


def _records(path: str) -> Iterator[tuple[int, bytes]]:
    """The file's records; a file that fails at its very first record header and is not
    named as a shard (`.tfrecord`, `.array_record`) is not a TFRecord file at all (a CSV, a
    Parquet file...): NotTFRecord in one line, not a framing error about "corrupted" data."""
    records = read_shard(path)
    try:
        first = next(records, None)
    except VerifyError as e:
        named = is_shard_name(path)
        if named or not re.search(r"record header|truncated record", str(e)):
            raise
        raise NotTFRecord(f"{path}: not a TFRecord file (it does not start with a TFRecord "
                          "record header); inspect reads TFRecord files, such as an output's "
                          "*.tfrecord shards") from None
    if first is None:
        return
    yield first
    yield from records


def _files_and_schema(items: list[str]) -> tuple[list[str], str | None]:
    files: list[str] = []
    schema_path: str | None = None
    for item in items:
        if fs.isdir(item):
            root = _dataset_root(item)
            patterns = [a.pattern for a in ADAPTER_FOR_FORMAT.values()]  # every format's shards
            found = sorted(f for pattern in patterns for f in _glob(fs.join(root, pattern)))
            if not found:
                raise InspectError(f"{item}: no {patterns[0]} files (nor "
                                   f"{', '.join(patterns[1:])}) in this directory")
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
    """The files a pattern matches, but index files (`NAME.tfrecord.index`: no records)."""
    return [path for path, _ in fs.match(pattern) if not path.endswith(INDEX_SUFFIX)]


def _dataset_root(path: str) -> str:
    """The folder holding a dataset's shards: on object stores an output may publish
    versions below itself, named by its `_SUCCESS` (etl.output.manifest.dataset_dir)."""
    from etl.output.manifest import dataset_dir  # noqa: PLC0415 - only for a dataset directory

    return dataset_dir(path)


# ---- one record, decoded with the schema ---------------------------------------------------------
def _decoded(schema: Schema, data: bytes) -> str:
    return _decoded_batch(schema, data)[0]


def _decoded_batch(schema: Schema, data: bytes) -> tuple[str, dict[str, Any] | None]:
    """The record's printable block and its decoded batch of one (None when it does not parse)."""
    import tensorflow as tf  # noqa: PLC0415

    try:
        batch = schema.parse_and_decode(tf.constant([data], tf.string))
    except (tf.errors.InvalidArgumentError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return (f"  cannot decode with schema {schema.name!r}: {first}\n" + _proto_text(data),
                None)
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
        text = _labelled(values, f) if f.vocabulary else _format(values)
        lines.append(f"  {f.name}: {f.dtype} {shape} ={'' if text[:1] == chr(10) else ' '}{text}")
    return "\n".join(lines), batch


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
    """A bytes value as shown: UTF-8 text as text (a str), other bytes as bytes (escaped);
    either cut at MAX_BYTES_SHOWN, followed by its size in bytes."""
    if not isinstance(b, bytes):
        return b
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        if len(b) > MAX_BYTES_SHOWN:
            return b[:MAX_BYTES_SHOWN] + b"..." + f"({len(b)} bytes)".encode()
        return b
    if len(text) > MAX_BYTES_SHOWN:
        return text[:MAX_BYTES_SHOWN] + f"...({len(b)} bytes)"
    return text


def _labelled(values: Any, f: Feature, limit: int = 10) -> str:
    """Vocabulary ids with their labels: `2 (Gentoo)`, `[0 (a), 1 (b)]`; an id outside the
    vocabulary is the feature's `oov_id` (`(out of vocabulary)`)."""
    def one(v: Any) -> str:
        i = int(v)
        if 0 <= i < len(f.vocabulary) and i != f.oov_id:
            return f"{i} ({f.vocabulary[i]})"
        return f"{i} (out of vocabulary)" if i == f.oov_id else f"{i} (not in the vocabulary)"

    def many(v: Any) -> str:
        if isinstance(v, (list, np.ndarray)) and np.ndim(v) > 0:
            items = list(v)
            shown = [many(x) for x in items[:limit]]
            return "[" + ", ".join(shown + (["..."] if len(items) > limit else [])) + "]"
        return one(v)

    return many(values)


def _truncate_lists(values: Any, limit: int = 10) -> Any:
    if isinstance(values, list):
        head = [_truncate_lists(v, limit) for v in values[:limit]]
        return head + ["..."] if len(values) > limit else head
    return _short_bytes(values)


# ---- --images DIR ----------------------------------------------------------------------------
def image_features(schema: Schema) -> list[Feature]:
    """The features `inspect --images` writes as PNG (etl.contract.images: the report's rule too)."""
    return [f for f in schema.features if is_image(f)]


def _describe(pixels: np.ndarray) -> str:
    channels = pixels.shape[2] if pixels.ndim == 3 else 1
    kind = {1: "grey", 3: "RGB", 4: "RGBA"}[channels]
    bits = "" if pixels.dtype == np.uint8 else " 16-bit"
    return (f"{pixels.shape[1]}x{pixels.shape[0]}{bits} {kind}, values "
            f"{int(pixels.min())}..{int(pixels.max())}")


class _ImageSink:
    """Writes PNGs into DIR and keeps DIR's marker (file name -> sha256) ahead of them: the
    marker is rewritten before each record's files, so a file in DIR is ours only if the
    marker lists it with its checksum."""

    def __init__(self, folder: str, features: list[Feature], known: dict[str, str]):
        self.folder = folder
        self.features = features
        self.known = known
        self.written: list[str] = []

    @classmethod
    def open(cls, folder: str, schema: Schema | None, outputs: list[str]) -> _ImageSink:
        if not folder:
            raise ImagesDirError("--images needs a folder")
        if schema is None:
            raise ImagesDirError("--images needs the data's schema to find its image features: "
                                 "there is no schema.yaml beside the data; pass --schema "
                                 "SCHEMA.yaml")
        features = image_features(schema)
        if not features:
            raise ImagesDirError(
                f"--images: schema {schema.name!r} has no image feature (uint8 [H, W] or "
                f"[H, W, 1|3|4], uint16 [H, W] or [H, W, 1]; raw, values, png or jpeg): "
                f"features {[f.name for f in schema.features]}")
        for out in outputs:
            if fs.within(folder, out):
                raise ImagesDirError(
                    f"refusing --images {folder}: it is inside the output {out}, whose next run "
                    "would refuse files it did not write; choose a folder outside it")
        return cls(folder, features, _claim(folder))

    def write(self, prefix: str, batch: dict[str, Any]) -> list[str]:
        """Write one record's images; the lines naming them (for its block)."""
        pending: list[tuple[str, bytes, str]] = []
        for f in self.features:
            pixels = np.asarray(batch[f.name].numpy()[0])
            name = f"{prefix}-{_safe(f.name)}.png"
            data = png_bytes(pixels)
            pending.append((name, data, f"{f.name} -> {fs.join(self.folder, name)} "
                                        f"({_describe(pixels)})"))
        for name, data, _ in pending:
            self.known[name] = hashlib.sha256(data).hexdigest()
        _write_marker(self.folder, self.known)
        for name, data, _ in pending:
            fs.write_bytes(fs.join(self.folder, name), data)
            self.written.append(name)
        return [line for _, _, line in pending]

    def summary(self) -> str:
        what = ", ".join(f.name for f in self.features)
        return (f"# wrote {len(self.written)} PNG file(s) to {self.folder} (image features: "
                f"{what}; pixels as stored, not rescaled)")


def _claim(folder: str) -> dict[str, str]:
    """DIR's files we may overwrite (name -> sha256), after refusing a DIR that holds
    anything else: a file, a folder with files no earlier `inspect --images` wrote, or a file
    of ours changed since (someone edited it)."""
    if fs.local_path(folder) is not None and os.path.lexists(folder) and not os.path.isdir(folder):
        raise ImagesDirError(f"refusing --images {folder}: it is a file, not a folder")
    try:
        present = fs.list_dir(folder) if fs.isdir(folder) else []
    except OSError as e:
        raise ImagesDirError(f"cannot list --images {folder}: {fs.first_line(e)}") from e
    if not present:
        return {}
    names = {_relative_to(folder, p) for p, _ in present}
    known = _read_marker(folder) if IMAGES_MARKER in names else None
    names.discard(IMAGES_MARKER)
    if known is None:
        first = sorted(names)[0]
        raise ImagesDirError(
            f"refusing --images {folder}: it holds {first}, which no `inspect --images` wrote; "
            "choose an empty or new folder (or remove it yourself)")
    for name in sorted(names):
        if name not in known:
            raise ImagesDirError(
                f"refusing --images {folder}: it holds {name}, which no `inspect --images` "
                "wrote; choose an empty or new folder (or remove it yourself)")
        if hashlib.sha256(fs.read_bytes(fs.join(folder, name))).hexdigest() != known[name]:
            raise ImagesDirError(
                f"refusing --images {folder}: {name} changed since `inspect --images` wrote "
                "it; choose another folder (or remove it yourself)")
    return {name: digest for name, digest in known.items() if name in names}


def _read_marker(folder: str) -> dict[str, str] | None:
    try:
        doc = json.loads(fs.read_bytes(fs.join(folder, IMAGES_MARKER)))
    except (OSError, ValueError):
        return None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return None
    return {str(k): v for k, v in files.items()}


def _write_marker(folder: str, known: dict[str, str]) -> None:
    doc = {"written_by": "tfrecord-etl inspect --images",
           "note": "PNG files written here and their sha256; inspect overwrites only these",
           "files": dict(sorted(known.items()))}
    fs.write_bytes(fs.join(folder, IMAGES_MARKER), (json.dumps(doc, indent=1) + "\n").encode())


def _relative_to(folder: str, path: str) -> str:
    base = fs.join(folder, "")
    return path[len(base):] if path.startswith(base) else path


def _outputs_of(items: list[str], files: list[str]) -> list[str]:
    """Folders holding a published output that the inspected files belong to (DIR must not be
    inside one): the directories named, and the folders of files with a `_SUCCESS` beside."""

    outs = [i for i in items if fs.isdir(i)]
    for folder in dict.fromkeys(fs.dirname(f) for f in files):
        for candidate in (folder, fs.dirname(folder)):
            if candidate and candidate not in outs and fs.exists(fs.join(candidate, SUCCESS)):
                outs.append(candidate)
    return outs


def _file_stems(files: list[str]) -> dict[str, str]:
    """A PNG name prefix per file: its name without `.tfrecord*`, made unique when two
    folders hold files of the same name."""
    stems: dict[str, str] = {}
    used: set[str] = set()
    for path in files:
        name = fs.basename(path)
        shard = shard_stem(name)
        stem = _safe(os.path.splitext(name)[0] if shard is None else shard)
        unique, n = stem, 2
        while unique in used:
            unique, n = f"{stem}-{n}", n + 1
        used.add(unique)
        stems[path] = unique
    return stems


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "_"


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
    lines = [_clip(_utf8_value(line)) for line in text.rstrip("\n").splitlines()]
    if len(lines) > MAX_TEXT_LINES:
        more = len(lines) - MAX_TEXT_LINES
        lines = lines[:MAX_TEXT_LINES] + [f"... ({more} more lines)"]
    return f"  {label}\n" + "\n".join("  " + line for line in lines)


_BYTES_VALUE = re.compile(r'^(\s*value: )"(.*)"$')


def _utf8_value(line: str) -> str:
    """A `value: "..."` line of a bytes_list with its UTF-8 text as text (protobuf's text
    format escapes every byte above 0x7f as octal); other bytes stay escaped."""
    from google.protobuf import text_encoding  # noqa: PLC0415

    m = _BYTES_VALUE.match(line)
    if m is None:
        return line
    try:
        text = text_encoding.CUnescape(m.group(2)).decode("utf-8")
    except (UnicodeDecodeError, ValueError):
        return line
    return f'{m.group(1)}"{text_encoding.CEscape(text, as_utf8=True)}"'


def _clip(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."
