"""Conversions run in this process (cli.run.run_job on the local runner), shared by the
pipeline, engine, shuffle and random-access tests: a job written from a dict, an example job
run as bundled, what their outputs' manifests say, and the engine's chunks as the GroupByKey
hands them to the shard writer. In-process rather than `run_pipeline.py`: these tests are about
what a run writes, not about the CLI process (tests/helpers.py has that)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cli.run import run_job
from etl.formats.shards import ShardFormat
from etl.job.config import job_from_dict, load_job
from etl.shuffle import engine
from etl.shuffle.planning import ShardPlan, ShuffleKeys, make_plan
from etl.shuffle.runs import sorted_run
from tests.handmade import with_indexes
from tests.helpers import ROOT

IDS_SCHEMA = {"name": "ids", "kind": "example",
              "features": {"id": {"dtype": "int64", "shape": []},
                           "x": {"dtype": "float32", "shape": [2], "source": ["a", "b"]}}}
RUNNER = ["--runner=FnApiRunner"]


def write_yaml(path: str, doc: dict[str, Any]) -> str:
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh)
    return path


def convert(tmp_path, sources, schema=IDS_SCHEMA, beam_args=None, via=None, **job) -> str:
    """Run a job; `via` picks the shuffle strategy (None: the runner's default)."""
    os.makedirs(tmp_path, exist_ok=True)
    schema_path = write_yaml(str(tmp_path / "schema.yaml"), schema)
    doc = {"schema": schema_path, "output": str(tmp_path / "out"), "shards": 4,
           "shuffle": {"seed": 42}}
    doc.update(sources if "source" in sources else {"sources": sources})
    doc.update(job)
    if via is not None:
        shuffle = doc["shuffle"]
        shuffle = ({"seed": None} if shuffle is False else {"seed": 0} if shuffle is True
                   else dict(shuffle))
        doc["shuffle"] = {**shuffle, "via": via}
    result = run_job(job_from_dict(doc, path="job.yaml", base_dir=str(tmp_path)),
                     beam_args or RUNNER)
    return result.output


def manifest(out: str) -> dict[str, Any]:
    with open(os.path.join(out, "manifest.json")) as fh:
        return json.load(fh)


def shard_hashes(out: str) -> dict[str, str]:
    return {s["path"]: s["sha256"] for split in manifest(out)["splits"].values()
            for s in split["shards"]}


def write_csv(path, n: int, start: int = 0) -> None:
    with open(path, "w") as fh:
        fh.write("id,a,b\n")
        for i in range(start, start + n):
            fh.write(f"{i},{i * 0.5},{-i}\n")


def run_example(job_name: str, out: Path, **overrides: Any) -> str:
    """A bundled example job, run for real into `out` (uncompressed: random access needs it)."""
    doc = load_job(os.path.join(ROOT, "examples", f"{job_name}.yaml"), output=str(out))
    job = dataclasses.replace(doc, shard_format=ShardFormat.of(
        overrides.get("format", doc.format), "none", overrides.get("index", doc.index)))
    return with_indexes(run_job(job, ["--runner=FnApiRunner"]).output)


def grouped_chunks(n_blocks: int = 6, per_block: int = 3000, shards: int = 3, pad: int = 100,
                   ) -> tuple[list[ShardPlan], dict[int, list[engine.Chunk]]]:
    """Sorted runs of `n_blocks` blocks cut into per-shard chunks, as the GroupByKey hands
    them to the shard writer; records of 8 + `pad` bytes."""
    runs = []
    for b in range(n_blocks):
        pos = np.arange(per_block, dtype=np.int64) + b * per_block
        ids = pos.astype(np.uint64)
        keys = np.random.default_rng(b).integers(0, 1 << 63, per_block, dtype=np.uint64)
        runs.append(sorted_run("train", keys, ids, [b"%08d" % p + b"x" * pad for p in pos]))
    stats = ShuffleKeys(True)
    for run in runs:
        stats.add(run.stats(True))
    plans = make_plan(stats, ("train",), shards, None, 1 << 40).shards["train"]
    grouped: dict[int, list[engine.Chunk]] = {p.index: [engine.EMPTY] for p in plans}
    for run in runs:
        for (_, index), chunk in engine.partition(run, plans):
            grouped[index].append(chunk)
    return plans, grouped
