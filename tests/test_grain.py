"""Grain reads `etl.open_records` as a RandomAccessDataSource: a full epoch through
`grain.python.DataLoader` with a shuffling IndexSampler, two worker processes and the data
sharded over two hosts; every record exactly once, the same order for the same seed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

gp = pytest.importorskip("grain.python")

# With JAX installed (as in the test extra), grain 0.2.18's DataLoader reads an absl flag that a
# program not started by absl.app has not parsed (google/grain#1355, fixed after 0.2.18); the
# README's Grain block carries the same line
from absl import flags  # noqa: E402

flags.FLAGS.mark_as_parsed()

from etl.read.random_access import open_records  # noqa: E402

pytestmark = pytest.mark.slow  # a Beam run for its fixture, then Grain's worker processes


@pytest.fixture(scope="module")
def sentences(tmp_path_factory: pytest.TempPathFactory) -> str:
    # Grain's workers are spawned and import this module to unpickle `Pick`: the heavy test
    # helpers (Beam, the CLI) stay out of its top level
    from tests.pipelines import run_example as run  # noqa: PLC0415

    return run("sentences", tmp_path_factory.mktemp("grain") / "out")


class Pick(gp.MapTransform):
    """What a training step would take from a record: its id and its token count."""

    def map(self, record: dict[str, Any]) -> tuple[int, int]:
        return int(record["id"]), len(record["tokens"])


def epoch(records: Any, host: int, seed: int) -> list[tuple[int, int]]:
    sampler = gp.IndexSampler(len(records), shard_options=gp.ShardOptions(host, 2),
                              shuffle=True, num_epochs=1, seed=seed)
    loader = gp.DataLoader(data_source=records, sampler=sampler, operations=[Pick()],
                           worker_count=2)
    return [tuple(x) for x in loader]


def test_grain_epoch_exactly_once_and_deterministic(sentences):
    records = open_records(sentences, "train")
    everything = records[np.arange(len(records))]
    want = sorted(zip(everything["id"].tolist(), [len(t) for t in everything["tokens"]],
                      strict=True))
    hosts = [epoch(records, host, seed=7) for host in (0, 1)]
    assert all(hosts) and sorted(hosts[0] + hosts[1]) == want  # each record once, on one host
    assert not set(hosts[0]) & set(hosts[1])
    assert [epoch(records, host, seed=7) for host in (0, 1)] == hosts  # same seed, same order
    other = epoch(records, 0, seed=8)
    assert sorted(other) == sorted(hosts[0])  # the same records on host 0, in another order
    assert other != hosts[0]


def test_records_satisfy_the_protocol(sentences):
    records = open_records(sentences, "train")
    assert isinstance(records, gp.RandomAccessDataSource)  # a runtime-checkable Protocol


def test_batched_reads_through_grain_datasets(sentences):
    """`grain.MapDataset.source(records).batch(...)` asks for a batch of indices at once
    (SupportsBatchedReadRandomAccessDataSource): one read and one decode per batch."""
    records = open_records(sentences, "train")
    ids = (gp.MapDataset.source(records).shuffle(seed=3)
           .map(lambda r: int(r["id"])).batch(32))
    got = [int(i) for batch in ids for i in batch]
    assert sorted(got) == sorted(records[np.arange(len(records))]["id"].tolist())
