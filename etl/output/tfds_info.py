"""TFDS metadata for an output TFDS did not write: `dataset_info.json`, `features.json` and one
`NAME.labels.txt` per labelled feature, so `tfds.builder_from_directory(OUT)` opens our shards
as they are (`as_dataset`, `as_data_source`, its split API).

Written by hand in the exact JSON shape TFDS reads (DatasetInfo and FeaturesDict protos as
JSON), not through TFDS: it is only a test dependency, and importing it (with TensorFlow) in
the finalize step would cost seconds for a few kilobytes of text. tests/test_tfds.py proves
TFDS reads what this writes and decodes the records to our values.

TFDS parses every record as a tf.train.Example by feature name, so each schema feature maps to
the TFDS feature whose own parse spec reads exactly what we stored: `Tensor` (numbers, bytes,
raw-encoded arrays), `Image` (png/jpeg), `Text` (one string), `ClassLabel` (a vocabulary id).
A SequenceExample's context reads the same way (its `context` is an Example's `features`);
its sequence features TFDS cannot parse, nor a variable dimension below the first, nor a
compressed TFRecord file: such features (or the whole output) are named in one note.
"""

from __future__ import annotations

import json
from typing import Any

from etl.contract.schema import Feature, Schema
from etl.formats.shards import ShardFormat
from etl.output.layout import TFDS_FEATURES_FILE as FEATURES
from etl.output.layout import TFDS_INFO_FILE as DATASET_INFO

LABELS_SUFFIX = ".labels.txt"
VERSION = "1.0.0"
OOV_NAME = "<oov>"

_PY = "tensorflow_datasets.core.features."
_TENSOR = _PY + "tensor_feature.Tensor"
_IMAGE = _PY + "image_feature.Image"
_TEXT = _PY + "text_feature.Text"
_LABEL = _PY + "class_label_feature.ClassLabel"
_DICT = _PY + "features_dict.FeaturesDict"
_TFDS_DTYPES = {"bytes": "string"}  # every other dtype of ours keeps its name in TFDS
_IMAGE_DTYPES = ("uint8", "uint16")


def tfds_files(schema: Schema, manifest: dict[str, Any],
               fmt: ShardFormat) -> tuple[dict[str, bytes], list[str]]:
    """(file name -> bytes, notes): the TFDS metadata of an output, and one line naming what
    TFDS cannot read. `manifest`: its `splits` (shards in index order, per-shard counts)."""
    if fmt.compression != "none":
        return {}, [f"no TFDS metadata: TFDS cannot read {fmt.compression}-compressed TFRecord "
                    "shards (write them uncompressed for tfds.builder_from_directory)"]
    features: dict[str, Any] = {}
    labels: dict[str, bytes] = {}
    skipped: list[str] = []
    for f in schema.features:
        entry = None if f.is_sequence else feature_entry(f)
        if entry is None:
            skipped.append(f.name)
            continue
        features[f.name] = entry
        names = label_names(f)
        if entry["pythonClassName"] == _LABEL and names is not None:
            labels[f.name + LABELS_SUFFIX] = "".join(n + "\n" for n in names).encode()
    out = {DATASET_INFO: _json(dataset_info(schema.name, manifest, fmt)),
           FEATURES: _json({"pythonClassName": _DICT,
                            "featuresDict": {"features": features}}),
           **labels}
    notes = [f"TFDS cannot express feature(s) {skipped}: left out of {FEATURES} (the other "
             "features read with tfds.builder_from_directory)"] if skipped else []
    return out, notes


def dataset_info(name: str, manifest: dict[str, Any], fmt: ShardFormat) -> dict[str, Any]:
    """The DatasetInfo proto as TFDS writes it to JSON (int64 fields as strings); the
    template's suffix is the shards' own (ShardFormat.suffix)."""
    splits = []
    for split, info in manifest["splits"].items():
        splits.append({
            "name": split,
            "numBytes": str(info["num_bytes"]),
            "shardLengths": [str(s["num_records"]) for s in info["shards"]],
            "filepathTemplate": "{SPLIT}-{SHARD_X_OF_Y}" + fmt.suffix,
        })
    return {"name": name, "version": VERSION, "fileFormat": fmt.kind, "splits": splits,
            "description": f"Written by tfrecord-etl from schema {name!r}."}


def feature_entry(f: Feature) -> dict[str, Any] | None:
    """The TFDS feature that decodes `f` from a tf.train.Example, None when none can."""
    if f.encoding in ("png", "jpeg"):
        if len(f.shape) != 3 or f.dtype not in _IMAGE_DTYPES or f.shape[2] < 0:
            return None
        return {"pythonClassName": _IMAGE, "image": {
            "shape": _shape(f.shape), "dtype": f.dtype, "encodingFormat": f.encoding}}
    if any(d < 0 for d in f.shape[1:]):
        return None  # TFDS's Tensor has one variable dimension, the first
    if f.encoding == "raw":
        if not f.fixed:
            return None
        return _tensor(f.shape, f.dtype, "bytes")
    if f.vocabulary and f.shape == () and label_names(f) is not None:
        return {"pythonClassName": _LABEL,
                "classLabel": {"numClasses": str(len(label_names(f) or ()))}}
    if f.dtype == "bytes" and f.shape == ():
        return {"pythonClassName": _TEXT, "text": {}}
    return _tensor(f.shape, _TFDS_DTYPES.get(f.dtype, f.dtype), "none")


def label_names(f: Feature) -> list[str] | None:
    """The ClassLabel names of a vocabulary feature: the vocabulary, plus OOV_NAME when the
    out-of-vocabulary id is the next one; None when TFDS's names file cannot hold them (an id
    beyond that, a name with a line break, names not unique)."""
    names = list(f.vocabulary)
    if f.oov_id is not None and f.oov_id >= len(names):
        if f.oov_id != len(names):
            return None
        names.append(OOV_NAME)
    if len(set(names)) != len(names) or any("\n" in n or "\r" in n for n in names):
        return None
    return names


def _tensor(shape: tuple[int, ...], dtype: str, encoding: str) -> dict[str, Any]:
    return {"pythonClassName": _TENSOR,
            "tensor": {"shape": _shape(shape), "dtype": dtype, "encoding": encoding}}


def _shape(shape: tuple[int, ...]) -> dict[str, Any]:
    return {"dimensions": [str(d) for d in shape]} if shape else {}


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode()
