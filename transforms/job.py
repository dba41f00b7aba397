"""Run one job file end to end: plan inputs, run the Beam pipeline, check, publish.

The pipeline writes into a run-specific staging place; only after every count and checksum
is in, the manifest is written and the result is published, `_SUCCESS` last (see
etl.manifest.publish). A failed run leaves the previous output untouched.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from etl import fs, keys
from etl.config import JobConfig
from etl.errors import ConfigError, EtlError
from etl.accounting import account, check_threshold
from etl.manifest import MANIFEST, REJECTED_FILE, build_manifest, file_entry, publish
from etl.schema import Schema, load_schema
from etl.shard_writer import ShardResult
from etl.sources import make_reader
from etl.spill import HELD
from etl.tfmd import to_pbtxt
from transforms.convert import (
    NOTES,
    READ_PARTS,
    SHARD_PARTS,
    ConvertSpec,
    ConvertToShards,
    ReadTask,
)

log = logging.getLogger(__name__)
LOCAL_RUNNER = "FnApiRunner"  # DirectRunner in Beam 2.77 first tries to download Prism


@dataclass
class JobResult:
    output: str
    splits: dict[str, dict[str, Any]]
    rejected: dict[str, Any]
    seconds: float
    manifest: dict[str, Any]


def default_beam_args(beam_args: list[str]) -> list[str]:
    """Our local default never downloads anything and uses every core: FnApiRunner with one
    worker thread per CPU (stage 1 reads several files at once, stage 2 writes several shards
    at once; the heavy work releases the GIL). Every explicit option wins."""
    args = list(beam_args)
    if _option(args, "--runner") is None:
        args.append(f"--runner={LOCAL_RUNNER}")
    if _option(args, "--runner") == LOCAL_RUNNER:
        if _option(args, "--direct_running_mode") is None:
            args.append("--direct_running_mode=multi_threading")
        if _option(args, "--direct_num_workers") is None:
            args.append(f"--direct_num_workers={max(os.cpu_count() or 1, 1)}")
    return args


def shares_process(beam_args: list[str]) -> bool:
    """Whether every stage runs in this process (the local runner's in-memory and
    multi-threaded modes), so stage 2 can read spills stage 1 held in memory."""
    return (_option(beam_args, "--runner") == LOCAL_RUNNER
            and _option(beam_args, "--direct_running_mode") in ("in_memory", "multi_threading"))


def _option(args: list[str], name: str) -> str | None:
    """The value given for a Beam option (`--name=value` or `--name value`), else None."""
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name:
            return args[i + 1] if i + 1 < len(args) else ""
    return None


def plan_reads(job: JobConfig) -> tuple[list[ReadTask], list[dict[str, Any]]]:
    """Every input file, with a stable identity (path below the inputs' common root)."""
    per_source: dict[str, list[str]] = {}
    every_input: set[str] = set()
    for name, cfg in job.sources.items():
        reader = make_reader(cfg, job.base_dir, f"{job.path}: sources.{name}")
        files = reader.files()
        if not files:
            raise ConfigError(f"{job.path}: source {name!r} matched no input files "
                              f"(paths: {cfg.get('paths')!r})")
        per_source[name] = files
        # multi-file formats (idx image+label files) read partner files too
        every_input.update(reader.inputs() if hasattr(reader, "inputs") else files)
    all_files = sorted({f for files in per_source.values() for f in files})
    identity = keys.identities(all_files)
    ordinal = {p: i for i, p in enumerate(sorted(all_files, key=lambda p: identity[p]))}
    tasks = [ReadTask(name, f, identity[f], ordinal[f])
             for name, files in per_source.items() for f in files]
    inputs = [{"path": f, "num_bytes": _size(f)} for f in sorted(every_input)]
    return tasks, inputs


def _size(path: str) -> int:
    try:
        return fs.size(path)
    except (OSError, IndexError, ValueError):
        return 0  # pseudo-files (python generators) and directories


def run_job(job: JobConfig, beam_args: list[str] | None = None) -> JobResult:
    started = time.time()
    schema = load_schema(job.schema_path)
    tasks, inputs = plan_reads(job)
    args = default_beam_args(beam_args or [])
    options = PipelineOptions(args)
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    temp_root = job.temp_location or options.view_as(GoogleCloudOptions).temp_location
    tmp = (fs.join(temp_root, f"etl-{run_id}") if temp_root and fs.is_remote(job.output)
           else f"{job.output.rstrip('/')}.tmp-{run_id}")
    spec = ConvertSpec(
        schema_yaml=schema.to_yaml(), sources=job.sources, base_dir=job.base_dir,
        fractions=job.fractions, seed=job.seed, spill_dir=fs.join(tmp, "spill"),
        staging_dir=fs.join(tmp, "staging"), compression=job.compression,
        splits=tuple(job.splits), shards=job.shards, shard_size=job.shard_size,
        max_shard_bytes=job.max_shard_bytes, max_record_bytes=job.max_record_bytes,
        spill_in_memory=job.spill_in_memory if shares_process(args) else 0,
    )
    try:
        with beam.Pipeline(options=options) as p:
            _ = p | "Convert" >> ConvertToShards(spec, tasks)
        return _check_and_publish(job, schema, spec, tasks, inputs, run_id, started)
    finally:
        HELD.release(spec.spill_dir)
        fs.delete_tree(tmp)


def _read_jsonl(paths: list[str]) -> list[Any]:
    """Every JSON line of the given side files."""
    out: list[Any] = []
    for path in paths:
        if fs.exists(path):
            out += [json.loads(line) for line in fs.read_bytes(path).decode().splitlines()
                    if line.strip()]
    return out


def _side_files(staging: str, folder: str) -> list[str]:
    """The pipeline's per-file side outputs in `staging/folder`, in name order."""
    found = [path for path, _ in fs.match(fs.join(staging, folder, "*"))]
    return sorted(found)


def _check_and_publish(job: JobConfig, schema: Schema, spec: ConvertSpec, tasks: list[ReadTask],
                       input_files: list[dict[str, Any]], run_id: str,
                       started: float) -> JobResult:
    staging = spec.staging_dir
    shards = [ShardResult(**r) for r in _read_jsonl(_side_files(staging, SHARD_PARTS))]
    parts = [_read_jsonl([path]) for path in _side_files(staging, READ_PARTS)]
    notes = _read_jsonl([fs.join(staging, NOTES)])
    # side files are the driver's, never part of the published dataset
    for side in (SHARD_PARTS, READ_PARTS, NOTES):
        fs.delete_tree(fs.join(staging, side))
    acc = account(parts, shards, {t.ordinal for t in tasks})
    bad = acc.rejected
    rejected = acc.summary()
    check_threshold(acc, job.max_bad_fraction)
    for note in notes:
        log.warning(note)
    for split in job.splits:
        got = sorted(r.index for r in shards if r.split == split)
        if not got or got != list(range(_count(shards, split))):
            raise EtlError(f"split {split!r}: shard results are incomplete ({got}); "
                           "nothing published")
    published = {"schema.yaml": schema.to_yaml().encode(),
                 "schema.pbtxt": to_pbtxt(schema).encode()}
    if bad:
        published[REJECTED_FILE] = "".join(json.dumps(b, sort_keys=True) + "\n"
                                           for b in bad).encode()
    for name, data in published.items():
        fs.write_bytes(fs.join(staging, name), data)
    manifest = build_manifest(shards, job.splits, schema.sha256(), job.seed, job.compression,
                              acc.inputs, rejected, notes,
                              files={k: file_entry(v) for k, v in published.items()},
                              input_files=input_files)
    fs.write_bytes(fs.join(staging, MANIFEST), json.dumps(manifest, indent=1).encode())
    publish(staging, job.output, run_id)
    _remove_leftovers(job.output)
    return JobResult(job.output, {k: {"num_records": v["num_records"],
                                       "shards": len(v["shards"])}
                                   for k, v in manifest["splits"].items()},
                     rejected, time.time() - started, manifest)


def _count(shards: list[ShardResult], split: str) -> int:
    mine = [r for r in shards if r.split == split]
    return mine[0].num_shards if mine else 0


def _remove_leftovers(output: str) -> None:
    """Staging dirs of earlier crashed runs (local outputs): a rerun converges."""
    if fs.is_remote(output):
        return
    parent, base = os.path.split(os.path.abspath(output))
    for name in os.listdir(parent):
        if name.startswith(base + ".tmp-") or name.startswith(base + ".old-"):
            fs.delete_tree(os.path.join(parent, name))
