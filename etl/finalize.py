"""The one finalize step of a conversion: every shard result and read report in, the
dataset's metadata out.

Runs once, on one worker, after every shard is written (Beam's file sink and TFDS's writer
finalize the same way). It checks that every split has all its shards and that every record
read was written or rejected (etl.accounting), then writes the dead-letter records, the
schema files and `manifest.json` into the staging directory. The manifest is the run's one
result the launcher reads back; publishing (etl.publish) stays with the launcher, which holds
the output's lock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from etl import fs
from etl.accounting import account
from etl.errors import EtlError
from etl.manifest import MANIFEST, REJECTED_FILE, build_manifest, file_entry
from etl.schema import Schema
from etl.shuffle.shard_writer import ShardResult
from etl.tfmd import to_pbtxt


def finalize_run(staging: str, schema: Schema, splits: Iterable[str], seed: int | None,
                 compression: str, shards: list[ShardResult], reports: list[list[dict[str, Any]]],
                 notes: list[str], input_files: list[dict[str, Any]],
                 expected_reads: Iterable[tuple[int, int]]) -> dict[str, Any]:
    """Check and describe a finished run in `staging`; returns the manifest it wrote.
    `reports`: per read task, its summary line then its rejected records."""
    splits = list(splits)
    for split in splits:
        got = sorted(r.index for r in shards if r.split == split)
        count = next((r.num_shards for r in shards if r.split == split), 0)
        if not got or got != list(range(count)):
            raise EtlError(f"split {split!r}: shard results are incomplete ({got}); "
                           "nothing published")
    acc = account(reports, shards, expected_reads)
    published = {"schema.yaml": schema.to_yaml().encode(),
                 "schema.pbtxt": to_pbtxt(schema).encode()}
    if acc.rejected:
        published[REJECTED_FILE] = "".join(json.dumps(b, sort_keys=True) + "\n"
                                           for b in acc.rejected).encode()
    for name, data in published.items():
        fs.write_bytes(fs.join(staging, name), data)
    manifest = build_manifest(shards, splits, schema.sha256(), seed, compression, acc.inputs,
                              acc.summary(), notes,
                              files={k: file_entry(v) for k, v in published.items()},
                              input_files=input_files)
    fs.write_bytes(fs.join(staging, MANIFEST), json.dumps(manifest, indent=1).encode())
    return manifest


def first_rejected(staging: str) -> dict[str, Any] | None:
    """The first dead-letter record of a finalized run (the file can be large: one line)."""
    path = fs.join(staging, REJECTED_FILE)
    if not fs.exists(path):
        return None
    with fs.open_read(path) as fh:
        line = fh.readline()
    return json.loads(line) if line.strip() else None
