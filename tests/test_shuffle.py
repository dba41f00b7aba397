"""Keys, split assignment, spill files and shard planning: the pure parts of the shuffle."""

from __future__ import annotations

import numpy as np
import pytest

from etl import keys
from etl.planning import ShardPlan, num_shards_for, plan_split
from etl.shard_writer import write_shard
from etl.spill import HELD, HELD_PREFIX, MemoryBudget, read_index, write_spill
from etl.tfrecord import read_file


def test_keys_are_deterministic_and_distinct_within_a_file() -> None:
    pos = np.arange(100_000)
    a = keys.shuffle_keys(42, "data/a.csv", pos)
    assert np.array_equal(a, keys.shuffle_keys(42, "data/a.csv", pos))
    assert len(np.unique(a)) == len(a)
    assert not np.array_equal(a, keys.shuffle_keys(43, "data/a.csv", pos))
    assert not np.array_equal(a, keys.shuffle_keys(42, "data/b.csv", pos))
    # a block's keys do not depend on how the file was cut into blocks
    assert np.array_equal(a[500:700], keys.shuffle_keys(42, "data/a.csv", pos[500:700]))


def test_keys_are_uniform() -> None:
    k = keys.shuffle_keys(1, "f", np.arange(200_000))
    buckets = np.bincount((k >> np.uint64(60)).astype(np.int64), minlength=16)
    expected = len(k) / 16
    chi2 = float(((buckets - expected) ** 2 / expected).sum())
    assert chi2 < 40  # 15 degrees of freedom: p < 0.001 above 37.7


def test_split_assignment_fractions_and_stability() -> None:
    k = keys.shuffle_keys(3, "f", np.arange(100_000))
    which = keys.assign_splits(k, [0.8, 0.1, 0.1])
    counts = np.bincount(which, minlength=3) / len(k)
    assert np.allclose(counts, [0.8, 0.1, 0.1], atol=0.005)
    assert np.array_equal(which, keys.assign_splits(k.copy(), [0.8, 0.1, 0.1]))


def test_identities_strip_common_root() -> None:
    ids = keys.identities(["/data/x/train/a.csv", "/data/x/test/b.csv"])
    assert ids == {"/data/x/train/a.csv": "train/a.csv", "/data/x/test/b.csv": "test/b.csv"}
    assert keys.identities(["/somewhere/else/a.csv"]) == {"/somewhere/else/a.csv": "a.csv"}


def test_record_ids_keep_input_order() -> None:
    ids = np.concatenate([keys.record_ids(0, np.arange(5)), keys.record_ids(1, np.arange(3))])
    assert np.all(np.diff(ids.astype(np.float64)) > 0)


def _spills(tmp_path, n_blocks=5, per_block=1000, shuffled=True, memory=None):
    metas, expected = [], []
    for b in range(n_blocks):
        pos = np.arange(per_block) + b * per_block
        ids = keys.record_ids(0, pos)
        k = keys.shuffle_keys(9, "f", pos) if shuffled else ids
        records = [f"rec-{p}".encode() for p in pos]
        expected += list(zip(k.tolist(), ids.tolist(), records, strict=True))
        metas.append(write_spill(str(tmp_path / f"s{b}.spill"), "train", k, ids, records,
                                 histogram=shuffled, memory=memory))
    expected.sort()
    return metas, [r for _, _, r in expected]


def test_spill_read_index_returns_exactly_the_key_range(tmp_path) -> None:
    metas, _ = _spills(tmp_path, n_blocks=1)
    lo, hi = 1 << 62, 1 << 63
    got = read_index(metas[0].path, lo, hi)
    assert np.all((got.keys >= np.uint64(lo)) & (got.keys < np.uint64(hi)))
    everything = read_index(metas[0].path, 0, 1 << 64)
    inside = (everything.keys >= np.uint64(lo)) & (everything.keys < np.uint64(hi))
    assert len(got.keys) == int(inside.sum())
    assert len(everything.keys) == 1000
    first = got.payload(0, 1)
    assert first[12:-4].startswith(b"rec-")  # spilled records are TFRecord-framed


def test_held_spills_stay_within_budget_and_write_the_same_shards(tmp_path) -> None:
    on_disk, expected = _spills(tmp_path / "disk")
    # 1000 records of "rec-N": ~23 KB framed + 24 KB of keys, ids and offsets per spill
    budget = MemoryBudget(str(tmp_path / "held"), 100_000)
    try:
        mixed, _ = _spills(tmp_path / "held", memory=budget)
        held = [m.path.startswith(HELD_PREFIX) for m in mixed]
        assert held == [True, True, False, False, False]
        assert 90_000 < HELD.used(budget.group) <= budget.limit
        assert sorted(p.name for p in (tmp_path / "held").iterdir()) == ["s2.spill", "s3.spill",
                                                                          "s4.spill"]
        assert [(m.count, m.num_bytes, m.key_min, m.key_max, m.histogram) for m in mixed] == \
            [(m.count, m.num_bytes, m.key_min, m.key_max, m.histogram) for m in on_disk]
        for metas, where in ((on_disk, "disk"), (mixed, "held")):
            got = []
            for plan in plan_split("train", metas, 3, shuffled=True):
                result = write_shard(plan, str(tmp_path / where / "out"), "none")
                got += [d for _, d in read_file(str(tmp_path / where / "out" / result.name))]
            assert got == expected, where
    finally:
        HELD.release(budget.group)
    assert HELD.used(budget.group) == 0
    with pytest.raises(OSError, match="held in the memory of another process"):
        read_index(mixed[0].path, 0, 1 << 64)


@pytest.mark.parametrize("shuffled", [True, False])
@pytest.mark.parametrize("num_shards", [1, 3, 7, 16])
def test_shards_are_exact_rank_ranges(tmp_path, shuffled, num_shards) -> None:
    metas, expected = _spills(tmp_path, shuffled=shuffled)
    plans = plan_split("train", metas, num_shards, shuffled)
    assert [p.index for p in plans] == list(range(num_shards))
    got: list[bytes] = []
    sizes = []
    for plan in plans:
        result = write_shard(plan, str(tmp_path / "out"), "none")
        records = [d for _, d in read_file(str(tmp_path / "out" / result.name))]
        assert result.num_records == len(records)
        sizes.append(len(records))
        got += records
    assert got == expected  # the concatenated shards are the global key order
    assert max(sizes) - min(sizes) <= 1
    if not shuffled:
        assert got == [f"rec-{i}".encode() for i in range(5000)]


def test_more_shards_than_records_gives_empty_shards(tmp_path) -> None:
    metas, _ = _spills(tmp_path, n_blocks=1, per_block=3)
    plans = plan_split("train", metas, 5, True)
    assert [p.take for p in plans] == [0, 1, 0, 1, 1]
    assert plans[0] == ShardPlan("train", 0, 5, 0, 0, 0, 0, ())


def test_shard_count_from_size_and_budget() -> None:
    assert num_shards_for(1000, 4, None, 10_000) == (4, "")
    assert num_shards_for(1000, None, 300, 10_000) == (4, "")
    n, note = num_shards_for(10_000, 2, None, 1_000)
    assert n == 10 and "max_shard_bytes" in note
