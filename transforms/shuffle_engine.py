"""The `engine` strategy's Beam steps (etl.shuffle.engine is its Beam-free half): stage 1
emits each run itself; each run is cut into one chunk per overlapping shard (the plan as a
side input), the chunks are grouped by shard with Beam's GroupByKey (the runner's shuffle
moves the data, with the declared coders of transforms/coders.py), and each group is written
as it streams out. One empty chunk per shard, so even a shard without records gets its group."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from etl.base.worker_errors import wire_errors
from etl.formats.shards import ShardFormat
from etl.shuffle import engine
from etl.shuffle.files import HeldSpills
from etl.shuffle.planning import ShardingPlan
from etl.shuffle.runs import SortedRun
from etl.shuffle.shard_writer import ShardResult
from transforms.shuffle_steps import ShuffleSteps, all_shards

_KEYED_CHUNK = tuple[tuple[str, int], engine.Chunk]  # (split, shard index), chunk


class EngineSteps(ShuffleSteps):
    strategy = engine
    run_type = SortedRun

    def shard_results(self, runs: beam.PCollection, plan: beam.PCollection,
                      write: beam.DoFn) -> beam.PCollection:
        chunks = runs | "PartitionByShard" >> beam.ParDo(
            _PartitionFn(), beam.pvalue.AsSingleton(plan)).with_output_types(_KEYED_CHUNK)
        empty = plan | "EveryShard" >> beam.FlatMap(
            lambda plan: [((p.split, p.index), engine.EMPTY) for p in all_shards(plan)]
        ).with_output_types(_KEYED_CHUNK)
        shards = ((chunks, empty) | "Flatten" >> beam.Flatten()
                  | "GroupByShard" >> beam.GroupByKey())
        return shards | "WriteShards" >> beam.ParDo(write, beam.pvalue.AsSingleton(plan))

    def write_shard(self, element: Any, plan: ShardingPlan | None, staging_dir: str, fmt: ShardFormat,
                    held: HeldSpills | None) -> ShardResult:
        """The group's chunks, read once as they stream out of the group."""
        assert plan is not None
        (split, index), chunks = element
        return engine.write_engine_shard(plan.shards[split][index], chunks, staging_dir, fmt)


class _PartitionFn(beam.DoFn):
    """One run -> one ((split, shard), chunk) per shard whose key range it overlaps."""

    def __init__(self) -> None:
        self.chunks = Metrics.counter("etl", "shuffle_chunks")

    @wire_errors
    def process(self, run: SortedRun, plan: ShardingPlan):  # type: ignore[override]
        out = engine.partition(run, plan.shards.get(run.split, []))
        self.chunks.inc(len(out))
        yield from out
