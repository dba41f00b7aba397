"""etl.shuffle.placement: records written straight to their place must give the bytes the
merge gives, whether every record was placed (the direct path), some were not (rejected,
lost, of another size: the placed ones become one more run to merge), or none could be.

The shard writer is called as the `files` strategy calls it, without Beam: runs as stage 1
makes them (etl.shuffle.runs.sorted_run), planned as the planner plans them, each shard
written once from spills on disk and once through a placement, then compared byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etl.formats.shards import ShardFormat
from etl.shuffle import files, keys, placement
from etl.shuffle.placement import InputFile, Placement
from etl.shuffle.planning import ShuffleKeys, make_plan
from etl.shuffle.runs import SortedRun, sorted_run

SEED = 11
FILES = [InputFile("train", "a.idx", 0, 2_500), InputFile("train", "b.idx", 1, 1_700)]
FRAME = 40 + 16  # records() of 40 bytes, framed


def records(ordinal: int, positions: np.ndarray, width: int = 40) -> list[bytes]:
    """One record per position, `width` bytes, naming its file and position."""
    return [(b"%d:%07d|" % (ordinal, p)).ljust(width, b".") for p in positions.tolist()]


def runs(files_: list[InputFile], block: int = 600, drop: frozenset[int] = frozenset(),
         wide: frozenset[int] = frozenset(), seed: int | None = SEED,
         fractions: dict[str, float] | None = None) -> list[SortedRun]:
    """Stage 1's runs of these files, blocks of `block` records: positions in `drop` are left
    out (rejected), blocks whose first position is in `wide` have longer records."""
    out = []
    for f in files_:
        for start in range(0, f.count, block):
            pos = np.array([p for p in range(start, min(f.count, start + block))
                            if p not in drop], np.int64)
            hashed = keys.shuffle_keys(seed or 0, f.identity, pos)
            ids = keys.record_ids(f.ordinal, pos)
            sort_keys = hashed if seed is not None else ids
            recs = records(f.ordinal, pos, 56 if start in wide else 40)
            if fractions:
                which = keys.assign_splits(hashed, list(fractions.values()))
                for i, name in enumerate(fractions):
                    mine = np.flatnonzero(which == i)
                    out.append(sorted_run(name, sort_keys[mine], ids[mine], [recs[k] for k in mine]))
            else:
                out.append(sorted_run(f.split, sort_keys, ids, recs))
    return out


def write_all(tmp: Path, runs_: list[SortedRun], held: files.HeldSpills, splits: tuple[str, ...],
              shuffled: bool = True, fmt: ShardFormat | None = None) -> dict[str, str]:
    """Every shard of these runs, written as the files strategy writes them: name -> sha256
    (and "placed runs" -> how many runs went to the placement)."""
    fmt = fmt or ShardFormat.of("tfrecord", "none", True)
    tmp.mkdir(parents=True, exist_ok=True)
    refs = [files.write_spill(str(tmp / f"{i}.spill"), run, shuffled, held)
            for i, run in enumerate(runs_)]
    stats = ShuffleKeys(shuffled)
    for ref in refs:
        stats.add(ref.stats)
    plan = make_plan(stats, splits, 3, None, 1 << 40)
    out = {"placed runs": str(sum(r.path.startswith(placement.PREFIX) for r in refs))}
    for split in splits:
        for shard in plan.shards[split]:
            result = files.write_files_shard(shard, files.spills_for(shard, refs), str(tmp / "out"),
                                             fmt, held)
            out[result.name] = result.sha256
            assert result.num_records == shard.take
            assert sum(result.per_input.values()) == shard.take
    return out


def placed(tmp: Path, runs_: list[SortedRun], plan: Placement | None, splits=("train",),
           **kw) -> tuple[dict[str, str], files.HeldSpills]:
    held = files.HeldSpills(64 << 20)
    held.plan_placement(lambda: plan)
    return write_all(tmp, runs_, held, splits, **kw), held


def spilled(tmp: Path, runs_: list[SortedRun], splits=("train",), **kw) -> dict[str, str]:
    """The same shards from spill files only (no placement, nothing held)."""
    return write_all(tmp, runs_, files.HeldSpills(0), splits, **kw)


def shards(got: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in got.items() if k != "placed runs"}


def test_every_record_placed_writes_the_merges_bytes_from_one_slice(tmp_path: Path,
                                                                   monkeypatch) -> None:
    merged = []
    monkeypatch.setattr(files, "write_shard", lambda *a, **k: merged.append(1))  # never called
    got, held = placed(tmp_path / "p", runs(FILES), Placement.plan(FILES, SEED, {}, FRAME))
    monkeypatch.undo()
    assert held.placement is not None and held.placement.split("train").complete()
    assert merged == []  # every shard took the direct path
    want = spilled(tmp_path / "s", runs(FILES))
    assert shards(got) == shards(want) and len(shards(want)) == 3
    assert (got["placed runs"], want["placed runs"]) == (str(len(runs(FILES))), "0")


def test_shards_are_the_same_with_index_gzip_and_in_input_order(tmp_path: Path) -> None:
    gz = ShardFormat.of("tfrecord", "gzip", False)
    got = placed(tmp_path / "p", runs(FILES), Placement.plan(FILES, SEED, {}, FRAME), fmt=gz)[0]
    assert shards(got) == shards(spilled(tmp_path / "s", runs(FILES), fmt=gz))
    assert all(name.endswith(".tfrecord.gz") for name in shards(got))
    ordered = runs(FILES, seed=None)
    got, held = placed(tmp_path / "po", ordered, Placement.plan(FILES, None, {}, FRAME), shuffled=False)
    assert held.placement is not None and held.placement.split("train").complete()
    assert shards(got) == shards(spilled(tmp_path / "so", runs(FILES, seed=None), shuffled=False))


def test_splits_by_fraction_each_get_their_placement(tmp_path: Path) -> None:
    fractions = {"train": 0.8, "test": 0.2}
    undivided = [InputFile(None, f.identity, f.ordinal, f.count) for f in FILES]
    plan = Placement.plan(undivided, SEED, fractions, FRAME)
    assert plan is not None and set(plan.splits) == {"train", "test"}
    assert plan.split("train").count + plan.split("test").count == 4_200
    splits = ("train", "test")
    got, held = placed(tmp_path / "p", runs(FILES, fractions=fractions), plan, splits)
    assert all(held.placement.split(s).complete() for s in splits)  # type: ignore[union-attr]
    assert shards(got) == shards(spilled(tmp_path / "s", runs(FILES, fractions=fractions), splits))
    assert len(shards(got)) == 6


@pytest.mark.parametrize("case", ["rejected", "wider_block", "lost_block"])
def test_a_split_not_wholly_placed_merges_its_placed_records_with_the_rest(
        tmp_path: Path, monkeypatch, case: str) -> None:
    """Rejected records (positions missing), a block of another frame size (spilled), or a
    block that never came (a file shorter than its header): never the direct path. The
    placed records are compacted in place, here 100 rows at a time (many chunks)."""
    monkeypatch.setattr(placement, "_COMPACT_ROWS", 100)
    kw = {"rejected": {"drop": frozenset({0, 7, 601, 2_499})},
          "wider_block": {"wide": frozenset({1_800})}}.get(case, {})  # one block of a.idx
    made = runs(FILES, **kw)
    if case == "lost_block":
        made = made[:-1]
    got, held = placed(tmp_path / "p", made, Placement.plan(FILES, SEED, {}, FRAME))
    split = held.placement.split("train")  # type: ignore[union-attr]
    assert not split.complete()
    assert shards(got) == shards(spilled(tmp_path / "s", made))
    if case == "wider_block":  # a.idx's blocks before it placed; it and every later one spilled
        assert (got["placed runs"], int(split.placed.sum())) == ("3", 1_800)
    else:
        assert (got["placed runs"], int(split.placed.sum())) == (
            str(len(made)), sum(len(r.keys) for r in made))


def test_no_placement_beyond_its_limit(tmp_path: Path) -> None:
    fits = 4_200 * (FRAME + placement.PER_RECORD)
    assert Placement.plan(FILES, SEED, {}, FRAME, limit=fits) is not None
    assert Placement.plan(FILES, SEED, {}, FRAME, limit=fits - 1) is None
    assert Placement.plan([], SEED, {}, FRAME) is None
    got, held = placed(tmp_path / "p", runs(FILES), None)  # every run spills
    assert held.placement is None and got["placed runs"] == "0"
    assert shards(got) == shards(spilled(tmp_path / "s", runs(FILES)))


def test_ranks_are_the_key_order_of_all_the_splits_records() -> None:
    plan = Placement.plan(FILES, SEED, {}, FRAME)
    assert plan is not None
    split = plan.split("train")
    every = np.concatenate([keys.shuffle_keys(SEED, f.identity, np.arange(f.count))
                            for f in FILES])
    assert np.array_equal(split.keys, np.sort(every))
    for f in FILES:
        mine = keys.shuffle_keys(SEED, f.identity, np.arange(f.count))
        assert np.array_equal(split.keys[split.ranks[f.ordinal]], mine)
        assert np.array_equal(split.ids[split.ranks[f.ordinal]],
                              keys.record_ids(f.ordinal, np.arange(f.count)))


def test_a_placed_path_read_elsewhere_is_an_error_naming_it(tmp_path: Path) -> None:
    plan = Placement.plan(FILES, SEED, {}, FRAME)
    held = files.HeldSpills(64 << 20)
    held.plan_placement(lambda: plan)
    ref = files.write_spill(str(tmp_path / "x.spill"), runs(FILES)[0], True, held)
    assert ref.path == placement.PREFIX + "train"
    stats = ShuffleKeys(True)
    stats.add(ref.stats)
    shard = make_plan(stats, ("train",), 1, None, 1 << 40).shards["train"][0]
    with pytest.raises(OSError, match="placed:train: these records were placed in the memory "
                                      "of another process"):
        files.write_files_shard(shard, (ref.path,), str(tmp_path / "out"),
                                ShardFormat.of("tfrecord", "none", False), None)


def test_release_frees_the_buffers(tmp_path: Path) -> None:
    got, held = placed(tmp_path / "p", runs(FILES), Placement.plan(FILES, SEED, {}, FRAME))
    split = held.placement.split("train")  # type: ignore[union-attr]
    assert split.complete()
    held.release()
    assert not split.complete()
    assert held.placement.place(runs(FILES)[0]) is False  # type: ignore[union-attr]
    assert len(shards(got)) == 3


# ---- end to end: the local runner, in this process ----------------------------------------

def _idx_pair(folder: Path, labels: np.ndarray, truncate: int = 0) -> dict[str, dict[str, object]]:
    """MNIST-shaped IDX images and these labels; `truncate` bytes cut off the images file
    (uncompressed), whose header then promises records it does not hold."""
    from etl.formats.idx import write_idx  # noqa: PLC0415 - the end-to-end tests' only need

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(labels))
    write_idx(str(folder / "images-idx3-ubyte"), rng.integers(0, 256, (len(labels), 28, 28),
                                                               dtype=np.uint8))
    write_idx(str(folder / "labels-idx1-ubyte"), labels)
    if truncate:
        data = (folder / "images-idx3-ubyte").read_bytes()
        (folder / "images-idx3-ubyte").write_bytes(data[:-truncate])
    return {"format": "idx", "paths": {"image": "images-idx3-ubyte", "label": "labels-idx1-ubyte"}}


def _direct_writes(monkeypatch) -> list[int]:
    """One entry per shard written straight from a placement (files.write_placed)."""
    direct: list[int] = []
    real = files.write_placed
    monkeypatch.setattr(files, "write_placed", lambda *a, **k: direct.append(1) or real(*a, **k))
    return direct


def _npy_both_ways(tmp: Path, x: np.ndarray, y: np.ndarray, schema: dict, block_rows: int,
                   shards: int) -> dict[str, dict[str, str]]:
    """The arrays as x.npy and y.npy, converted by the files strategy (placed) and by the
    engine (never placed): each one's shard hashes."""
    from tests.pipelines import convert, shard_hashes  # noqa: PLC0415 - Beam-side tests

    got = {}
    for via in ("files", "engine"):
        (tmp / via).mkdir()
        np.save(tmp / via / "x.npy", x)
        np.save(tmp / via / "y.npy", y)
        sources = {"train": {"format": "npy", "paths": {"x": "x.npy", "y": "y.npy"},
                             "block_rows": block_rows}}
        got[via] = shard_hashes(convert(tmp / via, sources, schema=schema, via=via,
                                        shards=shards))
    return got


@pytest.mark.slow
@pytest.mark.parametrize("case", ["small_labels", "labels_of_two_sizes", "truncated", "fractions"])
def test_a_run_writes_what_the_engine_writes(tmp_path: Path, monkeypatch, case: str) -> None:
    """The files strategy on the local runner (placement on when it applies) against the
    engine strategy (never placed): the same shards. Labels up to 255 make frames of two
    sizes (varint of 1 or 2 bytes): those runs spill, the rest is placed, and merged."""
    import etl  # noqa: PLC0415 - Beam-side tests: heavy imports only here
    from tests.pipelines import convert, shard_hashes  # noqa: PLC0415

    direct = _direct_writes(monkeypatch)
    labels = (np.arange(3_000) % (256 if case == "labels_of_two_sizes" else 10)).astype(np.uint8)
    allowed = {"max_bad_fraction": 0.01} if case == "truncated" else {}  # 5 records lost
    schema = etl.load_schema("schemas/mnist.yaml").to_dict()
    got = {}
    for via in ("files", "engine"):
        source = _idx_pair(tmp_path / via, labels, truncate=784 * 5 if case == "truncated" else 0)
        sources = ({"source": {**source, "block_rows": 500}, "split": {"train": 0.7, "test": 0.3}}
                   if case == "fractions" else {"train": {**source, "block_rows": 500}})
        got[via] = shard_hashes(convert(tmp_path / via, sources, schema=schema, via=via, shards=3,
                                        **allowed))
    assert got["files"] == got["engine"]
    assert len(got["files"]) == (6 if case == "fractions" else 3)
    # the direct path exactly where every record could be placed
    assert len(direct) == {"small_labels": 3, "fractions": 6}.get(case, 0)


@pytest.mark.slow
def test_npy_arrays_are_placed_and_written_as_the_engine_writes(tmp_path: Path, monkeypatch) -> None:
    direct = _direct_writes(monkeypatch)
    rng = np.random.default_rng(3)
    x = rng.random((2_500, 4), dtype=np.float32)
    y = rng.integers(0, 100, 2_500)
    schema = {"name": "arrays", "kind": "example",
              "features": {"x": {"dtype": "float32", "shape": [4]},
                           "y": {"dtype": "int64", "shape": []}}}
    got = _npy_both_ways(tmp_path, x, y, schema, block_rows=700, shards=2)
    assert got["files"] == got["engine"] and len(got["files"]) == 2
    assert len(direct) == 2


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["read", "write:shard"])
def test_a_signal_while_records_are_placed_or_written_leaves_the_old_output(
        tmp_path: Path, phase: str) -> None:
    """SIGTERM while a placed run places its blocks (read) or writes a shard from the
    placement (write:shard): the run says so in one line, exit 143, the previous output
    byte for byte, nothing left beside it."""
    import signal  # noqa: PLC0415 - the signal tests' own needs
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from tests.helpers import ROOT, RUN, digest, leftovers  # noqa: PLC0415
    from tests.jobs import OLD  # noqa: PLC0415
    from tests.test_signals import assert_interrupted, signal_at, start  # noqa: PLC0415

    data = tmp_path / "job"
    source = _idx_pair(data, (np.arange(3_000) % 10).astype(np.uint8))
    out = str(tmp_path / "out")
    (data / "job.yaml").write_text(
        f"schema: {ROOT}/schemas/mnist.yaml\noutput: {out}\nshards: 3\n"
        "sources:\n  train: {format: idx, block_rows: 500, paths: {image: "
        f"{source['paths']['image']}, label: {source['paths']['label']}}}}}\n")  # type: ignore[index]
    job = str(data / "job.yaml")
    first = subprocess.run([sys.executable, RUN, "run", job], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    before = digest(out)
    _idx_pair(data, (np.arange(3_000) % 7).astype(np.uint8))  # the interrupted run's data
    proc = start(["run", job], phase, tmp_path / "pause")
    _, err = signal_at(proc, phase, tmp_path / "pause", signal.SIGTERM)
    assert_interrupted(proc, err, signal.SIGTERM, OLD)
    assert digest(out) == before
    assert leftovers(out) == []


@pytest.mark.slow
def test_scikit_learns_digits_are_placed_and_read_back_value_for_value(tmp_path: Path,
                                                                      monkeypatch) -> None:
    """Public data (scikit-learn's 1,797 digits, 8x8 images of 0-16, labels 0-9) as npy
    arrays: placed (every shard by the direct path), the same shards as the engine writes,
    and every image and label read back equal to the arrays', each record once."""
    from collections import Counter  # noqa: PLC0415 - the end-to-end tests' own needs

    from sklearn.datasets import load_digits  # noqa: PLC0415

    import etl  # noqa: PLC0415
    from tests.pipelines import manifest  # noqa: PLC0415

    direct = _direct_writes(monkeypatch)
    digits = load_digits()
    x, y = digits.images.astype(np.uint8), digits.target.astype(np.int64)
    assert np.array_equal(x, digits.images)  # 0-16: uint8 holds them exactly
    schema = {"name": "digits", "kind": "example", "features": {
        "x": {"dtype": "uint8", "shape": [8, 8], "encoding": "raw"},
        "y": {"dtype": "int64", "shape": []}}}
    got = _npy_both_ways(tmp_path, x, y, schema, block_rows=500, shards=3)
    assert got["files"] == got["engine"] and len(direct) == 3
    out = str(tmp_path / "files" / "out")
    assert [(i["read"], i["written"]) for i in manifest(out)["inputs"]] == [(1_797, 1_797)]
    back: Counter[tuple[bytes, int]] = Counter()
    for batch in etl.make_dataset(out, split="train"):
        for image, label in zip(batch["x"].numpy(), batch["y"].numpy(), strict=True):
            back[(image.tobytes(), int(label))] += 1
    assert back == Counter((image.tobytes(), int(label)) for image, label in zip(x, y, strict=True))
