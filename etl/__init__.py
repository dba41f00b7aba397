"""Raw training data -> TFRecords, driven by one schema file: the public face (Schema,
load_schema, Encoder, make_dataset, open_records, torch_dataset). Nothing inside etl imports
this module, yet Python runs it before any `etl.*` module (the command line's first import is
etl.base.pause): so it imports nothing itself, and every name loads on first use. `--help`,
`history` and a signal at start-up then pay for no NumPy, pyarrow or YAML; TensorFlow
(make_dataset), tfx_bsl (open_records) and torch (torch_dataset) load only with their
function; open_records never loads TensorFlow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from etl.contract.codec import Encoder
    from etl.contract.schema import Feature, Schema, load_schema
    from etl.read.dataset import make_dataset
    from etl.read.random_access import open_records
    from etl.read.torch_dataset import torch_dataset

__all__ = ["Encoder", "Feature", "Schema", "load_schema", "make_dataset", "open_records",
           "torch_dataset"]

_LAZY = {"Feature": "etl.contract.schema", "Schema": "etl.contract.schema",
         "load_schema": "etl.contract.schema",
         "Encoder": "etl.contract.codec", "make_dataset": "etl.read.dataset",
         "open_records": "etl.read.random_access", "torch_dataset": "etl.read.torch_dataset"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib  # noqa: PLC0415

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'etl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
