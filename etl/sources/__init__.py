"""Source formats by name: one `Source` contract (base), shared file helpers (files) and line
scanning (lines), one module per format. Each reader takes (config, base_dir, where).
Imports layers 1-4 (base, storage, formats, contract) only, never Beam."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from etl.base.errors import ConfigError
from etl.sources.base import Block, Source, Split

READERS = {
    "csv": "etl.sources.csv_source:CsvReader",
    "jsonl": "etl.sources.jsonl_source:JsonlReader",
    "parquet": "etl.sources.parquet_source:ParquetReader",
    "idx": "etl.sources.idx_source:IdxReader",
    "npy": "etl.sources.numpy_source:NumpyReader",
    "npz": "etl.sources.numpy_source:NumpyReader",
    "images": "etl.sources.image_source:ImageFolderReader",
    "text": "etl.sources.text_source:TextReader",
    "tfrecord": "etl.sources.tfrecord_source:TFRecordReader",
    "python": "etl.sources.python_source:PythonReader",
    "sql": "etl.sources.sql_source:SqlReader",
}


def make_reader(config: Mapping[str, Any], base_dir: str = ".", where: str = "source") -> Source:
    """Build the reader a job file's source entry asks for; paths are relative to base_dir."""
    if not isinstance(config, Mapping) or "format" not in config:
        raise ConfigError(f"{where}: a source needs a 'format' (one of {sorted(READERS)})")
    fmt = str(config["format"])
    if fmt not in READERS:
        raise ConfigError(f"{where}: unknown format {fmt!r}; expected one of {sorted(READERS)}")
    module, cls = READERS[fmt].split(":")
    return getattr(importlib.import_module(module), cls)(dict(config), base_dir, where)


__all__ = ["Block", "Source", "Split", "make_reader", "READERS"]
