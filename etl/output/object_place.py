"""A gs:// output prefix as an OutputPlace (etl.output.place): versions side by side and one
pointer, its lock and run markers in the work prefix beside it (etl.output.remote,
etl.output.lock.ObjectLock). Nothing is renamed; readers never see half a publish."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from etl.base.errors import EtlError
from etl.output import guard, layout, remote
from etl.output.lock import LOCK, RunInfo
from etl.storage import fs
from etl.storage.object_store import Store


class ObjectPlace:
    """The output prefix `output` in an object store."""

    read_without_a_store = False

    def __init__(self, output: str):
        self.output = output

    def check(self, inputs: Iterable[str], cwd: str | None = None) -> None:
        """Run markers instead of a work dir: etl.output.remote.check_output (`cwd` is no
        object's folder)."""
        remote.check_output(Store(), self.output, list(inputs))

    def published_ancestor(self) -> str | None:
        return remote.published_ancestor(Store(), self.output)

    def published_inside(self) -> str | None:
        store = Store()
        base = remote.output_prefix(self.output)
        names = [o.url[len(base):] for o in store.list(base)]
        return remote.published_inside(store, self.output, names)

    def has_leftover_runs(self) -> bool:
        return False  # dead runs' versions are removed under the lock (remote.RemoteRun)

    def check_room(self, needed: int, temp_root: str | None) -> None:
        """A bucket has no free space to check; a local temp location does."""
        if temp_root and fs.local_path(temp_root) is not None:
            guard.check_free_space([(temp_root, "temp location")], needed)

    def lock_holder(self) -> RunInfo | None:
        try:
            found = Store().read(remote.work_prefix(self.output) + LOCK)
            return RunInfo.from_json(json.loads(found[0] if found else b""))
        except (OSError, ValueError, EtlError):
            return None

    @contextmanager
    def hold(self, info: RunInfo, stale_after: float, break_lock: bool,
             temp_root: str | None = None, inputs: Iterable[str] = ()) -> Iterator[ObjectHeld]:
        """Lock, dead runs' versions removed, the prefix checked again and this run's marker
        written (remote.RemoteRun); its own leftovers removed and the lock released after."""
        with remote.RemoteRun(self.output, info, temp_root, stale_after, break_lock,
                              inputs=list(inputs)) as run:
            yield ObjectHeld(run)

    @property
    def history_root(self) -> str:
        """The prefix above the output (gs://bucket/name: the bucket)."""
        head, _, _ = self.output.rstrip("/").rpartition("/")
        return head if "://" in head else self.output.rstrip("/")

    @property
    def quarantine_root(self) -> str:
        return self.output.rstrip("/") + layout.QUARANTINE_SUFFIX

    def version_dir(self, run_id: str) -> str | None:
        return remote.version_dir(self.output, run_id)


class ObjectHeld:
    """A gs:// output whose lock this process holds (a RemoteRun entered)."""

    def __init__(self, run: remote.RemoteRun):
        self.run = run
        self.output = run.output
        self.tmp = run.tmp
        # no work dir on this machine: the log goes to the temp directory
        self.log_file = os.path.join(tempfile.gettempdir(), "tfrecord-etl", "logs",
                                     f"{run.info.run_id}.log")

    def clear_leftovers(self, current: str | None) -> None:
        pass  # done when the lock was taken (remote.RemoteRun.__enter__)

    def published_run(self) -> str | None:
        return self.run.pointer.run_id if self.run.pointer else None

    def start_run(self, still_wanted: Callable[[], bool]) -> bool:
        """The prefix was checked again and the marker written under the lock already; the
        pointer read then decides what readers see, so `still_wanted` is not asked again."""
        return True

    def verify(self) -> None:
        self.run.verify()

    def publish(self, staging: str) -> None:
        self.run.publish(staging)

    def release(self, staging: str) -> None:
        self.run.verify()
        self.run.publish(staging)

    def keep_run_dir(self) -> bool:
        return False  # a version is published by copies: nothing set aside

    def remove_run_dir(self) -> None:
        local = fs.local_path(self.tmp)  # a local temp location, or a temp prefix
        if local is not None:
            guard.remove_run_dir(local)
        else:
            fs.delete_tree(self.tmp)

    def prune_logs(self) -> None:
        pass  # the logs are in the temp directory, one per run
