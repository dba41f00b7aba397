"""PyTorch reads `etl.torch_dataset` / `etl.open_records` as map-style Datasets: an epoch
through `torch.utils.data.DataLoader` with two worker processes, every record exactly once.

torch lives in `.venv-torch`, not `.venv` (the Makefile says why): the main pytest run skips
these, and `make test` then runs them with `.venv-torch`'s Python (`make test-torch` alone)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import etl  # noqa: E402
from etl.read.random_access import open_records  # noqa: E402


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.pipelines import run_example as run  # noqa: PLC0415 - Beam and the CLI: not for workers

    root = tmp_path_factory.mktemp("torch")
    return {"digits": run("demo", root / "digits"), "sentences": run("sentences", root / "s")}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_epoch_exactly_once_with_two_workers(outputs, context):
    """Ragged token lists come as a list of tensors, the context features as tensors [n]."""
    ds = etl.torch_dataset(outputs["sentences"], split="train")
    assert isinstance(ds, torch.utils.data.Dataset)
    loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2,
                                         collate_fn=ds.collate, multiprocessing_context=context,
                                         generator=torch.Generator().manual_seed(0))
    seen: list[tuple[int, list[int]]] = []
    for batch in loader:
        assert batch["id"].dtype == torch.int64 and batch["id"].ndim == 1
        assert isinstance(batch["tokens"], list) and len(batch["tokens"]) == len(batch["id"])
        assert all(t.dtype == torch.int64 for t in batch["tokens"])
        assert batch["length"].tolist() == [len(t) for t in batch["tokens"]]
        seen.extend(zip(batch["id"].tolist(), [t.tolist() for t in batch["tokens"]], strict=True))
    records = open_records(outputs["sentences"], "train")
    everything = records[np.arange(len(records))]
    want = sorted(zip(everything["id"].tolist(), [t.tolist() for t in everything["tokens"]],
                      strict=True))
    assert sorted(seen) == want and len({i for i, _ in seen}) == len(records)


def test_dense_batches_as_tensors(outputs):
    ds = etl.torch_dataset(outputs["digits"], split="test")
    loader = torch.utils.data.DataLoader(ds, batch_size=100, num_workers=2, collate_fn=ds.collate)
    batches = list(loader)
    assert [b["image"].shape for b in batches] == [(100, 8, 8, 1)] * 2 + [(97, 8, 8, 1)]
    assert batches[0]["image"].dtype == torch.uint8 and batches[0]["label"].dtype == torch.int64
    records = open_records(outputs["digits"], "test")
    assert torch.equal(torch.cat([b["label"] for b in batches]),
                       torch.from_numpy(records[0:297]["label"]))
    one = ds[5]
    assert one["image"].shape == (8, 8, 1) and int(one["label"]) == int(records[5]["label"])
    assert ds.collate([ds[0], ds[1]])["image"].shape == (2, 8, 8, 1)  # records one by one too


def test_open_records_with_the_default_collate(outputs):
    """The plain Records object is a map-style Dataset too; torch's own collate stacks it."""
    records = open_records(outputs["digits"], "test")
    loader = torch.utils.data.DataLoader(records, batch_size=64, num_workers=2)
    labels = torch.cat([b["label"] for b in loader])
    assert labels.tolist() == records[0:297]["label"].tolist()
