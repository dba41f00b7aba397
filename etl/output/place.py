"""Where an output lives, asked once: a path becomes an OutputPlace here, and every decision its
location makes goes through that one interface.

An output is a local directory (replaced by renames; its lock, run directories and logs in the
work dir `.{name}.etl/` beside it: etl.output.guard, etl.output.lock.RunLock) or a gs://
prefix (versions side by side and a pointer; lock and run markers in the work prefix:
etl.output.remote, etl.output.lock.ObjectLock). The two differ in how; they answer the same
questions, so a caller (cli.run, the quarantine, the run history, `summary`) asks the place and
never tests the path itself. `place_for` is the one place that chooses (as Beam's FileSystems
and TFDS's epath give every caller one interface); the implementations live in
etl.output.local_place and etl.output.object_place.

Questions about paths that are not an output (an input to read, a temp folder, a shard to
mmap) are asked of etl.storage.fs by intention (`local_path`, `on_disk`, `renames`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Protocol

from etl.output.local_place import LocalPlace
from etl.output.lock import RunInfo
from etl.output.object_place import ObjectPlace
from etl.storage import fs


class HeldPlace(Protocol):
    """An output whose lock this process holds (OutputPlace.hold, until its block ends)."""

    output: str
    tmp: str  # this run's directory (local: made by start_run) or its temp prefix
    log_file: str  # where this run's log goes

    def clear_leftovers(self, current: str | None) -> None:
        """Remove what dead runs left (local: their run directories)."""

    def published_run(self) -> str | None:
        """The run id the output publishes now, as seen under the lock (None: nothing)."""

    def start_run(self, still_wanted: Callable[[], bool]) -> bool:
        """Make this run's directory after checking the output again under the lock; False
        (nothing made) when `still_wanted` says the run is not needed after all."""

    def verify(self) -> None:
        """The lock is still ours (LockedError otherwise): checked before publishing."""

    def publish(self, staging: str) -> None:
        """Publish the dataset this run staged at `staging` (inside its run directory)."""

    def release(self, staging: str) -> None:
        """Publish a dataset staged elsewhere (a quarantined run's) as this run's."""

    def keep_run_dir(self) -> bool:
        """Before removing the run's directory: put back a previous output a publish left
        aside; True when the directory must stay (it holds that output still)."""

    def remove_run_dir(self) -> None:
        """Remove this run's directory or temp prefix."""

    def prune_logs(self) -> None:
        """Keep only the newest run logs beside the output (this run's always)."""


class OutputPlace(Protocol):
    """An output's location: its refusal checks, lock, run directory, publish, history and
    quarantine, whatever storage it is on."""

    output: str
    # its state is read without a store client (the OS): a rerun's skip can be decided before
    # Beam and a store client are loaded (cli.ranges.skip_if_current)
    read_without_a_store: bool

    def check(self, inputs: Iterable[str], cwd: str | None = None) -> None:
        """ConfigError unless a run may (re)place the output; `inputs`: every file it reads."""

    def published_ancestor(self) -> str | None:
        """The nearest published output of ours above this one, or None."""

    def published_inside(self) -> str | None:
        """A published output of ours inside this one, or None."""

    def has_leftover_runs(self) -> bool:
        """Runs (dead, or one running now) left directories a skip must not pass over."""

    def check_room(self, needed: int, temp_root: str | None) -> None:
        """The output's location is writable and has `needed` bytes free (or the temp
        location, where the output itself has no disk)."""

    def lock_holder(self) -> RunInfo | None:
        """Who holds the output's lock, if it can be read."""

    def hold(self, info: RunInfo, stale_after: float, break_lock: bool,
             temp_root: str | None = None,
             inputs: Iterable[str] = ()) -> AbstractContextManager[HeldPlace]:
        """Take the output's lock for the block (LockedError when another run holds it)."""

    @property
    def history_root(self) -> str:
        """The folder or prefix whose run history holds this output's runs."""

    @property
    def quarantine_root(self) -> str:
        """`OUT.quarantine` beside the output, where blocked runs wait."""

    def version_dir(self, run_id: str) -> str | None:
        """Where run `run_id` published when the output keeps versions below itself; None
        when it is published in place."""


def place_for(path: str) -> OutputPlace:
    """The place of the output at `path`: the one test of where an output lives."""
    return ObjectPlace(path) if fs.is_remote(path) else LocalPlace(path)
