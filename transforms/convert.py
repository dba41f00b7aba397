"""Beam PTransforms of a conversion: read+encode+spill, plan shards, write shards.

Thin wrappers: every step calls into the Beam-free `etl` package. Only small metadata
(spill and shard descriptions, rejected-record reports) moves through Beam's shuffles; the
records themselves go through spill files, so memory is bounded by one block in stage 1
and one shard in stage 2, on the local runner and on Dataflow workers alike.
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
from etl.planning import ShardPlan, num_shards_for, plan_split
from etl.shard_writer import ShardResult, write_shard
from etl.sources.tfrecord_source import SERIALIZED  # already-serialized records
from etl.spill import SpillMeta, write_spill
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
    spill: str = "disk"  # "memory": spills travel through Beam instead of temp files


class _ReadEncodeSpillFn(beam.DoFn):
    """Stage 1: read a file's blocks, encode them in batch, key them and spill them sorted."""

    def __init__(self, spec: ConvertSpec):
        self.spec = spec

    def setup(self) -> None:
        import yaml  # noqa: PLC0415

        from etl.codec import Encoder  # noqa: PLC0415
        from etl.schema import schema_from_dict  # noqa: PLC0415
        from etl.sources import make_reader  # noqa: PLC0415

        self.encoder = Encoder(schema_from_dict(yaml.safe_load(self.spec.schema_yaml)))
        self.readers = {
            name: make_reader(cfg, self.spec.base_dir, f"sources.{name}")
            for name, cfg in self.spec.sources.items()
        }
        self.read_counter = Metrics.counter("etl", "records_read")
        self.bad_counter = Metrics.counter("etl", "records_rejected")
        self.spilled_counter = Metrics.counter("etl", "records_encoded")

    def process(self, task: ReadTask):  # type: ignore[override]
        spec = self.spec
        for block in self.readers[task.source].read(task.path):
            for bad in block.bad:
                self.bad_counter.inc()
                yield beam.pvalue.TaggedOutput("rejected", bad.to_json())
            if not block.num_rows:
                continue
            self.read_counter.inc(block.num_rows)
            if SERIALIZED in block.columns:
                records = binary_column(block.columns[SERIALIZED])
                rows = np.arange(block.num_rows)
            else:
                encoded = self.encoder.encode(block.columns, source=task.path,
                                              positions=block.positions)
                for bad in encoded.bad:
                    self.bad_counter.inc()
                    yield beam.pvalue.TaggedOutput("rejected", bad.to_json())
                records, rows = encoded.array, encoded.rows
            if not len(rows):
                continue
            self.spilled_counter.inc(len(rows))
            positions = np.asarray(block.positions)[rows]
            hashed = keys.shuffle_keys(spec.seed or 0, task.identity, positions)
            ids = keys.record_ids(task.ordinal, positions)
            sort_keys = hashed if spec.seed is not None else ids
            if spec.fractions:
                which = keys.assign_splits(hashed, list(spec.fractions.values()))
                targets = [(name, np.flatnonzero(which == i))
                           for i, name in enumerate(spec.fractions)]
            else:
                targets = [(task.source, np.arange(len(rows)))]
            for split, idx in targets:
                if not len(idx):
                    continue
                name = f"{uuid.uuid4().hex}.spill"
                path = (f"mem:{split}/{name}" if spec.spill == "memory"
                        else fs.join(spec.spill_dir, split, name))
                chosen = records.take(pa.array(idx)) if len(idx) < len(rows) else records
                yield write_spill(path, split, sort_keys[idx], ids[idx], chosen,
                                  histogram=spec.seed is not None)


def plan_shards(metas: list[SpillMeta], spec: ConvertSpec) -> list[Any]:
    """All spills are in: decide each split's shard count and every shard's key range."""
    out: list[Any] = []
    for split in spec.splits:
        mine = [m for m in metas if m.split == split]
        n, note = num_shards_for(sum(m.num_bytes for m in mine), spec.shards, spec.shard_size,
                                 spec.max_shard_bytes)
        if note:
            out.append(f"split {split}: {note}")
        out.extend(plan_split(split, mine, n, shuffled=spec.seed is not None))
    return out


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: ConvertSpec):
        self.spec = spec

    def process(self, plan: ShardPlan, memory=None):  # type: ignore[override]
        result = write_shard(plan, self.spec.staging_dir, self.spec.compression, memory)
        Metrics.counter("etl", "records_written").inc(result.num_records)
        Metrics.counter("etl", "shards_written").inc()
        yield result


def _write_json(items: list[Any], path: str, encode: Any) -> None:
    fs.write_bytes(path, "\n".join(json.dumps(encode(x), sort_keys=True) for x in items).encode())


class ConvertToShards(beam.PTransform):
    """Files -> shuffled, sharded TFRecords in `spec.staging_dir` plus `_shards.jsonl`,
    `_rejected.jsonl` and `_notes.jsonl` there for the driver to check and publish."""

    def __init__(self, spec: ConvertSpec, tasks: list[ReadTask]):
        super().__init__()
        self.spec = spec
        self.tasks = tasks

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        spec = self.spec
        stage1 = (
            pbegin
            | "ListInputFiles" >> beam.Create(self.tasks)
            | "DistributeFiles" >> beam.Reshuffle()
            | "ReadEncodeSpill" >> beam.ParDo(_ReadEncodeSpillFn(spec)).with_outputs(
                "rejected", main="spills")
        )
        collected = stage1.spills | "CollectSpills" >> beam.combiners.ToList()
        plan = collected | "PlanShards" >> beam.FlatMap(plan_shards, spec)
        side = {}
        if spec.spill == "memory":
            side["memory"] = beam.pvalue.AsSingleton(
                collected | "KeepSpillData" >> beam.Map(lambda ms: {m.path: m.data for m in ms}))
        notes = plan | "KeepNotes" >> beam.Filter(lambda p: isinstance(p, str))
        shards = (
            plan
            | "KeepShardPlans" >> beam.Filter(lambda p: isinstance(p, ShardPlan))
            | "DistributeShards" >> beam.Reshuffle()
            | "WriteShards" >> beam.ParDo(_WriteShardFn(spec), **side)
        )
        staging = spec.staging_dir
        _ = (notes | "CollectNotes" >> beam.combiners.ToList()
             | "WriteNotes" >> beam.Map(_write_json, fs.join(staging, "_notes.jsonl"), str))
        _ = (stage1.rejected | "CollectRejected" >> beam.combiners.ToList()
             | "WriteRejected" >> beam.Map(_write_json, fs.join(staging, "_rejected.jsonl"),
                                           lambda x: x))
        return (shards | "CollectShards" >> beam.combiners.ToList()
                | "WriteShardIndex" >> beam.Map(_write_json, fs.join(staging, "_shards.jsonl"),
                                                lambda r: r.__dict__))


__all__ = ["ConvertSpec", "ConvertToShards", "ReadTask", "ShardResult"]
