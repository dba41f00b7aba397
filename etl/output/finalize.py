"""The one finalize step of a conversion: every shard result and read report in, the
dataset's metadata out.

Runs once, on one worker, after every shard is written (Beam's file sink and TFDS's writer
finalize the same way). It checks that every split has all its shards and that every record
read was written or rejected (etl.output.accounting), then writes the dead-letter records, the
schema files, the TFDS metadata (etl.output.tfds_info) and `manifest.json` into the staging
directory. The manifest is the run's one result the launcher reads back; publishing
(etl.output.publish) stays with the launcher, which holds
the output's lock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from etl.base.errors import EtlError
from etl.contract.schema import Schema
from etl.contract.tfmd import to_pbtxt
from etl.formats.shards import ShardFormat
from etl.output.accounting import account, missing_section
from etl.output.layout import MANIFEST, REJECTED_FILE, SCHEMA_FILE, STATS_FILE, TFMD_FILE
from etl.output.manifest import build_manifest, file_entry
from etl.output.tfds_info import tfds_files
from etl.shuffle.shard_writer import ATTEMPT_SUFFIX, ShardResult
from etl.storage import fs


def finalize_run(staging: str, schema: Schema, splits: Iterable[str], seed: int | None,
                 fmt: ShardFormat, shards: list[ShardResult], reports: list[list[dict[str, Any]]],
                 notes: list[str], input_files: list[dict[str, Any]],
                 expected_reads: Iterable[tuple[int, int]],
                 stats: bytes | None = None) -> dict[str, Any]:
    """Check and describe a finished run in `staging`; returns the manifest it wrote.
    `reports`: per read task, its summary line then its rejected records. `stats`: the
    statistics gathered in the conversion pass (stats.json), listed like the schema files."""
    splits = list(splits)
    shards = unique_results(shards)
    for split in splits:
        got = sorted(r.index for r in shards if r.split == split)
        count = next((r.num_shards for r in shards if r.split == split), 0)
        if not got or got != list(range(count)):
            raise EtlError(f"split {split!r}: shard results are incomplete ({got}); "
                           "nothing published")
    remove_attempts(staging, [r.name for r in shards]
                    + [r.index_file.name for r in shards if r.index_file is not None])
    acc = account(reports, shards, expected_reads)
    published = {SCHEMA_FILE: schema.to_yaml().encode(), TFMD_FILE: to_pbtxt(schema).encode()}
    if stats is not None:
        published[STATS_FILE] = stats
    if acc.rejected:
        published[REJECTED_FILE] = "".join(json.dumps(b, sort_keys=True) + "\n"
                                           for b in acc.rejected).encode()
    manifest = build_manifest(shards, splits, schema.sha256(), seed, fmt, acc.inputs,
                              acc.summary(), list(notes), input_files=input_files,
                              extra={"missing_values": missing_section(acc.missing, schema)})
    # TFDS metadata describes the splits just listed; listed and sealed like the schema files
    tfds, tfds_notes = tfds_files(schema, manifest, fmt)
    published.update(tfds)
    manifest["notes"].extend(tfds_notes)  # the launcher logs every note (cli.run)
    for name, data in published.items():
        fs.write_bytes(fs.join(staging, name), data)
    manifest["files"] = {k: file_entry(v) for k, v in published.items()}
    fs.write_bytes(fs.join(staging, MANIFEST), json.dumps(manifest, indent=1).encode())
    return manifest


def unique_results(shards: Iterable[ShardResult]) -> list[ShardResult]:
    """One result per shard. A runner may run a shard's write twice (a retried bundle whose
    first result also arrived, a straggler's duplicate); each attempt writes the same bytes
    and reports the same result, which must count once. Two different results for one shard
    would mean the write is not deterministic: a bug, and nothing is published."""
    seen: dict[tuple[str, int], ShardResult] = {}
    for result in shards:
        first = seen.setdefault((result.split, result.index), result)
        if first != result:
            raise EtlError(f"shard {result.name} was written twice with different results "
                           f"({first.num_records} records, sha256 {first.sha256[:12]}… vs "
                           f"{result.num_records}, {result.sha256[:12]}…); nothing published. "
                           "This is a bug: please report it")
    return list(seen.values())


def remove_attempts(staging: str, names: list[str]) -> None:
    """Delete what failed attempts at writing these shards left (a worker killed before it
    could remove its own `<shard>.<attempt>.attempt` file, or `<shard>.index.<attempt>.attempt`
    for its index): only files of that exact form,
    which only the shard writer creates, in this run's own staging directory."""
    if not fs.renames(staging):  # object stores: no attempt files (etl.shuffle.shard_writer)
        return
    pattern = re.compile("(?:" + "|".join(re.escape(n) for n in names) + r")\.[0-9a-f]{12}"
                         + re.escape(ATTEMPT_SUFFIX))
    here = staging.rstrip("/")
    fs.delete([p for p, _ in fs.list_dir(staging)
               if fs.dirname(p) == here and pattern.fullmatch(fs.basename(p))])


def first_rejected(staging: str) -> dict[str, Any] | None:
    """The first dead-letter record of a finalized run (the file can be large: one line)."""
    path = fs.join(staging, REJECTED_FILE)
    if not fs.exists(path):
        return None
    with fs.open_read(path) as fh:
        line = fh.readline()
    return json.loads(line) if line.strip() else None
