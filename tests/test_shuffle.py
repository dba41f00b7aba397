"""Keys, split assignment, spill files and shard planning: the pure parts of the shuffle."""

from __future__ import annotations

import os

import numpy as np
import pytest

from etl.formats.shards import ShardFormat
from etl.formats.tfrecord import read_file
from etl.shuffle import engine, files, keys, strategy_for
from etl.shuffle.files import HELD_PREFIX, HeldSpills, read_index, spills_for, write_spill
from etl.shuffle.planning import (
    MAX_INTERVALS,
    ShardPlan,
    ShuffleKeys,
    make_plan,
    num_shards_for,
)
from etl.shuffle.runs import MemorySlice, sorted_run
from etl.shuffle.shard_writer import write_shard


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


def _runs(n_blocks=5, per_block=1000, shuffled=True):
    runs, expected = [], []
    for b in range(n_blocks):
        pos = np.arange(per_block) + b * per_block
        ids = keys.record_ids(0, pos)
        k = keys.shuffle_keys(9, "f", pos) if shuffled else ids
        records = [f"rec-{p}".encode() for p in pos]
        expected += list(zip(k.tolist(), ids.tolist(), records, strict=True))
        runs.append(sorted_run("train", k, ids, records))
    expected.sort()
    return runs, [r for _, _, r in expected]


def _spills(tmp_path, n_blocks=5, per_block=1000, shuffled=True, held=None):
    runs, expected = _runs(n_blocks, per_block, shuffled)
    refs = [write_spill(str(tmp_path / f"s{b}.spill"), run, shuffled, held)
            for b, run in enumerate(runs)]
    return refs, expected


def _plan(refs_or_runs, num_shards, shuffled):
    stats = ShuffleKeys(shuffled)
    for r in refs_or_runs:
        stats.add(r.stats if isinstance(r, files.SpillRef) else r.stats(shuffled))
    return make_plan(stats, ("train",), num_shards, None, 1 << 40).shards["train"]


def _write_files(tmp_path, refs, plans, held=None):
    got, sizes, hashes = [], [], []
    for plan in plans:
        result = files.write_files_shard(plan, spills_for(plan, refs), str(tmp_path / "out"),
                                         ShardFormat(), held)
        records = [d for _, d in read_file(str(tmp_path / "out" / result.name))]
        assert result.num_records == len(records) == plan.take
        sizes.append(len(records))
        hashes.append(result.sha256)
        got += records
    return got, sizes, hashes


def test_spill_read_index_returns_exactly_the_key_range(tmp_path) -> None:
    refs, _ = _spills(tmp_path, n_blocks=1)
    lo, hi = 1 << 62, 1 << 63
    got = read_index(refs[0].path, lo, hi)
    got_keys, got_ids, got_offsets = got.index(0, len(got))
    assert np.all((got_keys >= np.uint64(lo)) & (got_keys < np.uint64(hi)))
    everything = read_index(refs[0].path, 0, 1 << 64)
    all_keys, all_ids, all_offsets = everything.index(0, len(everything))
    inside = (all_keys >= np.uint64(lo)) & (all_keys < np.uint64(hi))
    assert len(got) == len(got_keys) == int(inside.sum()) > 100
    assert len(everything) == 1000 and np.all(np.diff(all_keys.astype(np.float64)) > 0)
    assert np.array_equal(got_ids, all_ids[inside])
    # pieces of a slice: offsets relative to the first record asked for, payload exact
    k, i, o = got.index(3, 7)
    assert np.array_equal(k, got_keys[3:7]) and np.array_equal(o, got_offsets[3:8] - got_offsets[3])
    into = np.zeros(int(o[-1]), np.uint8)
    got.payload_into(3, 7, into)
    framed = into.tobytes()
    records = [framed[a:b][12:-4] for a, b in zip(o[:-1], o[1:], strict=True)]
    assert all(r.startswith(b"rec-") for r in records)  # spilled records are TFRecord-framed
    # the same bytes as those records' part of the whole run read at once
    whole = read_index(refs[0].path, 0, 1 << 64)
    ordinal = np.flatnonzero(inside)[3]
    run = np.zeros(int(all_offsets[-1]), np.uint8)
    whole.payload_into(0, len(whole), run)
    assert framed == run[all_offsets[ordinal]:all_offsets[ordinal + 4]].tobytes()
    # a spill cut short: an error naming it
    size = os.path.getsize(refs[0].path)
    with open(refs[0].path, "r+b") as fh:
        fh.truncate(size - 10)
    last = np.zeros(int(whole.index(990, 1000)[2][-1]), np.uint8)
    with pytest.raises(OSError, match=f"{refs[0].path}: spill section at byte 0 is truncated"):
        whole.payload_into(990, 1000, last)


def test_held_spills_stay_within_budget_and_write_the_same_shards(tmp_path) -> None:
    on_disk, expected = _spills(tmp_path / "disk")
    # 1000 records of "rec-N": ~23 KB framed + 24 KB of keys, ids and offsets per run
    held = HeldSpills(100_000)
    (tmp_path / "held").mkdir()
    mixed, _ = _spills(tmp_path / "held", held=held)
    assert [r.path.startswith(HELD_PREFIX) for r in mixed] == [True, True, False, False, False]
    assert 90_000 < held.used <= held.limit and len(held) == 2
    assert sorted(p.name for p in (tmp_path / "held").iterdir()) == ["s2.spill", "s3.spill",
                                                                      "s4.spill"]
    assert [r.stats.count for r in mixed] == [r.stats.count for r in on_disk]
    plans = _plan(on_disk, 3, True)
    assert _plan(mixed, 3, True) == plans
    disk_got, _, disk_hashes = _write_files(tmp_path / "disk", on_disk, plans)
    held_got, _, held_hashes = _write_files(tmp_path / "held", mixed, plans, held)
    assert disk_got == held_got == expected
    assert disk_hashes == held_hashes
    held.release()
    assert held.used == 0 and len(held) == 0
    with pytest.raises(OSError, match="held in the memory of another process"):
        read_index(mixed[0].path, 0, 1 << 64, held)
    with pytest.raises(OSError, match="held in the memory of another process"):
        read_index(mixed[0].path, 0, 1 << 64)  # a process without this run's store


@pytest.mark.parametrize("shuffled", [True, False])
@pytest.mark.parametrize("num_shards", [1, 3, 7, 16])
def test_shards_are_exact_rank_ranges_and_both_strategies_agree(tmp_path, shuffled,
                                                                 num_shards) -> None:
    refs, expected = _spills(tmp_path, shuffled=shuffled)
    plans = _plan(refs, num_shards, shuffled)
    assert [p.index for p in plans] == list(range(num_shards))
    got, sizes, hashes = _write_files(tmp_path, refs, plans)
    assert got == expected  # the concatenated shards are the global key order
    assert max(sizes) - min(sizes) <= 1
    if not shuffled:
        assert got == [f"rec-{i}".encode() for i in range(5000)]
    # engine: the same runs cut into chunks per shard, grouped by shard, give the same bytes
    runs, _ = _runs(shuffled=shuffled)
    grouped: dict[tuple[str, int], list[engine.Chunk]] = {}
    for run in runs:
        for key, chunk in engine.partition(run, plans):
            grouped.setdefault(key, []).append(chunk)
    assert len(sum(grouped.values(), [])) <= len(runs) * num_shards
    engine_hashes = [engine.write_engine_shard(p, grouped.get(("train", p.index), []),
                                               str(tmp_path / "engine"), ShardFormat()).sha256
                     for p in plans]
    assert engine_hashes == hashes


def test_more_shards_than_records_gives_empty_shards(tmp_path) -> None:
    refs, _ = _spills(tmp_path, n_blocks=1, per_block=3)
    plans = _plan(refs, 5, True)
    assert [p.take for p in plans] == [0, 1, 0, 1, 1]
    assert plans[0] == ShardPlan("train", 0, 5, 0, 0, 0, 0)
    assert spills_for(plans[0], refs) == ()


@pytest.mark.parametrize("shuffled", [True, False])
def test_each_shards_key_range_runs_from_its_first_records_interval_to_its_last(
        shuffled) -> None:
    """Shuffled: 65,536 histogram buckets of 2**48 keys each; input order: the runs' own
    [lowest, highest + 1) intervals. A shard covers the intervals of its first and last rank."""
    runs, _ = _runs(shuffled=shuffled)
    plans = _plan(runs, 7, shuffled)
    order = np.sort(np.concatenate([run.keys for run in runs]))
    bounds = sorted((int(run.keys[0]), int(run.keys[-1]) + 1) for run in runs)
    for p in plans:
        r0 = sum(q.take for q in plans[:p.index])  # the shard's ranks: [r0, r0 + take)
        first, last = int(order[r0]), int(order[r0 + p.take - 1])
        if shuffled:
            assert (p.key_lo, p.key_hi) == ((first >> 48) << 48, ((last >> 48) + 1) << 48)
        else:  # input order: each run is one interval, disjoint from the others
            lo = next(b for b in bounds if b[0] <= first < b[1])
            hi = next(b for b in bounds if b[0] <= last < b[1])
            assert (p.key_lo, p.key_hi) == (lo[0], hi[1])
    assert [type(v) for v in (plans[-1].key_lo, plans[-1].key_hi)] == [int, int]


def test_shard_count_from_size_and_budget() -> None:
    assert num_shards_for(1000, 4, None, 10_000) == (4, "")
    assert num_shards_for(1000, None, 300, 10_000) == (4, "")
    n, note = num_shards_for(10_000, 2, None, 1_000)
    assert n == 10 and "max_shard_bytes" in note
    stats = ShuffleKeys(True)
    for run in _runs()[0]:
        stats.add(run.stats(True))
    plan = make_plan(stats, ("train", "test"), 2, None, 10_000)
    total = stats.splits["train"].num_bytes
    needed = -(-total // 10_000)
    assert needed > 2 and [len(plan.shards["train"]), len(plan.shards["test"])] == [needed, 2]
    assert plan.notes == [f"split train: {num_shards_for(total, 2, None, 10_000)[1]}"]
    assert all(p.take == 0 for p in plan.shards["test"])


def test_input_order_intervals_are_capped_and_plans_stay_exact(tmp_path) -> None:
    """Over the cap, adjacent intervals are coalesced: memory stays bounded, shards exact."""
    refs, expected = _spills(tmp_path, n_blocks=40, per_block=50, shuffled=False)
    capped = ShuffleKeys(False, max_intervals=8)
    for i, ref in enumerate(refs[::-1]):  # any arrival order
        capped.add(ref.stats)
        if i % 7 == 0:  # and merged in any grouping
            other = ShuffleKeys(False, max_intervals=8)
            capped = other.merge(capped)
    capped.compact()
    split = capped.splits["train"]
    assert len(split.cnt) <= 8 and int(split.cnt.sum()) == 2000 == split.count
    assert np.all(split.lo[1:] >= split.hi[:-1])  # still disjoint, in key order
    plans = make_plan(capped, ("train",), 7, None, 1 << 40).shards["train"]
    got, sizes, _ = _write_files(tmp_path, refs, plans)
    assert got == expected and max(sizes) - min(sizes) <= 1
    assert MAX_INTERVALS == 65_536


def test_shuffled_histogram_is_fixed_size_whatever_the_number_of_blocks() -> None:
    stats = ShuffleKeys(True)
    runs, _ = _runs(n_blocks=20, per_block=100)
    for run in runs:
        stats.add(run.stats(True))
    assert stats.nbytes == (1 << 16) * 8 and stats.splits["train"].count == 2000
    assert int(stats.splits["train"].hist.sum()) == 2000


def test_strategy_is_chosen_in_one_place() -> None:
    assert strategy_for(None, "FnApiRunner") is files
    assert strategy_for(None, None) is files
    assert strategy_for(None, "apache_beam.runners.direct.DirectRunner") is files
    assert strategy_for(None, "DataflowRunner") is engine
    assert strategy_for("engine", "FnApiRunner") is engine
    assert strategy_for("files", "DataflowRunner") is files
    with pytest.raises(Exception, match="shuffle.via must be one of"):
        strategy_for("carrier-pigeon", None)


@pytest.mark.parametrize("shuffled", [True, False])
@pytest.mark.parametrize("budget", [1, 7, 300, 1 << 18])
def test_merge_in_rounds_equals_one_sort_whatever_the_budget(tmp_path, shuffled, budget) -> None:
    """The bounded-memory merge gives the order of one global (key, id) sort, trimmed to the
    planned ranks, for any budget (1 record per round up to all at once), with slices of
    very different lengths, empty ones, held and on disk."""
    from etl.shuffle.merge import merged_batches
    from etl.shuffle.runs import MemorySlice

    rng = np.random.default_rng(3)
    runs, _ = _runs(n_blocks=6, per_block=400, shuffled=shuffled)
    slices = []
    for b, run in enumerate(runs):
        a = int(rng.integers(0, 200))
        e = a + [0, 3, 150, 400, 50, 200][b]
        e = min(e, len(run.keys))
        if b % 2:
            path = str(tmp_path / f"r{b}.spill")
            write_spill(path, run, shuffled)
            sl = read_index(path, 0, 1 << 64)
            sl.a, sl.b = a, e
        else:
            sl = MemorySlice(run.keys, run.ids, run.offsets, run.payload, a, e)
        slices.append(sl)
    every = [(int(k), int(i), s, j) for s, sl in enumerate(slices)
             for j, (k, i) in enumerate(zip(*sl.index(0, len(sl))[:2], strict=True))]
    every.sort()
    for skip, take in [(0, len(every)), (5, 100), (len(every) - 3, 3), (10, 0)]:
        got = []
        for src, local, ids, sizes in merged_batches(slices, skip, take, budget):
            assert len(src) <= max(budget, 6)
            got += list(zip(src.tolist(), local.tolist(), strict=True))
            for s, j, i, z in zip(src.tolist(), local.tolist(), ids.tolist(), sizes.tolist(),
                                  strict=True):
                _, ii, oo = slices[s].index(j, j + 1)
                assert int(ii[0]) == i and int(oo[-1]) == z
        assert got == [(s, j) for _, _, s, j in every[skip : skip + take]]


@pytest.mark.parametrize("budget", [2, 5, 64, 1 << 12])
@pytest.mark.parametrize("count", [5, 40])  # a round's sort: timsort of the runs, or the default
def test_merge_with_tied_keys_orders_them_by_id(budget, count) -> None:
    """Keys that tie across slices (records of several files may share a key) come out in
    id order, also when the round's frontier falls inside a run of tied keys: the cut is
    counted on the unsorted block, ties decided by id; with few slices (timsort of the runs)
    and with more than TIMSORT_RUNS (the default sort), which sort nothing else decides."""
    from etl.shuffle.merge import merged_batches
    from etl.shuffle.runs import TIMSORT_RUNS, MemorySlice

    assert 5 <= TIMSORT_RUNS < 40
    rng = np.random.default_rng(11)
    slices, every = [], []
    for s in range(count):
        n = int(rng.integers(20, 60))
        keys = rng.integers(0, 6, n, dtype=np.uint64)  # six distinct keys in all: many ties
        ids = rng.choice(10_000, n, replace=False).astype(np.uint64) + np.uint64(s * 10_000)
        order = np.lexsort((ids, keys))
        keys, ids = keys[order], ids[order]
        offsets = np.arange(n + 1, dtype=np.int64) * 3
        slices.append(MemorySlice(keys, ids, offsets, b"\0" * int(offsets[-1]), 0, n))
        every += [(int(k), int(i)) for k, i in zip(keys, ids, strict=True)]
    every.sort()
    got = []
    for src, local, ids, _ in merged_batches(slices, 0, len(every), budget):
        got += [(int(slices[s].keys[j]), int(i))
                for s, j, i in zip(src.tolist(), local.tolist(), ids.tolist(), strict=True)]
    assert got == every


def test_merge_rounds_do_not_grow_with_the_number_of_slices() -> None:
    """A shard merged from 128 runs takes about as many rounds as one merged from 4 (each
    round sorts up to the whole budget): reloading only used-up blocks took 4 rounds per
    slice, so the merge cost grew with records x runs, the square of the input (issue 29)."""
    from etl.shuffle.merge import merged_batches
    from etl.shuffle.runs import MemorySlice

    rng = np.random.default_rng(7)

    def rounds(k: int, n: int = 131_072, budget: int = 1 << 14) -> int:
        slices = []
        for _ in range(k):
            keys = np.sort(rng.integers(0, 2**63, n // k, dtype=np.uint64))
            ids = np.arange(len(keys), dtype=np.uint64)
            offsets = np.arange(len(keys) + 1, dtype=np.int64) * 10
            slices.append(MemorySlice(keys, ids, offsets, b"\0" * int(offsets[-1]), 0,
                                      len(keys)))
        batches = list(merged_batches(slices, 0, n, budget))
        assert sum(len(b[0]) for b in batches) == n
        return len(batches)

    few, many = rounds(4), rounds(128)
    assert few <= 2 * 131_072 // (1 << 14) + 2  # about half the budget emitted per round
    assert many <= few + 2, (few, many)


@pytest.mark.parametrize("ordinals", [(0,), (0, 2, 5), (3, 70_000, 200_000)],
                         ids=["one_file", "near_ordinals", "far_ordinals"])
def test_a_shard_counts_its_records_per_input_file(tmp_path, ordinals) -> None:
    """Each run holds one input file's records (id = ordinal << 40 | position); the shard
    merged from all of them reports exactly how many came from each file, whether its pieces
    hold one file, files of nearby ordinals or of far ones."""
    rng = np.random.default_rng(5)
    slices, want = [], {}
    for f, ordinal in enumerate(ordinals):
        n = 700 + 300 * f
        ids = (np.uint64(ordinal) << np.uint64(keys.ID_POSITION_BITS)) + np.arange(n, dtype=np.uint64)
        run = sorted_run("train", (rng.permutation(n) * len(ordinals) + f).astype(np.uint64),
                         ids, [b"x" * (i % 7) for i in range(n)])
        slices.append(MemorySlice(run.keys, run.ids, run.offsets, run.payload))
        want[str(ordinal)] = n
    total = sum(want.values())
    result = write_shard(ShardPlan("train", 0, 1, 0, 1 << 64, 0, total), slices, str(tmp_path),
                         ShardFormat.of())
    assert result.per_input == want
    assert result.num_records == total == len(list(read_file(str(tmp_path / result.name))))
