"""Schemas and outputs made by hand, without a pipeline, for the readers' tests: a small
output written with our Encoder and framing the way the pipeline publishes one (schema.yaml,
{split}-i-of-n shards, manifest.json), and a schema with a feature of every kind. No
TensorFlow and no Beam here: the random-access tests import it without them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from etl.contract.codec import Encoder
from etl.contract.schema import Schema, schema_from_dict
from etl.formats.record_index import index_lines
from etl.formats.tfrecord import Compressor, frame_all, read_file

# the toy output's schema and its number of records (tests/test_reader.py)
SCHEMA = schema_from_dict({"name": "toy", "kind": "example", "features": {
    "label": {"dtype": "int64", "shape": []},
    "x": {"dtype": "float32", "shape": [3]},
    "name": {"dtype": "bytes", "shape": []},
    "r": {"dtype": "int32", "shape": [-1], "required": False},
    "img": {"dtype": "uint8", "shape": [2, 2, 1], "encoding": "png"},
}})
N = 60


def columns(n: int = N, start: int = 0) -> dict[str, Any]:
    ids = np.arange(start, start + n)
    return {
        "label": ids,
        "x": np.stack([ids, ids * 0.5, -ids], axis=1).astype(np.float32),
        "name": [f"rec-{i}" for i in ids],
        "r": [list(range(i % 5)) for i in ids],
        "img": (ids[:, None, None, None] + np.arange(4).reshape(1, 2, 2, 1)).astype(np.uint8),
    }


def write_shard(path: Path, records: list[bytes]) -> dict[str, Any]:
    comp = Compressor("gzip" if path.name.endswith(".gz") else "none")
    data = comp.compress(frame_all(records)) + comp.flush()
    path.write_bytes(data)
    return {"path": path.name, "num_records": len(records), "num_bytes": len(data)}


def make_output_dir(root: Path, schema: Schema = SCHEMA, cols: dict[str, Any] | None = None,
                    splits: tuple[str, ...] = ("train",), ext: str = "", manifest: bool = True,
                    num_shards: int = 2) -> Path:
    """What the pipeline publishes: schema.yaml, {split}-i-of-n shards, manifest.json."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "schema.yaml").write_text(schema.to_yaml())
    records = Encoder(schema).encode(cols if cols is not None else columns()).records
    out_splits = {}
    for split in splits:
        cut = np.array_split(np.arange(len(records)), num_shards)
        shards = [write_shard(root / f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord{ext}",
                              [records[j] for j in idx]) for i, idx in enumerate(cut)]
        out_splits[split] = {"num_records": len(records), "shards": shards}
    if manifest:
        (root / "manifest.json").write_text(json.dumps({"format_version": 1,
                                                        "splits": out_splits}))
    return root


def with_indexes(root: str) -> str:
    """Index files for an output written before the writer made them (the hand-made
    outputs here; real runs write their own)."""
    manifest_path = os.path.join(root, "manifest.json")
    manifest = json.loads(Path(manifest_path).read_text())
    if manifest.get("format") == "array_record":
        return root
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            if "index" in shard:
                continue
            path = os.path.join(root, shard["path"])
            lines, _ = index_lines(np.array([len(r) for _, r in read_file(path)]))
            Path(path + ".index").write_bytes(lines)
            shard["index"] = {"path": shard["path"] + ".index", "num_bytes": len(lines)}
    Path(manifest_path).write_text(json.dumps(manifest, indent=1))
    return root


# a feature of every kind a schema allows (tests/test_tfmd.py, tests/test_tfx_readers.py)
EVERY_KIND = schema_from_dict({"name": "kinds", "kind": "example", "features": {
    "i64": {"dtype": "int64", "shape": []},
    "u8": {"dtype": "uint8", "shape": []},
    "flag": {"dtype": "bool", "shape": []},
    "f16": {"dtype": "float16", "shape": [2]},
    "matrix": {"dtype": "float32", "shape": [2, 3]},
    "text": {"dtype": "bytes", "shape": []},
    "count": {"dtype": "int64", "shape": [], "default": -1},
    "weights": {"dtype": "float32", "shape": [3], "default": 0.5},
    "code": {"dtype": "bytes", "shape": [2], "default": "none"},
    "label": {"dtype": "int64", "shape": [], "vocabulary": ["a", "b", "c"]},
    "kind": {"dtype": "int32", "shape": [], "vocabulary": ["x", "y"], "default": "y"},
    "ragged": {"dtype": "int64", "shape": [-1], "required": False},
    "boxes": {"dtype": "float32", "shape": [-1, 4]},
    "words": {"dtype": "bytes", "shape": [-1], "required": False},
    "sparse_ids": {"dtype": "int64", "shape": [-1], "representation": "sparse",
                   "required": False},
    "sparse_text": {"dtype": "bytes", "shape": [-1], "representation": "sparse"},
    "raw": {"dtype": "float64", "shape": [2, 2], "encoding": "raw"},
    "png": {"dtype": "uint16", "shape": [8, 8, 1], "encoding": "png"},
    "jpeg": {"dtype": "uint8", "shape": [8, 8, 3], "encoding": "jpeg"},
}})
