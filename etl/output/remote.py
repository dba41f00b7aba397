"""A gs:// output: versions, a pointer, a lock, run markers, and what a run may remove.

There is no atomic rename on an object store, so an output prefix holds versions side by side
and one pointer object names the current one:

    OUT/_SUCCESS                  {"version": V, "run_id": ..., "manifest": "V/manifest.json",
                                   "previous": V0, "published": ...} (written last)
    OUT/V/...                     one run's complete dataset (shards, schema, manifest.json,
                                   its own empty _SUCCESS last); never modified once named
    OUT/V0/...                    the previous version, kept for readers still in it
    {parent}/.{name}.etl/lock.json           the run in progress (etl.output.lock.ObjectLock)
    {parent}/.{name}.etl/runs/{run_id}.json  run marker: who, which version, its temp prefix
                                             and the names it creates under OUT/V/
    {parent}/.{name}.etl/run-{run_id}/       the run's spills and staging (no temp_location)

Markers are the proof of ownership: an object is only ever deleted when a marker of ours
names it, and only for a version that is neither current nor previous and whose run is over
(finished, or dead by etl.output.lock.why_dead). A prefix holding anything else is refused
(exit 2), as a local output holding foreign files is.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from etl.base import signals
from etl.base.errors import ConfigError, StorageError
from etl.output.layout import PRODUCER, SUCCESS
from etl.output.lock import DEFAULT_STALE_AFTER, ObjectLock, RunInfo, why_dead
from etl.storage import fs
from etl.storage.object_store import (
    Conflict,
    MissingBucket,
    ObjectInfo,
    Store,
    is_gcs,
    missing_bucket,
    split,
)

log = logging.getLogger(__name__)
RUNS = "runs"
POINTER_FORMAT = 1


def output_prefix(output: str) -> str:
    return output.rstrip("/") + "/"


def work_prefix(output: str) -> str:
    """`gs://b/parent/.name.etl/` beside `gs://b/parent/name`."""
    bucket, name = split(output.rstrip("/"))
    if not name:
        raise ConfigError(f"refusing output {output}: a whole bucket; give a prefix inside it "
                          f"(gs://{bucket}/NAME)")
    parent, _, last = name.rpartition("/")
    return f"gs://{bucket}/{parent + '/' if parent else ''}.{last}.etl/"


@dataclass
class Pointer:
    version: str
    run_id: str
    previous: str | None
    generation: int


def read_pointer(store: Store, output: str) -> Pointer | None:
    """The output's `_SUCCESS` pointer; None when absent; ConfigError when it is not ours."""
    url = output_prefix(output) + SUCCESS
    found = store.read(url)
    if found is None:
        return None
    raw, generation = found
    try:
        doc = json.loads(raw)
        assert doc.get("producer") == PRODUCER and isinstance(doc["version"], str)
        return Pointer(doc["version"], str(doc.get("run_id")), doc.get("previous"), generation)
    except (ValueError, AssertionError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"refusing output {output}: its {SUCCESS} is not a version pointer "
                          f"written by {PRODUCER} (an older, unversioned output or another "
                          "tool's); choose a new prefix") from None


@dataclass
class Marker:
    """A run's claim on what it creates (`runs/{run_id}.json` in the work prefix)."""

    url: str
    run: RunInfo
    version: str
    tmp: str
    objects: list[str] = field(default_factory=list)  # names below OUT/{version}/
    finished: float | None = None
    generation: int = 0

    def to_bytes(self, output: str) -> bytes:
        return json.dumps({"producer": PRODUCER, "output": output, "run": self.run.to_json(),
                           "version": self.version, "tmp": self.tmp, "objects": self.objects,
                           "finished": self.finished}, indent=1).encode()

    def save(self, store: Store, output: str) -> None:
        self.generation = store.write(self.url, self.to_bytes(output), self.generation)

    @classmethod
    def load(cls, store: Store, url: str) -> Marker | None:
        found = store.read(url)
        if found is None:
            return None
        try:
            doc = json.loads(found[0])
            run = RunInfo.from_json(doc["run"])
            if doc.get("producer") != PRODUCER or run is None:
                return None
            return cls(url, run, str(doc["version"]), str(doc["tmp"]),
                       [str(o) for o in doc["objects"]], doc.get("finished"), found[1])
        except (ValueError, KeyError, TypeError):
            return None


def markers(store: Store, output: str) -> list[Marker]:
    found = []
    for obj in store.list(work_prefix(output) + RUNS + "/"):
        marker = Marker.load(store, obj.url)
        if marker is None:
            log.warning("leaving %s alone: not a run marker of %s", obj.url, PRODUCER)
        else:
            found.append(marker)
    return found


def check_output(store: Store, output: str, inputs: list[str]) -> None:
    """Refuse (ConfigError) unless every object under the prefix is the pointer or named by a
    run marker of ours; inputs must not live under it, and it must not lie inside another
    published output of ours (its next run would refuse the objects we add)."""
    base = output_prefix(output)
    work_prefix(output)  # refuses a bucket root
    for path in inputs:
        if path.startswith(base):
            raise ConfigError(f"refusing output {output}: it holds the input {path}; choose a "
                              "prefix of its own")
    try:
        found = [o.url[len(base):] for o in store.list(base)]
    except MissingBucket as e:
        raise missing_bucket(split(output)[0], "output", output) from e
    outer = published_ancestor(store, output)
    if outer:
        raise ConfigError(f"refusing output {output}: it is inside {outer}, a published output "
                          f"of {PRODUCER}, which would then hold objects its runs did not "
                          "create; choose a prefix outside it")
    if not found:
        return
    if SUCCESS in found:
        read_pointer(store, output)
    claimed = {f"{m.version}/{name}" for m in markers(store, output) for name in m.objects}
    foreign = [f for f in found if f != SUCCESS and f not in claimed]
    if foreign:
        inner = published_inside(store, output, foreign)
        if inner:
            raise ConfigError(f"refusing output {output}: it holds {inner}, a published output "
                              f"of {PRODUCER}; choose a prefix that holds no dataset")
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise ConfigError(f"refusing output {output}: it holds {foreign[0]}{more}, which no run "
                          f"of {PRODUCER} created; choose a new prefix (or remove it yourself)")


def is_pointer(store: Store, url: str) -> bool:
    """`url` is a `_SUCCESS` version pointer written by us (read_pointer's test, no error)."""
    found = store.read(url)
    if found is None:
        return False
    try:
        doc = json.loads(found[0])
    except ValueError:
        return False
    return (isinstance(doc, dict) and doc.get("producer") == PRODUCER
            and isinstance(doc.get("version"), str))


def published_ancestor(store: Store, output: str) -> str | None:
    """The nearest prefix above `output` (within its bucket) that is a published output of
    ours (our `_SUCCESS` pointer in it), or None: one stat per level."""
    bucket, name = split(output.rstrip("/"))
    parts = name.split("/")
    for depth in range(len(parts) - 1, 0, -1):
        above = f"gs://{bucket}/{'/'.join(parts[:depth])}"
        if is_pointer(store, output_prefix(above) + SUCCESS):
            return above
    return None


NESTED_LOOKUPS = 20  # pointers read at most when naming a dataset inside a refused prefix


def published_inside(store: Store, output: str, names: list[str]) -> str | None:
    """The shallowest published output of ours among `names` (relative to `output`): one
    whose `_SUCCESS` pointer is among them; None if none of the first NESTED_LOOKUPS is."""
    pointers = sorted((n for n in names if n.endswith("/" + SUCCESS)),
                      key=lambda n: (n.count("/"), n))
    base = output_prefix(output)
    for name in pointers[:NESTED_LOOKUPS]:
        if is_pointer(store, base + name):
            return base + name[:-len(SUCCESS) - 1]
    return None


_FOUND: set[str] = set()  # buckets seen to exist in this process: each is asked once


def check_buckets(places: list[tuple[str, str]], store: Store | None = None) -> None:
    """Every gs:// place's bucket exists, else MissingBucket (exit 2) naming the first missing
    one and the path that needs it: inputs before they are matched (else "no input files
    match"), the temp location at preflight (else a 404 deep inside the run, after its lock
    and marker were written); the output's own listing says the same (check_output). Other
    paths, and buckets spelt with a glob, are left to their own checks."""
    for role, path in places:
        if not is_gcs(path):
            continue
        bucket, _ = split(path)
        if bucket in _FOUND or any(c in bucket for c in "*?["):
            continue
        store = store or Store()
        if not store.bucket_exists(bucket):
            raise missing_bucket(bucket, role, path)
        _FOUND.add(bucket)


def version_dir(output: str, version: str) -> str:
    """`OUT/V`: the folder of version V of a gs:// output."""
    return output_prefix(output) + version


def remove_run(store: Store, output: str, marker: Marker) -> bool:
    """Delete what `marker` claims (its objects under OUT/{version}/, its temp prefix), then
    the marker. False (and the marker kept for the next run) if something could not go."""
    base = output_prefix(output) + marker.version + "/"
    try:
        for name in marker.objects:
            store.delete(base + name)
        tmp = marker.tmp.rstrip("/") + "/"
        local = fs.local_path(tmp)
        if local is not None:
            fs.delete_tree(local)
        elif marker.run.run_id in tmp:  # only a prefix named by its run
            for obj in store.list(tmp):
                store.delete(obj.url)
        store.delete(marker.url, if_generation_match=marker.generation)
    except (StorageError, OSError) as e:
        log.warning("could not remove everything of run %s (the next run tries again): %s",
                    marker.run.run_id, e)
        return False
    return True


def remove_old_runs(store: Store, output: str, keep: set[str], current: str,
                    stale_after: float) -> list[str]:
    """Versions of finished or dead runs, other than `keep` and the current run's: removed.
    Returns the versions removed."""
    removed = []
    for marker in markers(store, output):
        if marker.version in keep or marker.run.run_id == current:
            continue
        reason = "it finished" if marker.finished else why_dead(marker.run, stale_after)
        if reason is None:
            continue  # a run still alive (e.g. one whose lock was broken): not ours to touch
        if remove_run(store, output, marker):
            removed.append(marker.version)
            log.warning("removed version %s of %s (%s)", marker.version, output, reason)
    return removed


class RemoteRun:
    """One run against a gs:// output: lock, clean-up of dead runs, the run's marker and temp
    prefix, publish, and on the way out its own leftovers removed and the lock released."""

    def __init__(self, output: str, info: RunInfo, temp_root: str | None,
                 stale_after: float = DEFAULT_STALE_AFTER, break_lock: bool = False,
                 inputs: list[str] | None = None):
        self.output = output.rstrip("/")
        self.info = info
        self.stale_after = stale_after
        self.break_lock = break_lock
        self.inputs = inputs or []
        self.store = Store()
        self.work = work_prefix(output)
        self.tmp = (fs.join(temp_root, f"etl-{info.run_id}") if temp_root
                    else f"{self.work}run-{info.run_id}")
        self.lock = ObjectLock(self.store, self.work, info, stale_after, break_lock,
                               output=self.output)
        self.marker = Marker(f"{self.work}{RUNS}/{info.run_id}.json", info, info.run_id, self.tmp)
        self.pointer: Pointer | None = None
        self.published = False

    def __enter__(self) -> RemoteRun:
        self.lock.acquire()
        try:
            self.pointer = read_pointer(self.store, self.output)
            keep = {v for v in (self.pointer.version, self.pointer.previous) if v} \
                if self.pointer else set()
            remove_old_runs(self.store, self.output, keep, self.info.run_id, self.stale_after)
            check_output(self.store, self.output, self.inputs)  # again, locked
            self.marker.save(self.store, self.output)
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        try:
            if not self.published and self.marker.generation:
                remove_run(self.store, self.output, self.marker)
            elif self.published:
                self.marker.finished = time.time()
                try:
                    self.marker.save(self.store, self.output)
                except (Conflict, StorageError) as e:
                    log.warning("could not mark run %s finished: %s", self.info.run_id, e)
        finally:
            self.lock.release()

    def verify(self) -> None:
        """The lock is still ours (as RunLock.verify): checked before publishing."""
        self.lock.verify()

    def publish(self, staging: str) -> None:
        """Copy staging to OUT/{run_id}/, then swing the pointer (etl.output.publish.publish_version);
        then remove versions older than the previous one. A critical section (etl.base.signals):
        a signal before the pointer is written publishes nothing (this run's copies are
        removed on the way out), one after it lets the publish complete, then raises."""
        # the manifest and format code (NumPy, pyarrow) load only when a run publishes: a
        # place is asked where things are by `history`, which must start fast
        from etl.output.publish import publish_version  # noqa: PLC0415 - start-up time

        base = staging.rstrip("/") + "/"
        files = [p[len(base):] for p, _ in fs.list_dir(staging)]
        with signals.critical():
            # claimed before the first object exists, so a kill mid-copy leaves nothing unclaimed
            self.marker.objects = sorted(files) + [SUCCESS]
            self.marker.save(self.store, self.output)
            seen = self.pointer.generation if self.pointer else 0
            previous = self.pointer.version if self.pointer else None
            publish_version(self.store, staging, files, self.output, self.info.run_id, seen,
                            previous)
            self.published = True
            keep = {self.info.run_id} | ({previous} if previous else set())
            remove_old_runs(self.store, self.output, keep, self.info.run_id, self.stale_after)


def stat_pointer(store: Store, output: str) -> ObjectInfo | None:
    """The pointer object's metadata (its generation tells whether it changed)."""
    return store.stat(output_prefix(output) + SUCCESS)
