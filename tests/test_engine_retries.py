"""Bundle retries are harmless: Dataflow retries a failed bundle up to 4 times and may run a
straggler's bundle twice. A shard written twice gives byte-identical bytes, exactly one file
per shard in staging, and counts that are not doubled in the manifest."""

from __future__ import annotations

import hashlib
import os
import time

import apache_beam as beam
import pytest

from etl.base.errors import EtlError
from etl.formats.shards import ShardFormat
from etl.output.finalize import unique_results
from etl.shuffle import engine, shard_writer
from tests.pipelines import convert, grouped_chunks, manifest, shard_hashes, write_csv


def _files(folder) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(folder))}


def test_a_shard_written_twice_is_one_identical_file_counted_once(tmp_path) -> None:
    plans, grouped = grouped_chunks()
    fmt = ShardFormat.of()  # with index files: one per shard too
    once = [engine.write_engine_shard(p, iter(grouped[p.index]), str(tmp_path / "once"), fmt)
            for p in plans]
    staging = tmp_path / "twice"
    twice = [engine.write_engine_shard(p, iter(grouped[p.index]), str(staging), fmt)
             for p in plans for _ in range(2)]
    assert twice[0::2] == twice[1::2] == once
    assert _files(staging) == _files(tmp_path / "once")  # one file per shard, same bytes
    assert sorted(_files(staging)) == [n for r in once for n in (r.name, r.index_file.name)]
    unique = unique_results(twice)
    assert unique == once and sum(r.num_records for r in unique) == 18_000


def test_a_failed_half_written_attempt_leaves_nothing_and_the_retry_matches(tmp_path,
                                                                             monkeypatch) -> None:
    plans, grouped = grouped_chunks(pad=1000)  # 6 MB shards: past the writer's 4 MB buffer
    reference = engine.write_engine_shard(plans[1], iter(grouped[1]), str(tmp_path / "ref"),
                                          ShardFormat.of())
    monkeypatch.setattr(shard_writer, "CHUNK_BYTES", 64 << 10)  # ~95 pieces per shard
    real_gather, calls = shard_writer._gather, []

    def dies_mid_shard(*args):
        calls.append(1)
        if len(calls) == 80:
            # most of the shard is in the attempt's file: the worker dies mid-shard
            (partial,) = [n for n in os.listdir(staging) if n.endswith(shard_writer.ATTEMPT_SUFFIX)
                          and ".index." not in n]
            # the full 4 MiB buffer is written by the file's writer thread (etl.storage.
            # direct_file): on disk once that thread has run, which a loaded machine delays
            deadline = time.monotonic() + 60
            while (staging / partial).stat().st_size < 4 << 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert (staging / partial).stat().st_size >= 4 << 20
            raise OSError("worker lost")
        return real_gather(*args)

    staging = tmp_path / "staging"
    monkeypatch.setattr(shard_writer, "_gather", dies_mid_shard)
    with pytest.raises(OSError, match="worker lost"):
        engine.write_engine_shard(plans[1], iter(grouped[1]), str(staging), ShardFormat.of())
    assert len(calls) == 80 and os.listdir(staging) == []  # the failed attempt removed its file
    monkeypatch.setattr(shard_writer, "_gather", real_gather)
    retried = engine.write_engine_shard(plans[1], iter(grouped[1]), str(staging), ShardFormat.of())
    assert retried == reference
    assert _files(staging) == _files(tmp_path / "ref")


@pytest.mark.slow
def test_a_killed_attempts_leftover_is_removed_by_finalize_and_counts_stay_exact(tmp_path,
                                                                                 monkeypatch) -> None:
    """A worker killed mid-shard cannot clean up: its attempt file stays in staging. The
    pipeline below also runs every shard's write twice (a duplicated GroupByKey output, as a
    straggler's duplicate would): the published output has one file per shard, the same
    bytes as a clean run, and counts that are not doubled."""
    for via in ("clean", "dup"):
        os.makedirs(tmp_path / via)
        write_csv(tmp_path / via / "ids.csv", 5000)
    src = {"train": {"format": "csv", "paths": ["ids.csv"], "block_rows": 700}}
    clean = convert(tmp_path / "clean", src, via="engine")

    real_gbk = beam.GroupByKey

    class DuplicatedGroups(beam.PTransform):
        def expand(self, pcoll):
            return pcoll | real_gbk() | beam.FlatMap(lambda kv: [kv, kv])

    real_write, writes = shard_writer.write_shard, []

    def leaves_a_killed_attempt(plan, slices, staging_dir, compression):
        writes.append(plan.index)
        name = shard_writer.shard_name(plan.split, plan.index, plan.num_shards, compression)
        os.makedirs(staging_dir, exist_ok=True)
        with open(os.path.join(staging_dir, f"{name}.0123456789ab.attempt"), "wb") as fh:
            fh.write(b"half a shard")
        return real_write(plan, slices, staging_dir, compression)

    monkeypatch.setattr(beam, "GroupByKey", DuplicatedGroups)  # looked up by transforms.convert
    monkeypatch.setattr(engine, "write_shard", leaves_a_killed_attempt)
    dup = convert(tmp_path / "dup", src, via="engine")
    assert sorted(writes) == [0, 0, 1, 1, 2, 2, 3, 3]  # every shard written twice
    assert shard_hashes(dup) == shard_hashes(clean)
    assert sorted(os.listdir(dup)) == sorted(os.listdir(clean))
    m = manifest(dup)
    assert m["splits"]["train"]["num_records"] == 5000
    assert m["inputs"][0]["read"] == m["inputs"][0]["written"] == 5000


def test_two_different_results_for_one_shard_are_refused() -> None:
    plans, grouped = grouped_chunks(n_blocks=2, per_block=50, shards=1)
    a = shard_writer.ShardResult("train", 0, 1, "train-00000-of-00001.tfrecord", 100, 5, "aa")
    b = shard_writer.ShardResult("train", 0, 1, "train-00000-of-00001.tfrecord", 99, 5, "bb")
    with pytest.raises(EtlError, match="written twice with different results"):
        unique_results([a, b])
