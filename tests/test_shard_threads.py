"""A local run with one read task runs its bundles on the calling thread (`in_memory`) and
writes its shards with a thread per core inside that one worker (cli.run.shard_threads): the
same shards as one at a time and as the multi-threaded runner, every shard counted, a failing
shard's error the run's error."""

from __future__ import annotations

import errno
import threading

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

import cli.run
import etl
from cli.run import default_beam_args, one_read_task, plan_reads, shard_threads
from etl.base.errors import StorageError
from etl.job.config import job_from_dict
from etl.shuffle import files
from tests.pipelines import RUNNER, convert, manifest, shard_hashes, write_csv, write_yaml
from transforms.convert import ConvertToShards
from transforms.convert import flat_settings as ConvertSpec

IN_MEMORY = "--direct_running_mode=in_memory"
THREADED = [*RUNNER, "--direct_running_mode=multi_threading", "--direct_num_workers=1"]


def _job(tmp_path, paths: list[str], shards: int = 6, via: str = "files"):
    return job_from_dict({"schema": write_yaml(str(tmp_path / "schema.yaml"), {
        "name": "ids", "kind": "example", "features": {"id": {"dtype": "int64", "shape": []}}}),
        "output": str(tmp_path / "out"), "shards": shards, "shuffle": {"seed": 7, "via": via},
        "sources": {"train": {"format": "csv", "paths": paths, "block_rows": 2500}}},
        path="job.yaml", base_dir=str(tmp_path))


def test_the_local_mode_follows_the_read_plan(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cli.run.os, "cpu_count", lambda: 4)
    write_csv(tmp_path / "a.csv", 100)
    write_csv(tmp_path / "b.csv", 100, start=100)
    given = PipelineOptions(default_beam_args([]))
    one, two = _job(tmp_path, ["a.csv"]), _job(tmp_path, ["a.csv", "b.csv"])
    assert one_read_task(one, plan_reads(one), given)
    assert not one_read_task(two, plan_reads(two), given)

    assert default_beam_args([], one_read_task=True) == ["--runner=FnApiRunner", IN_MEMORY]
    assert default_beam_args([], one_read_task=False) == [
        "--runner=FnApiRunner", "--direct_running_mode=multi_threading", "--direct_num_workers=4"]
    # the user's mode or worker count wins, and another runner gets none of ours
    assert default_beam_args(["--direct_num_workers=2"], one_read_task=True) == [
        "--direct_num_workers=2", "--runner=FnApiRunner", "--direct_running_mode=multi_threading"]
    assert default_beam_args(["--direct_running_mode=multi_processing"], one_read_task=True) == [
        "--direct_running_mode=multi_processing", "--runner=FnApiRunner", "--direct_num_workers=4"]
    assert default_beam_args(["--runner=DataflowRunner"], one_read_task=True) == [
        "--runner=DataflowRunner"]

    assert shard_threads(PipelineOptions([*RUNNER, IN_MEMORY])) == 4
    assert shard_threads(PipelineOptions(default_beam_args([]))) == 1
    assert shard_threads(PipelineOptions(["--runner=DataflowRunner"])) == 1


@pytest.mark.parametrize("via", ["files", "engine"])
def test_threads_write_the_same_shards_and_count_every_one(tmp_path, via) -> None:
    write_csv(tmp_path / "ids.csv", 20_000)
    job = _job(tmp_path, ["ids.csv"], via=via)
    read_plan = str(tmp_path / "read_plan.json")
    plan_reads(job).save(read_plan)
    got = {}
    for threads in (1, 3):
        spec = ConvertSpec(
            schema_yaml=etl.load_schema(job.schema_path).to_yaml(), sources=job.sources,
            base_dir=job.base_dir, fractions={}, seed=7, spill_dir=str(tmp_path / "spill"),
            staging_dir=str(tmp_path / f"staging-{threads}"), splits=("train",), shards=6,
            shard_size=None, max_shard_bytes=job.max_shard_bytes, via=via, read_plan=read_plan,
            shard_threads=threads)
        p = beam.Pipeline(options=PipelineOptions([*RUNNER, IN_MEMORY]))
        _ = p | ConvertToShards(spec)
        result = p.run()
        result.wait_until_finish()

        def counter(name: str, result=result) -> int:
            return sum(c.committed for c in
                       result.metrics().query(MetricsFilter().with_name(name))["counters"])

        assert (counter("records_written"), counter("shards_written")) == (20_000, 6)
        got[threads] = {s["path"]: s["sha256"] for s in manifest(
            str(tmp_path / f"staging-{threads}"))["splits"]["train"]["shards"]}
    assert len(got[1]) == 6 and got[3] == got[1]


def test_a_run_writes_the_same_shards_as_the_threaded_runner(tmp_path, monkeypatch) -> None:
    """The CLI's own choice (one CSV: in_memory, a thread per core) against multi_threading
    with one worker, which writes one shard at a time."""
    monkeypatch.setattr(cli.run.os, "cpu_count", lambda: 4)
    write_csv(tmp_path / "ids.csv", 30_000)
    sources = {"source": {"format": "csv", "paths": [str(tmp_path / "ids.csv")], "block_rows": 4000}}
    default = convert(tmp_path / "default", sources, shards=8, split={"train": 0.8, "test": 0.2})
    threaded = convert(tmp_path / "threaded", sources, beam_args=THREADED, shards=8,
                       split={"train": 0.8, "test": 0.2})
    assert len(shard_hashes(default)) == 16
    assert shard_hashes(default) == shard_hashes(threaded)
    assert manifest(default)["splits"]["test"]["num_records"] == \
        manifest(threaded)["splits"]["test"]["num_records"] > 0


def test_a_failing_shard_among_threads_fails_the_run(tmp_path, monkeypatch) -> None:
    """The disk filling up under the third of six shards: the run fails with that storage
    error (exit 5), nothing is published, and the other shards' threads are not left running."""
    monkeypatch.setattr(cli.run.os, "cpu_count", lambda: 3)
    write = files.write_files_shard

    def full_at_the_third(shard, *args, **kwargs):
        if shard.index == 2:
            raise OSError(errno.ENOSPC, "No space left on device", "train-00002-of-00006.tfrecord")
        return write(shard, *args, **kwargs)

    monkeypatch.setattr(files, "write_files_shard", full_at_the_third)
    write_csv(tmp_path / "ids.csv", 20_000)
    sources = {"train": {"format": "csv", "paths": [str(tmp_path / "ids.csv")]}}
    said = "train-00002-of-00006.tfrecord: reading or writing failed: no space left on the device"
    with pytest.raises(StorageError, match=said) as e:
        convert(tmp_path, sources, shards=6)
    assert e.value.exit_code == 5
    assert not (tmp_path / "out").exists()
    assert not [t for t in threading.enumerate() if t.name.startswith("etl-shard")]
