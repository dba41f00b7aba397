"""Quarantine: where a span blocked by a quality check (etl.quality) waits for a person.

    OUT.quarantine/RUN_ID/_QUARANTINE.json   our marker: producer, run id and key, output, the
                                             run the span would have replaced, what we wrote
    OUT.quarantine/RUN_ID/dataset/...        the staged dataset as the run left it (shards,
                                             index files, schema files, manifest.json)
    OUT.quarantine/RUN_ID/checks.json        every failed and warned check: name, feature,
                                             split, measured value, threshold
    OUT.quarantine/RUN_ID/report.html        the report, the failed checks on top

beside the output (gs://: `gs://B/path/OUT.quarantine/RUN_ID/...`), never inside the published
layout: a reader, `verify` and the next run's output check never see it.

The marker is written first and lists every name the entry will hold, so a put cut short
leaves an entry `drop` can remove, and `drop` removes only names a marker of ours lists (and,
locally, the directories that are empty after that). `complete` turns true after the last file.

`release` publishes an entry through the normal publish path, under the output's lock, only if
the output has not moved on since the span was blocked (the published run is still the one the
blocked run would have replaced): locally the `dataset/` folder is renamed into place
(etl.output.publish.publish: same file system, the old output set aside in a run dir);
on gs:// the objects are copied into a new version and the pointer swung
(etl.output.remote.RemoteRun.publish). An interrupted gs:// release leaves the pointer where it
was (the copies are claimed in a run marker first and removed by the next run) and the entry
whole; one interrupted after the pointer moved left the output published as that run, and a
second `release` sees that and only removes the entry.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from etl.base.errors import ConfigError, EtlError, StorageError
from etl.output import guard
from etl.output.layout import MANIFEST, PREVIOUS, PRODUCER, SUCCESS, work_dir
from etl.output.lock import DEFAULT_STALE_AFTER, RunInfo, RunLock
from etl.output.manifest import dataset_dir, load_manifest
from etl.output.publish import publish
from etl.output.remote import RemoteRun
from etl.storage import fs
from etl.storage.object_store import Conflict, Store

log = logging.getLogger(__name__)
SUFFIX = ".quarantine"
MARKER = "_QUARANTINE.json"
DATASET = "dataset"
CHECKS = "checks.json"
PAGE = "report.html"


def root(output: str) -> str:
    """`OUT.quarantine` beside OUT (local: absolute)."""
    if fs.is_remote(output):
        return output.rstrip("/") + SUFFIX
    return os.path.abspath(output).rstrip(os.sep) + SUFFIX


def entry_path(output: str, run_id: str) -> str:
    return fs.join(root(output), run_id)


@dataclass
class Entry:
    """One quarantined run, as its marker describes it."""

    path: str
    run_id: str
    run_key: str
    output: str
    replaces: str | None  # run id of the output published when the span was blocked
    created: str
    objects: list[str]
    complete: bool
    span: str | None = None
    job_sha256: str | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    generation: int = 0  # gs://: the marker's generation

    def to_json(self) -> dict[str, Any]:
        return {"producer": PRODUCER, "run_id": self.run_id, "run_key": self.run_key,
                "output": self.output, "span": self.span, "job_sha256": self.job_sha256,
                "replaces": self.replaces, "created": self.created, "objects": self.objects,
                "complete": self.complete}


def published_run(output: str) -> str | None:
    """The run id of what `output` publishes now (None: nothing published)."""
    ddir = dataset_dir(output)
    if not fs.exists(fs.join(ddir, SUCCESS)):
        return None
    try:
        return str(load_manifest(ddir).get("run_id") or "") or None
    except (OSError, ValueError):
        return None


def put(staging: str, output: str, run_id: str, run_key: str, files: dict[str, bytes],
        replaces: str | None, span: str | None = None, job_sha256: str | None = None) -> str:
    """Move (local: rename) or copy (gs://) the staged dataset into a new entry, with `files`
    (checks.json, report.html) beside it; the marker first, `complete` last. Returns its path."""
    path = entry_path(output, run_id)
    names = sorted(_listing(staging))
    entry = Entry(path, run_id, run_key, output, replaces,
                  dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  [f"{DATASET}/{n}" for n in names] + sorted(files), False, span, job_sha256)
    if fs.is_remote(path):
        store = Store()
        entry.generation = store.write(fs.join(path, MARKER), _marker_bytes(entry), 0)
        for name in names:
            store.copy_new(fs.join(staging, name), fs.join(path, DATASET, name))
        for name, data in files.items():
            store.write(fs.join(path, name), data, 0)
        entry.complete = True
        store.write(fs.join(path, MARKER), _marker_bytes(entry), entry.generation)
        return path
    try:
        os.makedirs(path)
    except FileExistsError as e:
        raise StorageError(f"cannot quarantine run {run_id}: {path} exists already") from e
    except OSError as e:
        raise StorageError(f"cannot create {path}: {e.strerror or e}") from e
    fs.write_bytes(os.path.join(path, MARKER), _marker_bytes(entry))
    os.replace(staging, os.path.join(path, DATASET))  # same file system: beside the output
    for name, data in files.items():
        fs.write_bytes(os.path.join(path, name), data)
    entry.complete = True
    fs.write_bytes(os.path.join(path, MARKER), _marker_bytes(entry))
    return path


def _listing(folder: str) -> list[str]:
    base = folder.rstrip("/").rstrip(os.sep)
    return [p[len(base) + 1:] for p, _ in fs.list_dir(folder)]


def _marker_bytes(entry: Entry) -> bytes:
    return json.dumps(entry.to_json(), indent=1).encode()


def entries(output: str) -> list[Entry]:
    """The quarantined runs of `output`, oldest first; folders without our marker are left
    out (and alone)."""
    top = root(output)
    found: list[Entry] = []
    if fs.is_remote(top):
        store = Store()
        for obj in store.list(top.rstrip("/") + "/"):
            if obj.url.endswith("/" + MARKER):
                entry = _load(obj.url.rsplit("/", 1)[0], store)
                if entry is not None:
                    found.append(entry)
    elif os.path.isdir(top):
        for name in sorted(os.listdir(top)):
            entry = _load(os.path.join(top, name))
            if entry is not None:
                found.append(entry)
    return sorted(found, key=lambda e: e.run_id)


def find(output: str, run_id: str | None = None, run_key: str | None = None) -> Entry | None:
    """The newest complete entry of `run_id` (or holding `run_key`); None if there is none."""
    for entry in reversed(entries(output)):
        if entry.complete and (run_id is None or entry.run_id == run_id) and (
                run_key is None or entry.run_key == run_key):
            return entry
    return None


def _load(path: str, store: Store | None = None) -> Entry | None:
    try:
        if fs.is_remote(path):
            found = (store or Store()).read(fs.join(path, MARKER))
            if found is None:
                return None
            raw, generation = found
        else:
            raw, generation = fs.read_bytes(os.path.join(path, MARKER)), 0
        doc = json.loads(raw)
        if doc.get("producer") != PRODUCER:
            return None
        entry = Entry(path, str(doc["run_id"]), str(doc["run_key"]), str(doc["output"]),
                      doc.get("replaces"), str(doc.get("created")),
                      [str(o) for o in doc["objects"]], bool(doc.get("complete")),
                      doc.get("span"), doc.get("job_sha256"), generation=generation)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if entry.complete and CHECKS in entry.objects:
        try:
            entry.checks = list(json.loads(fs.read_bytes(fs.join(path, CHECKS)))["checks"])
        except (OSError, ValueError, KeyError, TypeError):
            entry.checks = []
    return entry


def drop(entry: Entry) -> list[str]:
    """Remove what `entry`'s marker lists, then the marker (and, locally, the folders left
    empty). Anything else in its folder stays. Returns the paths removed."""
    removed = []
    if fs.is_remote(entry.path):
        store = Store()
        for name in entry.objects:
            url = fs.join(entry.path, name)
            if store.delete(url):
                removed.append(url)
        try:
            store.delete(fs.join(entry.path, MARKER), if_generation_match=entry.generation or None)
        except Conflict as e:
            raise StorageError(f"{entry.path}: its marker changed while it was dropped") from e
        return removed
    for name in entry.objects:
        path = os.path.join(entry.path, name)
        if os.path.lexists(path) and not os.path.isdir(path):
            os.remove(path)
            removed.append(path)
    os.remove(os.path.join(entry.path, MARKER))
    folders = {os.path.dirname(os.path.join(entry.path, n)) for n in entry.objects}
    for folder in sorted(folders | {entry.path}, key=len, reverse=True):
        _remove_empty(folder, stop=root(entry.output))
    _remove_empty(root(entry.output), stop=os.path.dirname(root(entry.output)))
    return removed


def _remove_empty(folder: str, stop: str) -> None:
    """rmdir `folder` and its empty parents up to (not including) `stop`."""
    while folder.startswith(stop) and folder != stop:
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def release(entry: Entry, stale_after: float = DEFAULT_STALE_AFTER,
            break_lock: bool = False) -> str:
    """Publish `entry` as the output (its run id, its manifest), under the output's lock, if
    the output still publishes what the blocked run would have replaced; then drop the entry.
    Returns what happened, in one line. ConfigError (exit 2) when the output moved on."""
    if not entry.complete:
        raise ConfigError(f"{entry.path}: its quarantine is incomplete (the run stopped while "
                          "putting it there); drop it and rerun the span")
    output = entry.output
    info = RunInfo.current(entry.run_id)
    if fs.is_remote(output):
        with RemoteRun(output, info, None, stale_after, break_lock) as run:
            now = run.pointer.run_id if run.pointer else None
            if now == entry.run_id:
                drop(entry)
                return f"{output} already publishes run {entry.run_id}: removed its quarantine"
            _not_moved_on(entry, now)
            run.verify()
            run.publish(fs.join(entry.path, DATASET))
        drop(entry)
        return f"released run {entry.run_id}: {output} publishes it now"
    workdir = work_dir(output)
    with RunLock(workdir, info, stale_after, break_lock, output=output):
        guard.recover_leftovers(workdir, output, stale_after)
        now = published_run(output)
        if now == entry.run_id:
            drop(entry)
            return f"{output} already publishes run {entry.run_id}: removed its quarantine"
        _not_moved_on(entry, now)
        guard.check_output(output, [])
        tmp = guard.create_run_dir(workdir, info)
        try:
            publish(fs.join(entry.path, DATASET), output, entry.run_id,
                    aside=os.path.join(tmp, PREVIOUS))
        finally:
            if not os.path.isdir(os.path.join(tmp, PREVIOUS)):
                guard.remove_run_dir(tmp)
    drop(entry)
    return f"released run {entry.run_id}: {output} publishes it now"


def _not_moved_on(entry: Entry, now: str | None) -> None:
    if now != entry.replaces:
        was = f"run {entry.replaces}" if entry.replaces else "nothing"
        raise ConfigError(f"refusing to release run {entry.run_id}: {entry.output} has moved on "
                          f"since it was blocked (it published {was} then, run {now or 'nothing'}"
                          " now), so releasing it would replace newer data; drop it "
                          f"(quarantine drop {entry.output} --run {entry.run_id}) or rerun the "
                          "span")


def manifest_of(entry: Entry) -> dict[str, Any]:
    """The quarantined dataset's manifest."""
    try:
        return json.loads(fs.read_bytes(fs.join(entry.path, DATASET, MANIFEST)))
    except (OSError, ValueError) as e:
        raise EtlError(f"{entry.path}: cannot read its {MANIFEST}: {fs.first_line(e)}") from e


def manifest_of_output(output: str) -> dict[str, Any]:
    """The manifest `output` publishes now."""
    return load_manifest(dataset_dir(output))
