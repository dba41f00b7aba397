"""Beam PTransforms of a conversion: read+encode+spill, plan shards, write shards.

Thin wrappers: every step calls into the Beam-free `etl` package. Only small metadata
(spill and shard descriptions, rejected-record reports) moves through Beam's shuffles; the
records themselves go through spill files, so memory is bounded by one block in stage 1
and one shard in stage 2, on the local runner and on Dataflow workers alike.

Accounting: stage 1 writes, per input file, how many records it read and every record it
rejected (`_read_parts/`); stage 2 reports, per shard, how many records of each input file it
wrote. The driver checks `read = written + rejected` per input file from the two.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from etl import fs, keys
from etl.codec import Encoder
from etl.error_wire import wire_errors
from etl.planning import ShardPlan, num_shards_for, plan_split
from etl.prefetch import ordered_map, prefetch
from etl.shard_writer import ShardResult, write_shard
from etl.sources.base import DEFAULT_MAX_RECORD_BYTES, Block
from etl.sources.tfrecord_source import SERIALIZED  # already-serialized records
from etl.spill import MemoryBudget, SpillMeta, write_spill
from etl.wire import binary_column


@dataclass(frozen=True)
class ReadTask:
    """One input file to read: which source entry, which split (or '*' for fractions)."""

    source: str
    path: str
    identity: str
    ordinal: int


@dataclass(frozen=True)
class ConvertSpec:
    """Everything workers need, as plain values (pickled once into the DoFns)."""

    schema_yaml: str
    sources: dict[str, dict[str, Any]]
    base_dir: str
    fractions: dict[str, float]
    seed: int | None
    spill_dir: str
    staging_dir: str
    compression: str
    splits: tuple[str, ...]
    shards: int | None
    shard_size: int | None
    max_shard_bytes: int
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES  # larger records: oversized_record
    spill_in_memory: int = 0  # bytes of spills held in process memory (stage 2 in-process)


SHARD_PARTS = "_shard_results"  # one JSON ShardResult per written shard
# one JSON-lines file per input file: {"ordinal", "path", "read"}, then its rejected records
READ_PARTS = "_read_parts"
NOTES = "_notes.jsonl"


class _ReadEncodeSpillFn(beam.DoFn):
    """Stage 1: read a file's blocks, encode them in batch, key them and spill them sorted."""

    def __init__(self, spec: ConvertSpec):
        self.spec = spec

    def setup(self) -> None:
        import yaml  # noqa: PLC0415

        from etl.schema import schema_from_dict  # noqa: PLC0415
        from etl.sources import make_reader  # noqa: PLC0415

        schema = schema_from_dict(yaml.safe_load(self.spec.schema_yaml))
        self.encoder = Encoder(schema, max_record_bytes=self.spec.max_record_bytes)
        self.readers = {
            name: make_reader(cfg, self.spec.base_dir, f"sources.{name}")
            for name, cfg in self.spec.sources.items()
        }
        for reader in self.readers.values():
            if hasattr(reader, "prepare"):  # see etl.sources.base.SourceReader
                reader.prepare(schema, self.spec.max_record_bytes)
        self.read_counter = Metrics.counter("etl", "records_read")
        self.bad_counter = Metrics.counter("etl", "records_rejected")
        self.spilled_counter = Metrics.counter("etl", "records_encoded")

    @wire_errors
    def process(self, task: ReadTask):  # type: ignore[override]
        read = 0
        rejected: list[dict[str, Any]] = []
        blocks = prefetch(self.readers[task.source].read(task.path))
        for done in ordered_map(lambda block: spill_block(self.encoder, self.spec, task, block),
                                blocks):
            # counters are updated here, in the bundle's thread, where Beam tracks metrics
            self.read_counter.inc(done.read)
            self.bad_counter.inc(sum(b.get("count", 1) for b in done.rejected))
            self.spilled_counter.inc(sum(m.count for m in done.spills))
            read += done.read
            rejected += done.rejected
            yield from done.spills
        # one file per input file, written when it is fully read; a retried task rewrites it
        summary = {"ordinal": task.ordinal, "path": task.path, "read": read}
        _write_json([summary, *rejected], fs.join(self.spec.staging_dir, READ_PARTS,
                                                  f"{task.ordinal:08d}.jsonl"), lambda x: x)


@dataclass
class SpilledBlock:
    read: int
    spills: list[SpillMeta]
    rejected: list[dict[str, Any]]


def spill_block(encoder: Encoder, spec: ConvertSpec, task: ReadTask, block: Block) -> SpilledBlock:
    """One block: encode it, key it, and write one sorted spill per split it feeds."""
    rejected = [bad.to_json() for bad in block.bad]
    if not block.num_rows:
        return SpilledBlock(block.num_read, [], rejected)
    if SERIALIZED in block.columns:  # checked against the schema by the reader's prepare()
        records = binary_column(block.columns[SERIALIZED])
        rows = np.arange(block.num_rows)
    else:
        encoded = encoder.encode(block.columns, source=task.path, positions=block.positions,
                                 lines=block.lines, offsets=block.offsets)
        rejected += [bad.to_json() for bad in encoded.bad]
        records, rows = encoded.array, encoded.rows
    spills: list[SpillMeta] = []
    if not len(rows):
        return SpilledBlock(block.num_read, spills, rejected)
    positions = np.asarray(block.positions)[rows]
    hashed = keys.shuffle_keys(spec.seed or 0, task.identity, positions)
    ids = keys.record_ids(task.ordinal, positions)
    sort_keys = hashed if spec.seed is not None else ids
    if spec.fractions:
        which = keys.assign_splits(hashed, list(spec.fractions.values()))
        targets = [(name, np.flatnonzero(which == i)) for i, name in enumerate(spec.fractions)]
    else:
        targets = [(task.source, np.arange(len(rows)))]
    budget = MemoryBudget(spec.spill_dir, spec.spill_in_memory) if spec.spill_in_memory else None
    for split, idx in targets:
        if not len(idx):
            continue
        path = fs.join(spec.spill_dir, split, f"{uuid.uuid4().hex}.spill")
        chosen = records.take(pa.array(idx)) if len(idx) < len(rows) else records
        spills.append(write_spill(path, split, sort_keys[idx], ids[idx], chosen,
                                  histogram=spec.seed is not None, memory=budget))
    return SpilledBlock(block.num_read, spills, rejected)


@wire_errors
def plan_shards(metas: list[SpillMeta], spec: ConvertSpec) -> list[ShardPlan]:
    """All spills are in: decide each split's shard count and every shard's key range.
    Notes on the plan (a raised shard count) go to `_notes.jsonl` for the driver."""
    plans: list[ShardPlan] = []
    notes: list[str] = []
    for split in spec.splits:
        mine = sorted((m for m in metas if m.split == split), key=lambda m: m.path)
        n, note = num_shards_for(sum(m.num_bytes for m in mine), spec.shards, spec.shard_size,
                                 spec.max_shard_bytes)
        if note:
            notes.append(f"split {split}: {note}")
        plans.extend(plan_split(split, mine, n, shuffled=spec.seed is not None))
    _write_json(notes, fs.join(spec.staging_dir, NOTES), str)
    return plans


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: ConvertSpec):
        self.spec = spec

    @wire_errors
    def process(self, plan: ShardPlan):  # type: ignore[override]
        result = write_shard(plan, self.spec.staging_dir, self.spec.compression)
        _write_json([result], fs.join(self.spec.staging_dir, SHARD_PARTS,
                                      f"{result.name}.json"), lambda r: r.__dict__)
        Metrics.counter("etl", "records_written").inc(result.num_records)
        Metrics.counter("etl", "shards_written").inc()
        yield result


def _write_json(items: list[Any], path: str, encode: Any) -> None:
    fs.write_bytes(path, "\n".join(json.dumps(encode(x), sort_keys=True) for x in items).encode())


def _all_in_one(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    """The whole (small) PCollection as one list: a single-key GroupByKey, which builds far
    fewer pipeline nodes than CombineGlobally(ToList) (pipeline construction is part of
    every run's fixed cost)."""
    return (pcoll
            | f"{label}Key" >> beam.Map(lambda x: (None, x))
            | f"{label}Group" >> beam.GroupByKey()
            | f"{label}List" >> beam.MapTuple(lambda _, xs: list(xs)))


class ConvertToShards(beam.PTransform):
    """Files -> shuffled, sharded TFRecords in `spec.staging_dir`, plus side files there for
    the driver to check and publish: one JSON per shard in `_shard_results/`, each input
    file's read count and rejected records in `_read_parts/`, and `_notes.jsonl`."""

    def __init__(self, spec: ConvertSpec, tasks: list[ReadTask]):
        super().__init__()
        self.spec = spec
        self.tasks = tasks

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        spec = self.spec
        spills = (
            pbegin
            # Create already redistributes more than one element (a Reshuffle inside)
            | "ListInputFiles" >> beam.Create(self.tasks)
            | "ReadEncodeSpill" >> beam.ParDo(_ReadEncodeSpillFn(spec))
        )
        return (
            _all_in_one(spills, "CollectSpills")
            | "PlanShards" >> beam.FlatMap(plan_shards, spec)
            | "DistributeShards" >> beam.Reshuffle()
            | "WriteShards" >> beam.ParDo(_WriteShardFn(spec))
        )


__all__ = ["ConvertSpec", "ConvertToShards", "ReadTask", "ShardResult"]
