"""What a shuffle strategy's Beam half answers: the interface of one entry of
transforms.shuffles.STEPS (the Beam side of etl.shuffle.STRATEGIES).

A strategy's Beam-free half is its module in etl/shuffle (name, what callers ask of it, its
shard writer); its Beam half is one `ShuffleSteps` object: what stage 1 emits for each
sorted run, the steps that bring every shard its runs, and how one shard is written from
what reaches it. transforms/convert.py asks the object and never compares a strategy's name.
The steps are applied inside ConvertToShards' own expand, so their labels stay top-level
steps of the conversion (Dataflow's job graph and its monitoring show them by name).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import apache_beam as beam

from etl.base.inflight import InFlight
from etl.formats.shards import ShardFormat
from etl.shuffle.files import HeldSpills
from etl.shuffle.planning import RunKeys, ShardingPlan, ShardPlan
from etl.shuffle.runs import SortedRun
from etl.shuffle.shard_writer import ShardResult


class ShuffleSteps:
    """One shuffle strategy's Beam steps; subclasses set `strategy` and `run_type`."""

    strategy: ModuleType  # its Beam-free half: etl.shuffle.<name>
    run_type: type = SortedRun  # what stage 1 emits per sorted run (its declared coder)

    def emit(self, run: SortedRun, spill_dir: str, shuffled: bool, held: HeldSpills | None,
             writers: InFlight | None) -> Any:
        """Stage 1's output for one sorted run."""
        return run

    def run_keys(self, item: Any, shuffled: bool) -> RunKeys:
        """The planner's statistics of one item stage 1 emitted."""
        return item.stats(shuffled)

    def shard_results(self, runs: beam.PCollection, plan: beam.PCollection,
                      write: beam.DoFn) -> beam.PCollection:
        """Every shard written by `write` (a DoFn calling `write_shard` below with the
        plan as an optional side input) from stage 1's `runs` and the `plan` singleton."""
        raise NotImplementedError

    def write_shard(self, element: Any, plan: ShardingPlan | None, staging_dir: str, fmt: ShardFormat,
                    held: HeldSpills | None) -> ShardResult:
        """One shard, from the element `shard_results` hands its writer."""
        raise NotImplementedError


def all_shards(plan: ShardingPlan) -> list[ShardPlan]:
    """Every shard plan of every split."""
    return [p for split in plan.shards.values() for p in split]
