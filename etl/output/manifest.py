"""Manifest and verification of a converted dataset (publishing is etl.output.publish).

Output contract:
    OUT/{split}-{i:05d}-of-{n:05d}.tfrecord[.gz|.zz]
    OUT/{split}-{i:05d}-of-{n:05d}.tfrecord.index (uncompressed shards, unless `index: false`)
    OUT/schema.yaml  OUT/schema.pbtxt  OUT/manifest.json  OUT/_SUCCESS (written last)
    OUT/rejected/rejected.jsonl (when bad records were allowed through)
    OUT/report.json  OUT/report.html (optional, written later by `report`: not in the manifest)

Every file but the manifest itself and the empty `_SUCCESS` marker is listed in the manifest
with its size and sha256 (shards under `splits`, each with its index file under `index`, the
others under `files`), so `verify` can prove the directory is whole and exactly ours. The only
files allowed beside them unlisted are
the two REPORT_FILES that `report` writes after the run, and only when they carry its marker
(report_is_ours): a report describes the data, it is not part of it.

What the run was made from (etl.schedule.idempotence compares it before a rerun): `schema_sha256`,
`input_files` (every file read: path, num_bytes, fingerprint and fingerprint_kind, e.g.
crc32c), and, added by the launcher before publishing (record_run): `job_sha256` (the job
document plus its span), `inputs_sha256`, `span`, `run_key` and `run_id`; and `published_by`,
which job it is (each source's format and paths, the schema's name: etl.output.origin), so a
run of another job into the output is refused instead of replacing it silently.

`sealed` (local outputs, written by `seal` when the run publishes, after every file is
final): each listed file's size, modification time (ns) and inode, and the manifest's own
modification time, which `seal` sets to the value it records. gs:// outputs keep the same
record in the `_SUCCESS` pointer instead (`objects`: each object's generation and crc32c,
etl.output.publish.publish_version), where the manifest is covered too. `verify --quick` and
the skip rule compare them with one stat per file (one listing on gs://): any write since the
publish is seen without reading a byte (docs/output.md, "What the skip rule checks").

`missing_values` (etl.output.accounting.missing_section): per feature that had a missing
value, `missing` (records read without one), `defaulted` (records written holding its
`default` instead) and that `default`; nothing is filled without being counted here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Iterable
from typing import Any

from etl.base.errors import ForeignEntries, VerifyError
from etl.formats.shards import DEFAULT_FORMAT, ShardFormat, adapter_of
from etl.output.layout import (
    MANIFEST,
    PRODUCER,
    SUCCESS,
)
from etl.output.ownership import belongs, foreign_content, listed_files
from etl.shuffle.shard_writer import ShardResult
from etl.storage import fs
from etl.storage.object_store import Store, is_gcs

FORMAT_VERSION = 2
SEALED = "sealed"
# what the quick check could compare, as verify's result says (etl.schedule.idempotence warns)
BY_STAT = "size, modification time and inode of every file"
BY_GENERATION = "size, generation and crc32c of every object"
BY_SIZE = "sizes only"
NOT_SEALED = ("published without a record of its files' modification times or generations "
              "(by an older version): the skip rule checked sizes only; `run --verify-full` "
              "reads every byte, and the next rebuild records them")


class ManifestError(VerifyError, ValueError):
    """A manifest.json that is missing, unreadable or not a manifest of ours (exit 3, naming
    the file). A ValueError too, so callers that treat an unreadable manifest as "not
    published" keep doing so."""


def build_manifest(
    shards: Iterable[ShardResult], splits: list[str], schema_sha256: str, seed: int | None,
    fmt: ShardFormat, inputs: list[dict[str, Any]], rejected: dict[str, Any],
    notes: list[str] | None = None, extra: dict[str, Any] | None = None,
    files: dict[str, dict[str, Any]] | None = None, input_files: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """`inputs`: per input file read, written and rejected counts; `files`: the other
    published files (schema.yaml, schema.pbtxt, rejected/...) -> num_bytes and sha256;
    `input_files`: every file read (multi-file formats read partner files) with its size."""
    by_split: dict[str, list[ShardResult]] = {s: [] for s in splits}
    for r in shards:
        by_split.setdefault(r.split, []).append(r)
    out_splits = {}
    for split, results in by_split.items():
        results.sort(key=lambda r: r.index)
        out_splits[split] = {
            "num_records": sum(r.num_records for r in results),
            "num_bytes": sum(r.num_bytes for r in results),
            "shards": [shard_entry(r) for r in results],
        }
    manifest = {
        "format_version": FORMAT_VERSION,
        "producer": PRODUCER,
        "splits": out_splits,
        "files": files or {},
        "schema_sha256": schema_sha256,
        "shuffle": {"seed": seed} if seed is not None else False,
        "compression": fmt.compression,
        "inputs": inputs,
        "input_files": input_files or [],
        "rejected": rejected,
        "notes": notes or [],
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if fmt.kind != DEFAULT_FORMAT:  # absent: TFRecord, as every manifest before the key
        manifest["format"] = fmt.kind
    manifest.update(extra or {})
    return manifest


def shard_entry(r: ShardResult) -> dict[str, Any]:
    """A shard as the manifest lists it; its index file (path, size, sha256) under `index`."""
    entry: dict[str, Any] = {"path": r.name, "num_records": r.num_records,
                             "num_bytes": r.num_bytes, "sha256": r.sha256}
    if r.index_file is not None:
        entry["index"] = {"path": r.index_file.name, "num_bytes": r.index_file.num_bytes,
                          "sha256": r.index_file.sha256}
    return entry


def record_run(staging: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Add the run's identity (`fields`) to the manifest in `staging`, before it is published
    (the manifest is not listed in itself, so nothing else changes); returns it."""
    path = fs.join(staging, MANIFEST)
    manifest = json.loads(fs.read_bytes(path))
    manifest.update(fields)
    fs.write_bytes(path, json.dumps(manifest, indent=1).encode())
    return manifest


def file_entry(data: bytes) -> dict[str, Any]:
    """What the manifest records of a published file other than a shard."""
    return {"num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def dataset_dir(out: str) -> str:
    """The directory whose manifest.json describes `out`'s current data.

    Local outputs are published by rename: `out` itself (its `_SUCCESS` is empty). An
    object-store output holds versions side by side and its `_SUCCESS` is a JSON pointer
    ({"version": V, ...}, etl.output.remote): `out/V`. Without a pointer (absent, empty, or
    not ours) `out` is returned, and verify says what is missing there."""
    if fs.renames(out):  # published by rename: no versions below it
        return out
    marker = fs.join(out, SUCCESS)
    if not fs.exists(marker):
        return out
    raw = fs.read_bytes(marker)
    try:
        version = json.loads(raw)["version"] if raw.strip() else None
    except (ValueError, KeyError, TypeError):
        version = None
    if not isinstance(version, str) or not version or "/" in version or version in (".", ".."):
        return out
    return fs.join(out, version)


def load_manifest(path: str) -> dict[str, Any]:
    """The manifest of the dataset directory `path`, checked to have the shape every reader
    relies on (`_shape_problem`): garbage is a ManifestError naming the file, never a
    KeyError or a path outside the output further on."""
    where = fs.join(path, MANIFEST)
    missing = ManifestError(f"{where}: missing: nothing in {path} can be checked without it "
                            "(damaged, or not a dataset written by this project)")
    try:
        raw = fs.read_bytes(where)
    except OSError as e:  # an object store says "not found" its own way
        if fs.not_found(where, e):
            raise missing from None
        raise ManifestError(f"{where}: cannot be read: {fs.first_line(e)}") from e
    return parse_manifest(raw, where)


def published_run(output: str) -> str | None:
    """The run id of what `output` publishes now (None: nothing published)."""
    ddir = dataset_dir(output)
    if not fs.exists(fs.join(ddir, SUCCESS)):
        return None
    try:
        return str(load_manifest(ddir).get("run_id") or "") or None
    except (OSError, ValueError, AttributeError):
        return None


def parse_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """The manifest in `raw` (read from `where`), or ManifestError naming `where`."""
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError as e:
        raise ManifestError(f"{where}: damaged: not UTF-8 text (byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise ManifestError(f"{where}: damaged: not valid JSON ({e.msg} at line {e.lineno}, "
                            f"column {e.colno})") from e
    problem = _shape_problem(doc)
    if problem:
        raise ManifestError(f"{where}: damaged: {problem}")
    return doc


def _shape_problem(doc: Any) -> str | None:
    """What makes `doc` unusable as a manifest, or None: splits of shards and other files,
    each with a plain relative name, an integer size and count, a sha256 string."""
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not an object"
    splits, files = doc.get("splits"), doc.get("files", {})
    if not isinstance(splits, dict):
        return "no `splits` object"
    if not isinstance(files, dict):
        return "`files` is not an object"
    for name, entry in files.items():
        problem = _entry_problem(name, entry, False)
        if problem:
            return f"files[{name!r}]: {problem}"
    for split, info in splits.items():
        if not isinstance(info, dict) or not isinstance(info.get("shards"), list) or not (
                _is_count(info.get("num_records"))):
            return f"split {split!r}: not an object with `num_records` and a `shards` list"
        for i, shard in enumerate(info["shards"]):
            problem = (_entry_problem(shard.get("path"), shard, True)
                       if isinstance(shard, dict) else "not an object")
            index = shard.get("index") if isinstance(shard, dict) else None
            if problem is None and index is not None:
                problem = (_entry_problem(index.get("path"), index, False)
                           if isinstance(index, dict) else "`index` is not an object")
            if problem:
                return f"split {split!r}, shard {i}: {problem}"
    sealed = doc.get(SEALED)
    if sealed is not None and not (isinstance(sealed, dict)
                                   and isinstance(sealed.get("files"), dict)):
        return f"`{SEALED}` is not an object with `files`"
    return None


def _entry_problem(name: Any, entry: Any, shard: bool) -> str | None:
    if not isinstance(name, str) or not _plain_name(name):
        return f"{name!r} is not a file name inside the output"
    if not isinstance(entry, dict) or not _is_count(entry.get("num_bytes")) or not isinstance(
            entry.get("sha256"), str) or (shard and not _is_count(entry.get("num_records"))):
        return f"{name}: no integer size{', record count' if shard else ''} and sha256"
    return None


def _plain_name(name: str) -> bool:
    """A relative path below the output: no absolute path, `..`, empty part or backslash."""
    parts = name.split("/")
    return bool(name) and "\\" not in name and "\0" not in name and all(
        p not in ("", ".", "..") for p in parts)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def seal(staging: str) -> None:
    """Record, in the manifest of a local dataset about to be published, each listed file's
    size, modification time (ns) and inode, then set the manifest's own modification time to
    a value recorded inside it. Called by etl.output.publish.publish once every file is final
    (a rename of the directory changes none of this); `verify --quick` and the skip rule then
    see any write since, one stat per file. A file system whose clock cannot keep the chosen
    time records no manifest time (its files are still compared)."""
    manifest = load_manifest(staging)
    stats = fs.list_stats(staging)
    listed = listed_files(manifest) - {MANIFEST, SUCCESS}
    files = {name: list(stats[name]) for name in sorted(listed) if name in stats}
    path = fs.join(staging, MANIFEST)
    kept = fs.set_mtime_ns(path, time.time_ns())  # the clock's grain: a value stat returns as is
    manifest[SEALED] = {"files": files, "manifest_mtime_ns": kept}
    fs.write_bytes(path, json.dumps(manifest, indent=1).encode())
    if fs.set_mtime_ns(path, kept) != kept:
        manifest[SEALED]["manifest_mtime_ns"] = None
        fs.write_bytes(path, json.dumps(manifest, indent=1).encode())


def verify(path: str, check_records: bool = True, quick: bool = False) -> dict[str, Any]:
    """Re-read every shard: framing CRCs, record counts, sizes, sha256, and exact listing.

    With `quick`, read nothing but the listing: every listed file present with its manifest
    size, nothing unlisted (one directory walk or one object listing). That is what a rerun
    checks before it skips a span as current (etl.schedule.idempotence.damage), so `verify --quick`
    and the skip rule agree on what intact means; a flipped byte needs the full read.

    Raises VerifyError (exit 3) naming the file (and offset for framing errors). A local
    output passes only if the next run would take it as ours (etl.output.ownership.foreign_content:
    no empty directory or other entry the manifest does not list). An object-store output is
    checked in the version its `_SUCCESS` names (dataset_dir).
    """
    given = path
    path = dataset_dir(path)
    if not fs.exists(fs.join(path, SUCCESS)):
        raise VerifyError(f"{path}: no {SUCCESS} marker: the output is incomplete or absent")
    manifest = load_manifest(path)
    listed = listed_files(manifest)
    base = path.rstrip("/") + "/"
    seal = _Seal.of(given, path, manifest) if quick else None
    sizes = seal.sizes if seal is not None else {
        p[len(base):]: size for p, size in fs.list_dir(path)}
    total = 0
    for name, entry in manifest.get("files", {}).items():
        if seal is not None:
            _check_size(fs.join(path, name), sizes.get(name), entry, "file")
            seal.check(name)
        else:
            _verify_file(path, name, entry)
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            total += _verify_listed_shard(path, shard, sizes, seal, check_records)
        count = sum(s["num_records"] for s in info["shards"])
        if count != info["num_records"]:
            raise VerifyError(f"{path}: split {split!r} lists {info['num_records']} records but "
                              f"its shards hold {count}")
    _check_exact_listing(path, manifest, listed, sizes)
    if seal is not None:
        seal.check(MANIFEST)
    return {"path": path, "records": total, "splits": {k: v["num_records"] for k, v in
                                                       manifest["splits"].items()},
            "checked": "every byte" if seal is None else seal.checked}


def _verify_listed_shard(path: str, shard: dict[str, Any], sizes: dict[str, int],
                         seal: _Seal | None, check_records: bool) -> int:
    """One shard (and its index file) checked, quick (sizes and the seal) or by a full
    read; its number of records."""
    index = shard.get("index")
    if seal is not None:
        _check_size(fs.join(path, shard["path"]), sizes.get(shard["path"]), shard,
                    "shard")
        seal.check(shard["path"])
        if index is not None:
            _check_size(fs.join(path, index["path"]), sizes.get(index["path"]), index,
                        "index file")
            seal.check(index["path"])
        return shard["num_records"]
    # the shard's format (by its name) re-reads it: etl.formats.shards
    return adapter_of(shard["path"]).verify(fs.join(path, shard["path"]), shard, check_records,
                                            None if index is None else fs.join(path, index["path"]))


def _check_exact_listing(path: str, manifest: dict[str, Any], listed: set[str],
                         sizes: dict[str, Any]) -> None:
    """Every listed file present, nothing unlisted; locally, nothing the next run would
    refuse to replace."""
    missing = sorted(listed - set(sizes))
    extra = sorted(p for p in sizes if not belongs(manifest, path, p))
    if missing:
        raise VerifyError(f"{path}: missing file(s) listed in the manifest: {missing}")
    if extra:
        raise ForeignEntries(f"{path}: file(s) not in the manifest: {extra}")
    if fs.local_path(path) is not None:
        # the next run's own test of "ours" (empty directories, links to directories, the
        # producer tag): verify passes exactly the outputs a run would replace
        foreign = foreign_content(path)
        if foreign:
            raise ForeignEntries(f"{path}: {foreign}; the next run would refuse to replace it")


class _Seal:
    """What the quick check compares beyond sizes: the publish record of a local output (the
    manifest's `sealed`: size, mtime_ns, inode per file, and the manifest's own mtime) or of a
    gs:// output (the pointer's `objects`: generation and crc32c per object, the manifest
    included), against one walk with a stat per file or one object listing. Without a record
    (published by an older version, or a path the pointer does not name) only sizes are
    compared, and `checked` says so."""

    def __init__(self, path: str, sizes: dict[str, int], now: dict[str, tuple[Any, ...]],
                 then: dict[str, Any] | None, checked: str):
        self.path, self.sizes, self.now, self.then = path, sizes, now, then
        self.checked = checked if then is not None else BY_SIZE

    @classmethod
    def of(cls, given: str, path: str, manifest: dict[str, Any]) -> _Seal:
        base = path.rstrip("/") + "/"
        if fs.local_path(path) is not None:  # a file system's stats: the seal compares them
            stats = fs.list_stats(path)
            sealed = manifest.get(SEALED)
            then = dict(sealed["files"]) if sealed else None
            now: dict[str, tuple[Any, ...]] = {k: v[1:] for k, v in stats.items()}
            if then is not None and sealed.get("manifest_mtime_ns") is not None:
                then[MANIFEST] = [None, sealed["manifest_mtime_ns"], None]
                now[MANIFEST] = (fs.mtime_ns(fs.join(path, MANIFEST)), None)
            return cls(path, {k: v[0] for k, v in stats.items()}, now, then, BY_STAT)
        if not is_gcs(path):  # another object store: sizes from its listing
            return cls(path, {p[len(base):]: n for p, n in fs.list_dir(path)}, {}, None, BY_SIZE)
        infos = Store().list(base)
        then = _published_objects(given, path)
        return cls(path, {o.url[len(base):]: o.size for o in infos},
                   {o.url[len(base):]: (o.generation, o.crc32c) for o in infos}, then,
                   BY_GENERATION)

    def check(self, name: str) -> None:
        """VerifyError when `name` (its size already checked) changed since the publish."""
        if self.then is None:
            return
        where = fs.join(self.path, name)
        recorded = self.then.get(name)
        if recorded is None:
            if name == MANIFEST:
                return  # a file system that could not keep the manifest's time
            raise VerifyError(f"{where}: not in the record made when the output was published "
                              "(the manifest was changed since)")
        now = self.now.get(name)
        if now is None:
            raise VerifyError(f"{where}: missing file listed in the manifest")
        if self.checked == BY_GENERATION:
            if tuple(recorded) != tuple(now):
                raise VerifyError(f"{where}: changed since it was published: generation "
                                  f"{now[0]} (crc32c {now[1]}) in the bucket, {recorded[0]} "
                                  f"(crc32c {recorded[1]}) when published")
            return
        _, mtime, ino = recorded
        if now[0] != mtime:
            raise VerifyError(f"{where}: changed since it was published: modified "
                              f"{_when(now[0])}, published {_when(mtime)}")
        if ino is not None and now[1] != ino:
            raise VerifyError(f"{where}: changed since it was published: another file (inode "
                              f"{now[1]}, published as inode {ino})")


def _when(ns: int | None) -> str:
    if ns is None:
        return "never"
    stamp = dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.timezone.utc)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{ns % 1_000_000_000:09d}Z"


def _published_objects(given: str, path: str) -> dict[str, Any] | None:
    """The `objects` record of the pointer that names the version `path` (None: not given)."""
    if given.rstrip("/") == path.rstrip("/"):
        return None  # a version dir given directly: no pointer vouches for it
    try:
        pointer = json.loads(fs.read_bytes(fs.join(given, SUCCESS)))
    except (OSError, ValueError):
        return None
    objects = pointer.get("objects") if isinstance(pointer, dict) else None
    return objects if isinstance(objects, dict) else None


def _check_size(path: str, size: int | None, entry: dict[str, Any], what: str) -> None:
    if size is None:
        raise VerifyError(f"{path}: missing {what} listed in the manifest")
    if size != entry["num_bytes"]:
        raise VerifyError(f"{path}: {size} bytes on disk, manifest says {entry['num_bytes']}")


def _verify_file(out: str, name: str, entry: dict[str, Any]) -> None:
    path = fs.join(out, name)
    if not fs.exists(path):
        raise VerifyError(f"{path}: missing file listed in the manifest")
    got = file_entry(fs.read_bytes(path))
    if got["num_bytes"] != entry["num_bytes"]:
        raise VerifyError(f"{path}: {got['num_bytes']} bytes on disk, manifest says "
                          f"{entry['num_bytes']}")
    if got["sha256"] != entry["sha256"]:
        raise VerifyError(f"{path}: sha256 {got['sha256']} does not match the manifest")
