"""The two shuffle strategies end to end: `engine` (Beam GroupByKey) and `files` (spill
files) write byte-identical shards, and the engine moves one element per run × shard."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

import etl
from cli.run import plan_reads
from etl.formats.idx import write_idx
from etl.job.config import job_from_dict
from tests.pipelines import RUNNER, convert, manifest, shard_hashes, write_csv, write_yaml
from transforms.convert import ConvertToShards
from transforms.convert import flat_settings as ConvertSpec

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

MULTI = RUNNER + ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def _both(tmp_path, sources, **job) -> dict[str, str]:
    """Shard sha256 of the same job through each strategy; asserts they are equal."""
    got = {via: shard_hashes(convert(tmp_path / via, sources, via=via, **job))
           for via in ("files", "engine")}
    assert got["engine"] == got["files"]
    assert got["files"]  # some shards, not an empty comparison
    return got["files"]


def _csv_parts(tmp_path, parts=3, rows=2000) -> None:
    for via in ("files", "engine"):
        os.makedirs(tmp_path / via, exist_ok=True)
        for k in range(parts):
            write_csv(tmp_path / via / f"part-{k}.csv", rows, start=k * rows)


def test_shuffled_csv_two_splits_by_fraction(tmp_path) -> None:
    _csv_parts(tmp_path)
    src = {"source": {"format": "csv", "paths": ["part-*.csv"], "block_rows": 700},
           "split": {"train": 0.7, "test": 0.3}}
    hashes = _both(tmp_path, src, shards=3)
    assert len(hashes) == 6
    m = manifest(str(tmp_path / "engine" / "out"))
    assert m["splits"]["train"]["num_records"] + m["splits"]["test"]["num_records"] == 6000
    assert all(i["read"] == i["written"] == 2000 for i in m["inputs"])


def test_input_order(tmp_path) -> None:
    _csv_parts(tmp_path, parts=2, rows=1500)
    src = {"train": {"format": "csv", "paths": ["part-*.csv"], "block_rows": 400}}
    _both(tmp_path, src, shuffle=False, shards=4)


def test_gzip_and_shard_size(tmp_path) -> None:
    _csv_parts(tmp_path, parts=2)
    src = {"train": {"format": "csv", "paths": ["part-*.csv"], "block_rows": 500}}
    _both(tmp_path, src, compression="gzip", shards=3)


def test_sequence_example_jsonl(tmp_path) -> None:
    rows = [{"id": i, "length": i % 5, "tokens": list(range(i, i + i % 5))} for i in range(900)]
    for via in ("files", "engine"):
        os.makedirs(tmp_path / via)
        with open(tmp_path / via / "s.jsonl", "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    schema = etl.load_schema("schemas/sentences.yaml").to_dict()
    _both(tmp_path, {"train": {"format": "jsonl", "paths": ["s.jsonl"]}}, schema=schema)


def test_idx_images(tmp_path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (700, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 700, dtype=np.uint8)
    for via in ("files", "engine"):
        os.makedirs(tmp_path / via)
        write_idx(str(tmp_path / via / "i-images-idx3-ubyte.gz"), images)
        write_idx(str(tmp_path / via / "i-labels-idx1-ubyte.gz"), labels)
    src = {"train": {"format": "idx", "paths": {"image": "i-images-idx3-ubyte.gz",
                                                "label": "i-labels-idx1-ubyte.gz"}}}
    _both(tmp_path, src, schema=etl.load_schema("schemas/mnist.yaml").to_dict())


def test_multi_processing_engine_matches_in_process_files(tmp_path) -> None:
    _csv_parts(tmp_path, parts=2)
    src = {"train": {"format": "csv", "paths": ["part-*.csv"], "block_rows": 600}}
    files_hashes = shard_hashes(convert(tmp_path / "files", src, via="files"))
    engine_multi = shard_hashes(convert(tmp_path / "engine", src, via="engine", beam_args=MULTI))
    assert engine_multi == files_hashes


@pytest.mark.parametrize(("shuffle", "expected_chunks"), [({"seed": 1}, 8 * 4), (False, 8)])
def test_engine_moves_one_element_per_block_and_overlapping_shard(tmp_path, shuffle,
                                                                  expected_chunks) -> None:
    """8 blocks of 2,500 records into 4 shards: shuffled, every block overlaps every shard
    (32 chunks); in input order each block lies in one shard (8 chunks). Never 20,000."""
    write_csv(tmp_path / "ids.csv", 20_000)
    schema = write_yaml(str(tmp_path / "schema.yaml"), {
        "name": "ids", "kind": "example", "features": {"id": {"dtype": "int64", "shape": []}}})
    job = job_from_dict({"schema": schema, "output": str(tmp_path / "out"), "shards": 4,
                         "shuffle": shuffle,
                         "sources": {"train": {"format": "csv", "paths": ["ids.csv"],
                                               "block_rows": 2500}}},
                        path="job.yaml", base_dir=str(tmp_path))
    read_plan = str(tmp_path / "read_plan.json")
    plan_reads(job).save(read_plan)
    spec = ConvertSpec(
        schema_yaml=etl.load_schema(job.schema_path).to_yaml(), sources=job.sources,
        base_dir=job.base_dir, fractions={}, seed=job.seed, spill_dir=str(tmp_path / "spill"),
        staging_dir=str(tmp_path / "staging"), compression="none", splits=("train",),
        shards=4, shard_size=None, max_shard_bytes=job.max_shard_bytes, via="engine",
        read_plan=read_plan)
    p = beam.Pipeline(options=PipelineOptions(RUNNER))
    _ = p | ConvertToShards(spec)
    result = p.run()
    result.wait_until_finish()

    def counter(name: str) -> int:
        found = result.metrics().query(MetricsFilter().with_name(name))["counters"]
        return sum(c.committed for c in found)

    assert counter("shuffle_chunks") == expected_chunks
    assert counter("records_written") == 20_000
    assert counter("shards_written") == 4
    assert not os.path.exists(tmp_path / "spill")  # no spill file of ours
