"""Multi-host reading (issue 30): `make_dataset(shard=...)`, `input_context=` and
`open_records(...).shard(...)` over 5 shards of a 1003-record split: every record read by
exactly one host, per-host counts as documented (whole shards when the host count divides
the shard count, else ranges differing by at most one record), the same seed the same order,
and the same parts through both readers, with a slice too."""

from __future__ import annotations

from typing import Any

import pytest

from etl.read.random_access import RecordsError, open_records
from tests.helpers import TEST, TRAIN, ids_output, record_ids

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return ids_output(tmp_path_factory.mktemp("hosts"))


def tf_ids(out: str, split: str = "train", **kw: Any) -> list[int]:
    from etl.read.dataset import make_dataset  # noqa: PLC0415 - TensorFlow only here

    kw.setdefault("shuffle_buffer", 0)
    ds = make_dataset(out, split=split, batch_size=128, **kw)
    assert int(ds.cardinality()) == sum(1 for _ in ds)  # the host's batches, not the split's
    return [i for batch in ds for i in batch["id"].numpy().tolist()]


@pytest.mark.parametrize("count", [3, 7])
def test_ranges_when_hosts_do_not_divide_shards(out: str, count: int) -> None:
    whole = record_ids(open_records(out, "train"))
    parts = [record_ids(open_records(out, "train").shard(i, count)) for i in range(count)]
    # contiguous ranges [i*N//count, (i+1)*N//count) of the split's order
    assert parts == [whole[i * TRAIN // count:(i + 1) * TRAIN // count] for i in range(count)]
    assert sorted(sum(parts, [])) == list(range(TRAIN))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) == 1 and sum(sizes) == TRAIN
    # tf.data reads the same parts
    assert [tf_ids(out, shard=(i, count)) for i in range(count)] == parts


def test_whole_shards_when_hosts_divide_shards(out: str) -> None:
    records = open_records(out, "train")
    counts = [s.num_records for s in records.shards]
    whole = record_ids(records)
    starts = [sum(counts[:i]) for i in range(5)]
    parts = [record_ids(records.shard(i, 5)) for i in range(5)]
    assert parts == [whole[starts[i]:starts[i] + counts[i]] for i in range(5)]
    assert [tf_ids(out, shard=(i, 5)) for i in range(5)] == parts
    assert record_ids(records.shard(0, 1)) == whole


def test_input_context_is_shard(out: str) -> None:
    import tensorflow as tf  # noqa: PLC0415

    for i in range(7):
        ctx = tf.distribute.InputContext(num_input_pipelines=7, input_pipeline_id=i)
        assert tf_ids(out, input_context=ctx) == tf_ids(out, shard=(i, 7))


def test_same_seed_same_order_per_host(out: str) -> None:
    for i in range(3):
        plain = tf_ids(out, shard=(i, 3))
        first = tf_ids(out, shard=(i, 3), shuffle_buffer=64, seed=11)
        again = tf_ids(out, shard=(i, 3), shuffle_buffer=64, seed=11)
        other = tf_ids(out, shard=(i, 3), shuffle_buffer=64, seed=12)
        assert first == again and first != plain and first != other
        assert sorted(first) == sorted(plain)


@pytest.mark.parametrize("spec,count", [("train[10%:]", 3), ("train[:50%]+test", 7),
                                        ("train+test", 5), ("train[10%:]", 5)])
def test_hosts_of_a_slice(out: str, spec: str, count: int) -> None:
    sliced = record_ids(open_records(out, spec))
    n = len(sliced)
    parts = [record_ids(open_records(out, spec).shard(i, count)) for i in range(count)]
    assert sorted(sum(parts, [])) == sorted(sliced) and len(sum(parts, [])) == n
    if spec == "train+test":  # 10 whole shards over 5 hosts: host i reads shard i of each
        def shard_ids(split: str, i: int) -> list[int]:
            records = open_records(out, split)
            starts = [0]
            for sh in records.shards:
                starts.append(starts[-1] + sh.num_records)
            return record_ids(records)[starts[i]:starts[i + 1]]

        assert parts == [shard_ids("train", i) + shard_ids("test", i) for i in range(count)]
    else:  # ranges, also when the count divides the pieces but the slice cuts a shard
        assert parts == [sliced[i * n // count:(i + 1) * n // count] for i in range(count)]
    assert [tf_ids(out, spec, shard=(i, count)) for i in range(count)] == parts


def test_as_many_hosts_as_records(out: str) -> None:
    records = open_records(out, "test")
    parts = [record_ids(records.shard(i, TEST)) for i in range(TEST)]
    assert parts == [[i] for i in record_ids(records)]
    with pytest.raises(RecordsError, match=r"split 'test': 38 hosts but 37 records; each host "
                                           r"needs at least one \(use at most 37 hosts\)$"):
        records.shard(0, TEST + 1)


@pytest.mark.parametrize("shard", [(3, 3), (-1, 2), (0, 0)])
def test_bad_shard_says_one_line(out: str, shard: tuple[int, int]) -> None:
    from etl.read.dataset import DatasetError, make_dataset  # noqa: PLC0415

    message = rf"shard=\(index, count\) needs 0 <= index < count, got \({shard[0]}, {shard[1]}\)$"
    with pytest.raises(RecordsError, match=message):
        open_records(out, "train").shard(*shard)
    with pytest.raises(DatasetError, match=message):
        make_dataset(out, shard=shard)
    with pytest.raises(DatasetError, match="pass shard=.index, count. or input_context=, not both"):
        make_dataset(out, shard=(0, 2), input_context=object())


def test_the_tf_distribute_example_runs(out: str) -> None:
    """docs/reading.md's tf.distribute line, with one CPU replica: every record once."""
    import tensorflow as tf  # noqa: PLC0415

    from etl.read.dataset import make_dataset  # noqa: PLC0415

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: make_dataset(out, split="train", seed=7, input_context=ctx,
                                 batch_size=ctx.get_per_replica_batch_size(128)))
    got = [i for batch in dist for i in batch["id"].numpy().tolist()]
    assert sorted(got) == list(range(TRAIN)) and got != sorted(got)


def test_torch_dataset_shard(out: str) -> None:
    pytest.importorskip("torch")
    from etl.read.torch_dataset import torch_dataset  # noqa: PLC0415

    parts = [torch_dataset(out, "train", shard=(i, 3)) for i in range(3)]
    got = [int(ds[j]["id"]) for ds in parts for j in range(len(ds))]
    assert got == record_ids(open_records(out, "train")) and [len(p) for p in parts] == [334, 334, 335]
