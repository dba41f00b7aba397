"""The `files` strategy's Beam steps (etl.shuffle.files is its Beam-free half): stage 1
writes each run to a spill (or holds it) and emits its SpillRef; each shard's task lists the
spills whose keys overlap its range, from the plan and every spill's slim ref (a side input:
no Flatten, which the local runner would run as a stage of its own)."""

from __future__ import annotations

import dataclasses
import uuid
from contextlib import nullcontext
from typing import Any

import apache_beam as beam

from etl.base.inflight import InFlight
from etl.formats.shards import ShardFormat
from etl.shuffle import files
from etl.shuffle.planning import RunKeys, ShardingPlan, ShardPlan
from etl.shuffle.runs import SortedRun
from etl.shuffle.shard_writer import ShardResult
from etl.storage import fs
from transforms.shuffle_steps import ShuffleSteps, all_shards


class FilesSteps(ShuffleSteps):
    strategy = files
    run_type = files.SpillRef

    def emit(self, run: SortedRun, spill_dir: str, shuffled: bool,
             held: files.HeldSpills | None, writers: InFlight | None) -> files.SpillRef:
        """The run written to a spill (or held), its ref."""
        if not len(run.keys):
            return files.SpillRef("", run.stats(shuffled))
        with nullcontext() if writers is None else writers.writing():  # clean-up waits for it
            return files.write_spill(fs.join(spill_dir, run.split, f"{uuid.uuid4().hex}.spill"),
                                     run, shuffled, held)

    def run_keys(self, item: files.SpillRef, shuffled: bool) -> RunKeys:
        return item.stats

    def shard_results(self, runs: beam.PCollection, plan: beam.PCollection,
                      write: beam.DoFn) -> beam.PCollection:
        refs = runs | "SlimRefs" >> beam.Map(_slim)
        shards = (plan
                  | "ShardTasks" >> beam.FlatMap(_files_tasks, beam.pvalue.AsList(refs)
                                               ).with_output_types(tuple[ShardPlan, tuple[str, ...]])
                  | "DistributeShards" >> beam.Reshuffle())
        return shards | "WriteShards" >> beam.ParDo(write)

    def write_shard(self, element: Any, plan: ShardingPlan | None, staging_dir: str, fmt: ShardFormat,
                    held: files.HeldSpills | None) -> ShardResult:
        shard, spills = element
        return files.write_files_shard(shard, spills, staging_dir, fmt, held)


def _files_tasks(plan: ShardingPlan, refs: list[files.SpillRef]) -> list[tuple[ShardPlan, tuple[str, ...]]]:
    """(shard plan, the spills it reads) for every shard, from the plan and every SpillRef."""
    return [(p, files.spills_for(p, refs)) for p in all_shards(plan)]


def _slim(ref: files.SpillRef) -> files.SpillRef:
    """A SpillRef without its key histogram: what a shard task needs."""
    return files.SpillRef(ref.path, dataclasses.replace(
        ref.stats, buckets=ref.stats.buckets[:0], bucket_counts=ref.stats.bucket_counts[:0]))
