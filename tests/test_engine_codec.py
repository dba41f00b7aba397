"""What the `engine` strategy sends through the runner's shuffle (etl.shuffle.chunk_codec,
transforms/coders.py): chunks and runs round-trip exactly, travel compressed, always encode
to the same bytes, and damaged bytes are an error naming the shard (or the run's split),
never a wrong record."""

from __future__ import annotations

import os

import numpy as np
import pytest

from etl.base.errors import StorageError
from etl.formats.shards import ShardFormat
from etl.shuffle import chunk_codec, engine
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import SortedRun, sorted_run
from tests.pipelines import convert, grouped_chunks, shard_hashes, write_csv
from transforms.coders import ChunkCoder, SortedRunCoder


def _arrays(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, bytes]:
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.integers(0, 1 << 64, n, dtype=np.uint64))
    ids = rng.integers(0, 1 << 63, n, dtype=np.uint64)
    records = [b"record %d " % i + b"x" * int(rng.integers(0, 40)) for i in range(n)]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in records])]).astype(np.int64)
    return keys, ids, offsets, b"".join(records)


def _same(got, want) -> None:
    keys, ids, offsets, payload = got
    assert keys.dtype == np.uint64 and ids.dtype == np.uint64 and offsets.dtype == np.int64
    assert keys.tolist() == want[0].tolist()
    assert ids.tolist() == want[1].tolist()
    assert offsets.tolist() == want[2].tolist()
    assert bytes(payload) == bytes(want[3])


@pytest.mark.parametrize("n", [0, 1, 7, 1024, 1025, 5000])
def test_a_chunk_round_trips_through_its_coder_exactly(n) -> None:
    want = _arrays(n)
    coder = ChunkCoder()
    chunk = engine.Chunk.of(*want)
    encoded = coder.encode(chunk)
    back = coder.decode(encoded)
    assert back == chunk and len(back) == n
    _same(back.unpack("shard train 0"), want)
    assert coder.encode(engine.Chunk.of(*want)) == encoded  # deterministic
    assert encoded[:4] == b"TFRS"


def test_the_empty_chunk_round_trips() -> None:
    coder = ChunkCoder()
    back = coder.decode(coder.encode(engine.EMPTY))
    assert len(back) == 0
    keys, ids, offsets, payload = back.unpack("shard train 0")
    assert (len(keys), len(ids), offsets.tolist(), bytes(payload)) == (0, 0, [0], b"")


def test_a_chunk_cut_from_a_run_holds_that_slice_and_travels_compressed() -> None:
    plans, grouped = grouped_chunks(n_blocks=2, per_block=3000, shards=3, pad=200)
    coder = ChunkCoder()
    for chunks in grouped.values():
        for chunk in chunks[1:]:  # after the EMPTY one
            keys, ids, offsets, payload = coder.decode(coder.encode(chunk)).unpack("x")
            assert len(keys) == len(chunk) > 0
            assert (np.diff(keys.astype(object)) >= 0).all()  # still sorted
            raw = 24 * len(keys) + len(payload)
            assert len(chunk.data) < raw / 4  # 'x' padding: compressed, not just framed
            # the payload's records are the framed records of the ids (the run's bytes)
            first = bytes(payload)[12 : 12 + 8]
            assert int(first) == int(ids[0])


def test_a_sorted_run_round_trips_through_its_coder_exactly() -> None:
    keys, ids, offsets, payload = _arrays(3000, seed=3)
    run = SortedRun("valid", keys, ids, offsets, payload)
    coder = SortedRunCoder()
    encoded = coder.encode(run)
    back = coder.decode(encoded)
    assert isinstance(back, engine.PackedRun) and back.split == "valid"
    assert [t[0] for t in back.packed.table] == [1024, 1024, 952]  # segments of SEGMENT
    packed = back.packed
    _same((packed.keys, packed.ids, packed.offsets, packed.payload()),
          (keys, ids, offsets, payload))
    assert coder.encode(back) == encoded == coder.encode(run)  # deterministic, re-encodable
    empty = coder.decode(coder.encode(SortedRun("train", keys[:0], ids[:0],
                                                np.zeros(1, np.int64), b"")))
    assert (empty.split, len(empty.keys), empty.packed.offsets.tolist()) == ("train", 0, [0])


@pytest.mark.parametrize("cuts", [[0, 3000], [0, 1024, 2048, 3000], [0, 1, 1500, 2999, 3000],
                                  [0, 1000, 1030, 2100, 3000], [0, 0, 3000]])
def test_a_packed_run_cuts_into_chunks_that_hold_exactly_its_records(cuts) -> None:
    """What partition does with a run that came through the runner: whole segments pass
    through, cut ones are recompressed; every chunk unpacks to exactly its records."""
    want = _arrays(3000, seed=4)
    packed = chunk_codec.open_packed(chunk_codec.pack(*want), "a run")
    keys, ids, offsets, payload = want
    for a, b in zip(cuts, cuts[1:], strict=False):
        data = chunk_codec.cut(packed, a, b)
        assert data == chunk_codec.cut(packed, a, b)  # deterministic
        got = chunk_codec.unpack(data, "shard train 0")
        _same(got, (keys[a:b], ids[a:b], offsets[a : b + 1] - offsets[a],
                    payload[offsets[a] : offsets[b]]))


def test_partition_of_a_packed_run_equals_partition_of_the_run() -> None:
    plans, grouped = grouped_chunks(n_blocks=1, per_block=5000, shards=4, pad=30)
    run = sorted_run("train", np.random.default_rng(9).integers(0, 1 << 63, 5000, np.uint64),
                     np.arange(5000, dtype=np.uint64), [b"r%06d" % i for i in range(5000)])
    coder = SortedRunCoder()
    direct = engine.partition(run, plans)
    through = engine.partition(coder.decode(coder.encode(run)), plans)
    assert [k for k, _ in direct] == [k for k, _ in through] and len(direct) == 4
    for (_, c1), (_, c2) in zip(direct, through, strict=True):
        _same(c2.unpack("x"), c1.unpack("x"))


def test_a_damaged_segment_of_a_run_is_an_error_naming_the_shard_it_reaches(tmp_path) -> None:
    """A segment passed through from the run to a chunk is checked where it is unpacked: by
    the writer of its shard."""
    plans, _ = grouped_chunks(n_blocks=1, per_block=60, shards=3)
    n = 4000
    run = sorted_run("train", np.sort(np.random.default_rng(1).integers(0, 1 << 63, n,
                                                                        np.uint64)),
                     np.arange(n, dtype=np.uint64), [b"r%06d" % i for i in range(n)])
    encoded = bytearray(SortedRunCoder().encode(run))
    encoded[-10] ^= 0x04  # inside the last segment's compressed bytes
    back = SortedRunCoder().decode(bytes(encoded))  # the index is intact: it opens
    whole = ShardPlan("train", 0, 1, 0, 1 << 64, 0, n)
    [(key, chunk)] = engine.partition(back, [whole])
    assert key == ("train", 0)
    with pytest.raises(StorageError, match=r"^shard train 0: the shuffle delivered damaged "
                                           r"data \("):
        engine.write_engine_shard(whole, iter([chunk]), str(tmp_path), ShardFormat.of())


def _shard_one(tmp_path):
    """Shard 1's plan and chunks (one block of 60 records, 3 shards), and a writer of that
    shard with its one non-empty chunk replaced by `data`."""
    plans, grouped = grouped_chunks(n_blocks=1, per_block=60, shards=3, pad=4)
    chunks = grouped[1]
    assert len(chunks) == 2 and len(chunks[1]) == plans[1].take  # EMPTY, then the records

    def write(data: bytes) -> None:
        engine.write_engine_shard(plans[1], iter([chunks[0], engine.Chunk(data)]),
                                  str(tmp_path / "staging"), ShardFormat.of())
    return chunks[1].data, write


def test_every_flipped_byte_of_a_chunk_is_an_error_naming_the_shard(tmp_path) -> None:
    data, write = _shard_one(tmp_path)
    write(data)  # intact: written
    for at in range(len(data)):
        for flip in (0x01, 0x80):
            damaged = bytearray(data)
            damaged[at] ^= flip
            with pytest.raises(StorageError) as exc:
                write(bytes(damaged))
            assert str(exc.value).startswith(
                "shard train 1: the shuffle delivered damaged data ("), (at, flip)
            assert str(exc.value).endswith("); the run was stopped before writing it")


def test_a_truncated_or_extended_chunk_is_an_error_naming_the_shard(tmp_path) -> None:
    data, write = _shard_one(tmp_path)
    for cut in (0, 10, chunk_codec.HEADER.size, chunk_codec.HEADER.size + 5, len(data) // 2,
                len(data) - 1):
        with pytest.raises(StorageError, match=r"^shard train 1: the shuffle delivered "
                                               r"damaged data \(\d+ bytes"):
            write(data[:cut])
    with pytest.raises(StorageError, match=rf"^shard train 1: .* \({len(data) + 1} bytes, "
                                           rf"the header says {len(data)}\)"):
        write(data + b"\0")


def test_a_damaged_run_index_is_an_error_naming_its_split() -> None:
    run = sorted_run("test", np.arange(10, dtype=np.uint64), np.arange(10, dtype=np.uint64),
                     [b"r%d" % i for i in range(10)])
    encoded = SortedRunCoder().encode(run)
    head = 4 + len("test") + chunk_codec.FIELDS.size + chunk_codec.ENTRY.size + 4
    for at in (4 + len("test") + 5, head + 3):  # the header, then the index stream
        damaged = bytearray(encoded)
        damaged[at] ^= 0x40
        with pytest.raises(StorageError, match=r"^a sorted run of split 'test': the shuffle "
                                               r"delivered damaged data \("):
            SortedRunCoder().decode(bytes(damaged))


@pytest.mark.slow
def test_a_chunk_damaged_in_the_runner_stops_the_run_naming_the_shard(tmp_path,
                                                                      monkeypatch) -> None:
    """Through the whole pipeline (in-process runner): the grouped chunks come back damaged,
    and the run fails with the shard's name instead of writing it."""
    os.makedirs(tmp_path / "engine")
    write_csv(tmp_path / "engine" / "a.csv", 3000)
    src = {"train": {"format": "csv", "paths": ["a.csv"], "block_rows": 500}}

    def cut(self, encoded: bytes) -> engine.Chunk:  # the runner may decode more than once:
        return engine.Chunk(encoded[:-1])  # a cut, unlike a flipped bit, does not undo itself

    monkeypatch.setattr(ChunkCoder, "decode", cut)
    with pytest.raises(StorageError, match=r"^shard train \d: the shuffle delivered damaged "
                                           r"data \("):
        convert(tmp_path / "engine", src, via="engine", shards=2)


@pytest.mark.slow
def test_engine_and_files_write_the_same_shards(tmp_path) -> None:
    for via in ("files", "engine"):
        os.makedirs(tmp_path / via)
        write_csv(tmp_path / via / "a.csv", 4000)
    src = {"train": {"format": "csv", "paths": ["a.csv"], "block_rows": 300}}
    got = {via: shard_hashes(convert(tmp_path / via, src, via=via, shards=3))
           for via in ("files", "engine")}
    assert got["engine"] == got["files"] and len(got["files"]) == 3
