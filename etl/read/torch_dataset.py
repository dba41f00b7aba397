"""PyTorch: a map-style `Dataset` of one split and a collate function built from the schema.

    ds = etl.torch_dataset("out/demo", split="train")
    loader = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=True, num_workers=2,
                                         collate_fn=ds.collate)
    for batch in loader:  # {"image": uint8 tensor [256, 8, 8, 1], "label": int64 tensor [256]}

Why a collate of our own: torch's default collate stacks records one by one and fails on
ragged features. Here the DataLoader's batched fetch (`__getitems__`) reads and decodes its
indices as one batch (etl.read.random_access), and `collate` turns the batch's columns into
tensors without a Python object per record: fixed-shape features become one tensor
[n, *shape]; ragged and sequence features a list of n tensors; `bytes` features stay bytes
(nested lists of `bytes`, which torch has no tensor for).

torch is imported when this module is (only `etl.torch_dataset` loads it); without torch the
module still imports, and TorchRecords is then a plain class (the `Dataset` base adds nothing
the DataLoader needs).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from etl.contract.schema import Schema
from etl.read.random_access import Batch, Records

try:
    import torch
    from torch.utils.data import Dataset
except ImportError:  # torch is optional: `etl.torch_dataset` says so when called
    torch = None  # type: ignore[assignment]
    Dataset = object  # type: ignore[assignment,misc]


def torch_dataset(path: str | os.PathLike[str], split: str = "train",
                  schema: Schema | str | os.PathLike[str] | None = None,
                  shard: tuple[int, int] | None = None) -> TorchRecords:
    """One split of an output as a map-style `torch.utils.data.Dataset`; pass its `collate`
    as the DataLoader's `collate_fn` (see the module docstring). `split` takes TFDS's slicing
    syntax ("train[:10%]", "train+test"); `shard=(rank, world_size)` keeps one host's part
    (`Records.shard`: every record in exactly one part)."""
    if torch is None:
        raise ImportError("etl.torch_dataset needs PyTorch: pip install torch")
    records = Records(os.fspath(path), split, schema)
    return TorchRecords(records if shard is None else records.shard(*shard))


class TorchRecords(Dataset):  # type: ignore[misc,valid-type]
    """`records[i]` as tensors; the DataLoader's batched fetch reads a batch at once."""

    def __init__(self, records: Records):
        self.records = records
        self.schema = records.schema

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {name: _tensor(value) for name, value in self.records[i].items()}

    def __getitems__(self, indices: list[int]) -> Batch:
        return self.records.__getitems__(indices)

    def collate(self, batch: Any) -> dict[str, Any]:
        """A Batch (the batched fetch) or a list of records (`__getitem__` one by one) ->
        feature name -> tensor [n, *shape], or a list of n tensors (ragged, sequence)."""
        if isinstance(batch, Batch):
            columns = batch.columns
        else:
            columns = {}
            for f in self.schema.features:
                values = [record[f.name] for record in batch]
                dense = not f.is_sequence and f.fixed and f.dtype != "bytes"
                columns[f.name] = (np.stack([np.asarray(v) for v in values]) if dense
                                   else values)
        return {name: _tensor(value) for name, value in columns.items()}


def _tensor(value: Any) -> Any:
    """NumPy -> torch (bytes stay bytes, lists stay lists of tensors)."""
    if isinstance(value, list):
        return [_tensor(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype == object:
            return value.tolist()
        arr = np.asarray(value)
        if not (arr.flags.c_contiguous and arr.flags.writeable):
            arr = arr.copy()
        return torch.from_numpy(arr)
    return value
