"""A local output directory as an OutputPlace (etl.output.place): replaced by renames, its
lock, run directories and logs in the work dir `.{name}.etl/` beside it (etl.output.guard,
etl.output.lock.RunLock, etl.output.publish)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from etl.base.errors import EtlError
from etl.base.pause import pause
from etl.output import guard, layout
from etl.output.lock import LOCK, RunInfo, RunLock
from etl.storage import fs

log = logging.getLogger(__name__)


class LocalPlace:
    """The output directory `output` on this machine's disk."""

    read_without_a_store = True

    def __init__(self, output: str):
        self.output = output

    def check(self, inputs: Iterable[str], cwd: str | None = None) -> None:
        guard.check_output(self.output, inputs, cwd)

    def published_ancestor(self) -> str | None:
        return guard.published_ancestor(self.output)

    def published_inside(self) -> str | None:
        return guard.published_inside(os.path.abspath(self.output))

    def has_leftover_runs(self) -> bool:
        return guard.has_run_dirs(self.output)

    def check_room(self, needed: int, temp_root: str | None) -> None:
        """The output's parent is writable and its file system has `needed` bytes free (a
        temp location elsewhere holds no output bytes: not checked)."""
        guard.check_writable(self.output)
        guard.check_free_space([(self.output, "output")], needed)

    def lock_holder(self) -> RunInfo | None:
        try:
            raw = fs.read_bytes(os.path.join(layout.work_dir(self.output), LOCK))
            return RunInfo.from_json(json.loads(raw))
        except (OSError, ValueError, EtlError):
            return None

    @contextmanager
    def hold(self, info: RunInfo, stale_after: float, break_lock: bool,
             temp_root: str | None = None, inputs: Iterable[str] = ()) -> Iterator[LocalHeld]:
        """The work dir's lock (RunLock); `temp_root` is not used: a local run's scratch is its
        run directory, beside the output."""
        workdir = layout.work_dir(self.output)
        with RunLock(workdir, info, stale_after, break_lock, output=self.output) as lock:
            yield LocalHeld(self.output, workdir, info, stale_after, lock, list(inputs))

    @property
    def history_root(self) -> str:
        """The output's parent directory, absolute."""
        return os.path.dirname(os.path.abspath(self.output).rstrip(os.sep))

    @property
    def quarantine_root(self) -> str:
        return os.path.abspath(self.output).rstrip(os.sep) + layout.QUARANTINE_SUFFIX

    def version_dir(self, run_id: str) -> str | None:
        return None  # published in place, by renames


class LocalHeld:
    """A local output whose work dir lock this process holds."""

    def __init__(self, output: str, workdir: str, info: RunInfo, stale_after: float,
                 lock: RunLock, inputs: list[str]):
        self.output, self.workdir, self.info = output, workdir, info
        self.stale_after, self.lock, self.inputs = stale_after, lock, inputs
        self.tmp = ""  # the run directory, once start_run made it
        self.log_file = layout.log_path(workdir, info.run_id)

    def clear_leftovers(self, current: str | None) -> None:
        guard.recover_leftovers(self.workdir, self.output, self.stale_after, current=current)

    def published_run(self) -> str | None:
        from etl.output.manifest import published_run  # noqa: PLC0415 - start-up time (see publish)

        return published_run(self.output)

    def start_run(self, still_wanted: Callable[[], bool]) -> bool:
        if not still_wanted():
            return False
        guard.check_output(self.output, self.inputs)  # again, locked
        self.tmp = guard.create_run_dir(self.workdir, self.info)
        pause("run-dir")
        return True

    def verify(self) -> None:
        self.lock.verify()

    def publish(self, staging: str) -> None:
        """Renames: the old output goes aside inside this run's directory (its marker covers
        it), the new one into place. The aside goes with the run directory (remove_run_dir,
        after keep_run_dir found the new output whole)."""
        # the manifest and format code (NumPy, pyarrow) load only when a place publishes:
        # `history` and `--help` ask a place where things are and must start fast
        # (tests/test_fixed_cost.py)
        from etl.output.publish import publish  # noqa: PLC0415 - start-up time

        publish(staging, self.output, self.info.run_id,
                aside=os.path.join(os.path.dirname(staging), layout.PREVIOUS), delete_aside=False)

    def release(self, staging: str) -> None:
        """Checked again, then published through a run directory of its own, removed after
        unless it holds the previous output still."""
        from etl.output.publish import publish  # noqa: PLC0415 - start-up time (see publish)

        guard.check_output(self.output, [])
        tmp = guard.create_run_dir(self.workdir, self.info)
        try:
            publish(staging, self.output, self.info.run_id,
                    aside=os.path.join(tmp, layout.PREVIOUS))
        finally:
            if not os.path.isdir(os.path.join(tmp, layout.PREVIOUS)):
                guard.remove_run_dir(tmp)

    def keep_run_dir(self) -> bool:
        aside = os.path.join(self.tmp, layout.PREVIOUS)
        if not os.path.isdir(aside):
            return False
        if not os.path.lexists(self.output):
            os.replace(aside, self.output)
            log.warning("put the previous output back at %s", self.output)
        elif not os.path.exists(os.path.join(self.output, layout.SUCCESS)):
            log.warning("kept %s: it holds the previous output of %s (the next run puts it "
                        "back)", self.tmp, self.output)
            return True
        return False

    def remove_run_dir(self) -> None:
        guard.remove_run_dir(self.tmp)  # its marker last: a leftover is still known as ours

    def prune_logs(self) -> None:
        guard.prune_logs(self.workdir, current=self.info.run_id)  # this run's log always kept
