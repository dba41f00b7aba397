"""Manifest, atomic publish and verification of a converted dataset.

Output contract:
    OUT/{split}-{i:05d}-of-{n:05d}.tfrecord[.gz|.zz]
    OUT/schema.yaml  OUT/schema.pbtxt  OUT/manifest.json  OUT/_SUCCESS (written last)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

from etl import fs
from etl.errors import VerifyError
from etl.shard_writer import ShardResult
from etl.tfrecord import compression_of, decompressing_reader, iter_records

MANIFEST = "manifest.json"
SUCCESS = "_SUCCESS"
META_FILES = ("schema.yaml", "schema.pbtxt", MANIFEST, SUCCESS)
REJECTED_DIR = "rejected"


def build_manifest(
    shards: Iterable[ShardResult], splits: list[str], schema_sha256: str, seed: int | None,
    compression: str, inputs: list[dict[str, Any]], rejected: dict[str, Any],
    notes: list[str] | None = None, extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    by_split: dict[str, list[ShardResult]] = {s: [] for s in splits}
    for r in shards:
        by_split.setdefault(r.split, []).append(r)
    out_splits = {}
    for split, results in by_split.items():
        results.sort(key=lambda r: r.index)
        out_splits[split] = {
            "num_records": sum(r.num_records for r in results),
            "num_bytes": sum(r.num_bytes for r in results),
            "shards": [{"path": r.name, "num_records": r.num_records, "num_bytes": r.num_bytes,
                        "sha256": r.sha256} for r in results],
        }
    manifest = {
        "format_version": 1,
        "splits": out_splits,
        "schema_sha256": schema_sha256,
        "shuffle": {"seed": seed} if seed is not None else False,
        "compression": compression,
        "inputs": inputs,
        "rejected": rejected,
        "notes": notes or [],
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    manifest.update(extra or {})
    return manifest


def rejected_summary(bad: list[dict[str, Any]], total_read: int) -> dict[str, Any]:
    reasons = Counter(f"{b.get('feature') or 'record'}: {b['reason']}" for b in bad)
    return {"num_records": len(bad), "fraction": len(bad) / total_read if total_read else 0.0,
            "by_reason": dict(reasons.most_common())}


def publish(staging: str, output: str, run_id: str) -> None:
    """Move a fully written, checked staging directory into place; `_SUCCESS` last.

    Local: two atomic directory renames (old output aside, staging in), so a reader sees the
    old version or the new one; a crash in between leaves no `_SUCCESS` at OUT and the old
    version intact beside it. Object stores have no directory rename: the old marker is
    deleted first, the old objects removed, the new ones copied, the marker written last.
    """
    if fs.is_remote(output):
        old = fs.list_dir(output)
        marker = [p for p, _ in old if p.endswith("/" + SUCCESS)]
        fs.delete(marker)
        fs.delete([p for p, _ in old if p not in marker])
        for path, _ in fs.list_dir(staging):
            fs.rename(path, fs.join(output, path[len(staging.rstrip("/")) + 1 :]))
    else:
        aside = f"{output}.old-{run_id}"
        if os.path.exists(output):
            os.replace(output, aside)
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        os.replace(staging, output)
        fs.delete_tree(aside)
    fs.write_bytes(fs.join(output, SUCCESS), b"")


def load_manifest(path: str) -> dict[str, Any]:
    return json.loads(fs.read_bytes(fs.join(path, MANIFEST)))


def verify(path: str, check_records: bool = True) -> dict[str, Any]:
    """Re-read every shard: framing CRCs, record counts, sizes, sha256, and exact listing.

    Raises VerifyError naming the file (and offset for framing errors).
    """
    if not fs.exists(fs.join(path, SUCCESS)):
        raise VerifyError(f"{path}: no {SUCCESS} marker: the output is incomplete or absent")
    manifest = load_manifest(path)
    listed = set(META_FILES)
    total = 0
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            listed.add(shard["path"])
            total += _verify_shard(fs.join(path, shard["path"]), shard, check_records)
        count = sum(s["num_records"] for s in info["shards"])
        if count != info["num_records"]:
            raise VerifyError(f"{path}: split {split!r} lists {info['num_records']} records but "
                              f"its shards hold {count}")
    base = path.rstrip("/") + "/"
    present = {p[len(base):] for p, _ in fs.list_dir(path)}
    present = {p for p in present if not p.startswith(REJECTED_DIR + "/")}
    missing = sorted(listed - present)
    extra = sorted(present - listed)
    if missing:
        raise VerifyError(f"{path}: missing file(s) listed in the manifest: {missing}")
    if extra:
        raise VerifyError(f"{path}: file(s) not in the manifest: {extra}")
    return {"path": path, "records": total, "splits": {k: v["num_records"] for k, v in
                                                       manifest["splits"].items()}}


def _verify_shard(path: str, entry: dict[str, Any], check_records: bool) -> int:
    if not fs.exists(path):
        raise VerifyError(f"{path}: missing shard listed in the manifest")
    sha = hashlib.sha256()
    size = 0

    def chunks() -> Iterable[bytes]:
        nonlocal size
        with fs.open_read(path) as fh:
            while True:
                data = fh.read(1 << 20)
                if not data:
                    return
                sha.update(data)
                size += len(data)
                yield data

    count = 0
    if check_records:
        raw = chunks()
        try:
            stream = decompressing_reader(_Reader(raw), compression_of(path))
            for _ in iter_records(stream, path):
                count += 1
        except VerifyError as e:
            raise VerifyError(str(e) if str(e).startswith(path) else f"{path}: {e}") from e
        except Exception as e:  # zlib errors on a corrupted compressed shard
            raise VerifyError(f"{path}: cannot decompress: {e}") from e
    else:
        for _ in chunks():
            pass
        count = entry["num_records"]
    if size != entry["num_bytes"]:
        raise VerifyError(f"{path}: {size} bytes on disk, manifest says {entry['num_bytes']}")
    if sha.hexdigest() != entry["sha256"]:
        raise VerifyError(f"{path}: sha256 {sha.hexdigest()} does not match the manifest")
    if count != entry["num_records"]:
        raise VerifyError(f"{path}: holds {count} records, manifest says {entry['num_records']}")
    return count


class _Reader:
    """File-like over an iterator of chunks (so the decompressor sees one stream)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._it = iter(chunks)

    def read(self, _n: int = -1) -> bytes:
        return next(self._it, b"")
