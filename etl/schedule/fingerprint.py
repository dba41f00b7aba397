"""Content fingerprints of input files: what tells a rerun whether its inputs changed.

Size and modification time do not tell (a file rewritten with other bytes of the same size
keeps its size, and `touch -d`/`os.utime` or a copy with `-p` restore the mtime), so every
input file gets a checksum of its bytes:

- gs:// objects: the crc32c GCS keeps in each object's metadata (composite objects too): one
  metadata request per object, nothing downloaded.
- local files: crc32c (Castagnoli, hardware accelerated in google-crc32c) of the whole file,
  read in 8 MiB chunks when the inputs are listed (cost: benchmarks/README.md, "Input
  fingerprints").
- any other file system (s3://, ...), or a gs:// object without a crc32c: crc32c of its bytes
  read through etl.storage.fs (a full read of that object).

A fingerprint is `{"kind": "crc32c", "value": 8 hex digits}`. Pseudo-files (python sources)
have none (`kind: "none"`): their records come from code, so a run reading them is never
judged current (etl.schedule.idempotence). A database query's unit comes with its own
(`kind: "rows"`: the row count and an order-independent hash of the rows, computed by the
database: etl.sources.sql_source), which is kept.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import google_crc32c

from etl.storage import fs
from etl.storage.object_store import Store

CRC32C = "crc32c"
NONE = "none"
CHUNK = 8 << 20
STAT_THREADS = 16  # concurrent metadata requests for many gs:// objects


def crc32c_of(path: str) -> str:
    """crc32c of a file's bytes (local or through etl.storage.fs), as 8 hex digits."""
    checksum = google_crc32c.Checksum()
    with fs.open_read(path) as fh:
        while True:
            data = fh.read(CHUNK)  # bytes: the C extension takes no memoryview
            if not data:
                break
            checksum.update(data)
    return checksum.digest().hex()


def from_gcs_metadata(crc32c_b64: str | None) -> str | None:
    """GCS keeps crc32c as base64 of its 4 big-endian bytes: the same value as 8 hex digits."""
    if not crc32c_b64:
        return None
    return base64.b64decode(crc32c_b64).hex()


def _is_file_path(path: str) -> bool:
    """A path a fingerprint can be taken of (not a python source's pseudo-file)."""
    return fs.is_absolute(path)


def fingerprints(paths: Iterable[str]) -> dict[str, dict[str, str]]:
    """path -> {"kind", "value"} for every path."""
    paths = list(paths)
    found: dict[str, dict[str, str]] = {}
    gcs = [p for p in paths if p.startswith("gs://")]
    if gcs:
        store = Store()
        with ThreadPoolExecutor(min(STAT_THREADS, len(gcs))) as pool:
            infos = dict(zip(gcs, pool.map(store.stat, gcs), strict=True))
        for path, info in infos.items():
            if info is None:
                raise FileNotFoundError(2, "no such object", path)
            value = from_gcs_metadata(info.crc32c)
            if value is not None:
                found[path] = {"kind": CRC32C, "value": value}
    for path in paths:
        if path in found:
            continue
        if not _is_file_path(path) or (fs.on_disk(path) and os.path.isdir(path)):
            found[path] = {"kind": NONE, "value": ""}
        else:
            found[path] = {"kind": CRC32C, "value": crc32c_of(path)}
    return found


def with_fingerprints(inputs: list[dict[str, Any]],
                      known: dict[str, dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """The read plan's input list ({"path", "num_bytes"}) with each file's fingerprint added
    (`fingerprint`, `fingerprint_kind`): what the manifest records as `input_files`. `known`:
    fingerprints already taken of files pinned since (transforms/early_read.py)."""
    known = known or {}
    prints = {**known, **fingerprints(i["path"] for i in inputs
                                      if "fingerprint" not in i and i["path"] not in known)}
    return [i if "fingerprint" in i else
            {**i, "fingerprint": prints[i["path"]]["value"],
             "fingerprint_kind": prints[i["path"]]["kind"]} for i in inputs]
