"""One run per output at a time: a create-if-absent `lock.json` in the output's work dir.

The lock names its holder (run id, host, pid, the pid's start time, start time), so a second
run can say who holds it and whether that run is still alive. A lock whose holder is gone (a
dead pid on this host, a pid now used by another process, or a lock older than
`stale_after`) is recovered without a race: the stale file is renamed aside under a name only
this run uses, re-read to make sure it is the very lock that was judged stale, and only then
removed before a new lock is created with O_EXCL. Two runs recovering at once cannot both
win: only one rename of the same file succeeds, and O_EXCL admits one creator.

A run taken over while it was stopped (SIGSTOP, a suspended VM) or merely slow learns it
before it publishes (`verify`, and `check_held` inside the publish itself) and fails with exit
4 naming the run that took over: the taker leaves a note beside the victim's log
(`logs/RUN_ID.lock-taken.json`, pruned with that log), since it may have finished and released
the lock by the time the stopped run goes on.

Object-store outputs (gs://) get the same lock as an object created only if absent
(ObjectLock: if_generation_match=0; taken over and released by generation).

`publishing(output)` tells a reader (`report`, `verify`) that the output it found incomplete is
in the middle of a live run's publish, and `read_settled` reads an output again when a
publish replaced it under the reader.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from etl.base.errors import LockedError, StorageError
from etl.output.layout import MANIFEST, PREVIOUS, RUN_PREFIX, SUCCESS, work_dir
from etl.storage import fs
from etl.storage.object_store import Conflict

log = logging.getLogger(__name__)
LOCK = "lock.json"
DEFAULT_STALE_AFTER = 24 * 3600.0
TAKEN = ".lock-taken.json"  # logs/RUN_ID.lock-taken.json: who took RUN_ID's lock over, and why
T = TypeVar("T")


@dataclass(frozen=True)
class RunInfo:
    """Who a run is: what the lock and the run marker hold."""

    run_id: str
    host: str
    pid: int
    pid_start: str | None  # boot id + start tick of the pid (Linux /proc), to detect pid reuse
    started: float  # epoch seconds

    @classmethod
    def current(cls, run_id: str) -> RunInfo:
        pid = os.getpid()
        return cls(run_id, socket.gethostname(), pid, process_start(pid), time.time())

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["started_utc"] = _iso(self.started)
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> RunInfo | None:
        """None when `doc` is not a run description of ours."""
        try:
            return cls(str(doc["run_id"]), str(doc["host"]), int(doc["pid"]),
                       None if doc.get("pid_start") is None else str(doc["pid_start"]),
                       float(doc["started"]))
        except (KeyError, TypeError, ValueError):
            return None

    def describe(self) -> str:
        return (f"run {self.run_id} (host {self.host}, pid {self.pid}, "
                f"started {_iso(self.started)})")


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="seconds")


def process_start(pid: int) -> str | None:
    """`boot_id:start_ticks` of a live process, None where /proc does not tell (or no such pid).
    A pid reused after the holder died, or after a reboot, gives another value."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
        if fields[0] == "Z":  # a zombie has finished: it holds nothing
            return None
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
        return f"{boot}:{fields[19]}"
    except (OSError, ValueError, IndexError):
        return None


def _pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if os.path.isdir("/proc") and os.path.exists(f"/proc/{pid}"):
        return process_start(pid) is not None  # not a zombie
    return True


def _duration(seconds: float) -> str:
    """An age as people read it: `4 s`, `12 min`, `2.0 h` (not `0.000277778 h`)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _limit(seconds: float) -> str:
    """A --lock-stale-after value in the unit it was most likely given in: `1 s`, `30 min`,
    `24 h`."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def why_dead(info: RunInfo, stale_after: float, now: float | None = None) -> str | None:
    """Why the run `info` describes is no longer alive, or None if it may still run.
    On another host only the age can tell."""
    age = (time.time() if now is None else now) - info.started
    if age > stale_after:
        return (f"it started {_duration(age)} ago, more than the {_limit(stale_after)} "
                "--lock-stale-after allows")
    if info.host != socket.gethostname():
        return None
    if not _pid_exists(info.pid):
        return f"pid {info.pid} is no longer running on this host"
    if info.pid_start is not None:
        now_start = process_start(info.pid)
        if now_start is not None and now_start != info.pid_start:
            return f"pid {info.pid} now belongs to another process"
    return None


def may_be_alive(info: RunInfo) -> bool:
    """Whether the process `info` names may still run (always, on another host): a lock taken
    over from such a run needs a note saying so, a dead pid's does not."""
    if info.host != socket.gethostname():
        return True
    if not _pid_exists(info.pid):
        return False
    now_start = process_start(info.pid)
    return info.pid_start is None or now_start is None or now_start == info.pid_start


def taken_over(output: str, taker: RunInfo | None, reason: str | None) -> LockedError:
    """The one line a run prints when it finds its lock taken over: exit 4, who and why."""
    who = "another run"
    if taker is not None:
        host = "" if taker.host == socket.gethostname() else f", host {taker.host}"
        who = f"run {taker.run_id} (pid {taker.pid}{host})"
    # the taker's reason, told from the stopped run's side
    why = f" ({reason.replace('it started', 'this run started', 1)})" if reason else ""
    return LockedError(f"the lock on {output} was taken over by {who} while this run was "
                       f"stopped or busy{why}; nothing was published by this run")


_HELD: dict[str, Any] = {}  # run id -> the RunLock / ObjectLock this process holds for it


def lock_lost(run_id: str) -> LockedError | None:
    """Why the run `run_id` of this process no longer holds its lock, or None (it does, or
    it holds none here). A failure of a run whose lock was taken over is reported as this."""
    held = _HELD.get(run_id)
    if held is None:
        return None
    try:
        return held.lost()
    except Exception as e:  # noqa: BLE001 - a store that is down: the run's own error stands
        log.info("could not check the lock of run %s: %s", run_id, e)
        return None


def check_held(run_id: str) -> None:
    """Raise `lock_lost`'s error if there is one. The local publish calls it right before its
    first rename, so a run stopped after its last check publishes nothing once another run
    took its lock over."""
    lost = lock_lost(run_id)
    if lost is not None:
        raise lost


def takeover_reason(holder: RunInfo | None, break_lock: bool, stale_after: float, output: str,
                    path: str) -> str:
    """Why a lock held by `holder` may be taken over; LockedError naming the holder when it
    may not (its run looks alive and --break-lock was not given)."""
    reason = ("--break-lock was given" if break_lock else
              "the lock file is unreadable" if holder is None else
              why_dead(holder, stale_after))
    if reason is None:
        assert holder is not None
        raise LockedError(
            f"output {output} is locked by {holder.describe()}; wait for it to finish, or if "
            f"that run is no longer running rerun with --break-lock (lock file: {path})")
    return reason


class RunLock:
    """`with RunLock(workdir, info): ...` holds the output's lock for the block."""

    def __init__(self, workdir: str, info: RunInfo, stale_after: float = DEFAULT_STALE_AFTER,
                 break_lock: bool = False, output: str = ""):
        self.workdir = workdir
        self.output = output or workdir
        self.path = os.path.join(workdir, LOCK)
        self.info = info
        self.stale_after = stale_after
        self.break_lock = break_lock
        self._held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        try:
            os.makedirs(self.workdir, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create the work directory {self.workdir}: "
                               f"{e.strerror or e}; check that its parent is writable") from e
        body = json.dumps(self.info.to_json(), indent=1).encode()
        for _ in range(10):
            if self._create(body):
                self._held = True
                _HELD[self.info.run_id] = self
                return
            raw = self._read(self.path)
            if raw is None:
                continue  # released (or recovered by another run) meanwhile: try again
            holder = RunInfo.from_json(_loads(raw))
            reason = takeover_reason(holder, self.break_lock, self.stale_after, self.output,
                                     self.path)
            if self._take_aside(raw):
                who = holder.describe() if holder else "an unreadable lock"
                log.warning("recovered the stale lock of %s: %s", who, reason)
                if holder is not None and may_be_alive(holder):
                    self._leave_note(holder, reason)
        raise LockedError(f"could not take the lock {self.path}: other runs keep taking it")

    def _note_path(self, run_id: str) -> str | None:
        if not run_id or "/" in run_id or run_id.startswith("."):
            return None  # not a run id of ours: no file named after it
        return os.path.join(self.workdir, "logs", run_id + TAKEN)

    def _leave_note(self, victim: RunInfo, reason: str) -> None:
        """Tell the run whose lock this one took (it may only be stopped) who took it and why;
        it reads this after we may have finished and released the lock."""
        path = self._note_path(victim.run_id)
        if path is None:
            return
        doc = {"by": self.info.to_json(), "reason": reason}
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=1)
        except OSError as e:  # the victim then names the current holder, or "another run"
            log.warning("could not leave a note for the run whose lock was taken (%s): %s",
                        path, e)

    def lost(self) -> LockedError | None:
        """None while the lock file is still ours; else who took it over (the note the taker
        left, or the current holder) as the error this run fails with."""
        holder = RunInfo.from_json(_loads(self._read(self.path) or b""))
        if holder is not None and holder.run_id == self.info.run_id:
            return None
        path = self._note_path(self.info.run_id)
        note = _loads(self._read(path) or b"") if path else None
        if isinstance(note, dict) and RunInfo.from_json(note.get("by")) is not None:
            return taken_over(self.output, RunInfo.from_json(note["by"]),
                              str(note.get("reason") or "") or None)
        return taken_over(self.output, holder, None)

    def _create(self, body: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise StorageError(f"cannot create the lock {self.path}: {e.strerror or e}") from e
        try:
            os.write(fd, body)
            os.fsync(fd)
        except OSError as e:
            os.close(fd)
            os.unlink(self.path)
            raise StorageError(f"cannot write the lock {self.path}: {e.strerror or e}") from e
        os.close(fd)
        return True

    def _take_aside(self, judged: bytes) -> bool:
        """Remove the lock judged stale, and only that one. False if it was gone already."""
        aside = f"{self.path}.stale-{self.info.run_id}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False  # another run recovered it first
        if self._read(aside) == judged:
            os.unlink(aside)
            return True
        # a fresh lock was created between our read and our rename: put it back
        try:
            os.link(aside, self.path)
        except FileExistsError:
            pass  # yet another lock is in place; its holder verifies it before publishing
        os.unlink(aside)
        return False

    @staticmethod
    def _read(path: str) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def verify(self) -> None:
        """Still ours? Checked right before publishing, so a lock broken by another run (with
        --break-lock while this one was alive) never lets two runs publish."""
        lost = self.lost()
        if lost is not None:
            raise lost

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        _HELD.pop(self.info.run_id, None)
        holder = RunInfo.from_json(_loads(self._read(self.path) or b""))
        if holder is not None and holder.run_id == self.info.run_id:
            try:
                os.unlink(self.path)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    log.warning("could not remove the lock %s: %s", self.path, e)


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None



class ObjectLock:
    """The same lock for an object-store output (gs://): `lock.json` in the work prefix beside
    the output, created only if absent (if_generation_match=0). A stale or broken lock is
    deleted only at the generation that was judged (a fresh lock taken meanwhile survives),
    then created again; released only if it is still ours, by generation."""

    def __init__(self, store: Any, workdir: str, info: RunInfo,
                 stale_after: float = DEFAULT_STALE_AFTER, break_lock: bool = False,
                 output: str = ""):
        self.store = store  # etl.storage.object_store.Store
        self.path = workdir.rstrip("/") + "/" + LOCK
        self.output = output or workdir
        self.info = info
        self.stale_after = stale_after
        self.break_lock = break_lock
        self.generation: int | None = None

    def __enter__(self) -> ObjectLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:

        body = json.dumps(self.info.to_json(), indent=1).encode()
        for _ in range(10):
            try:
                self.generation = self.store.write(self.path, body, if_generation_match=0)
                _HELD[self.info.run_id] = self
                return
            except Conflict:
                pass
            found = self.store.read(self.path)
            if found is None:
                continue  # released (or recovered by another run) meanwhile: try again
            raw, generation = found
            holder = RunInfo.from_json(_loads(raw))
            if holder is not None and holder.run_id == self.info.run_id:
                self.generation = generation  # our own create landed; its reply was lost
                _HELD[self.info.run_id] = self
                return
            reason = takeover_reason(holder, self.break_lock, self.stale_after, self.output,
                                     self.path)
            if self.store.delete(self.path, if_generation_match=generation):
                who = holder.describe() if holder else "an unreadable lock"
                log.warning("recovered the stale lock of %s: %s", who, reason)
        raise LockedError(f"could not take the lock {self.path}: other runs keep taking it")

    def lost(self) -> LockedError | None:
        """None while the lock object is still ours (same generation); else who holds it now."""
        found = self.store.read(self.path)
        if found is not None and found[1] == self.generation:
            return None
        holder = None if found is None else RunInfo.from_json(_loads(found[0]))
        return taken_over(self.output, holder, None)

    def verify(self) -> None:
        """Still ours (same generation)? Checked before publishing."""
        lost = self.lost()
        if lost is not None:
            raise lost

    def release(self) -> None:
        _HELD.pop(self.info.run_id, None)
        generation, self.generation = self.generation, None
        if generation is None:
            return
        try:
            self.store.delete(self.path, if_generation_match=generation)
        except StorageError as e:  # the lock then goes stale; the next run recovers it
            log.warning("could not remove the lock %s: %s", self.path, e)


# ---- readers of an output a run may be publishing --------------------------------------------


def publishing(output: str) -> LockedError | None:
    """A live run holds `output`'s lock while the output is not whole (no `_SUCCESS`: between
    the renames of a local publish, or before a first run's publish): what a reader that
    found it incomplete should say instead of calling it damaged. None otherwise (no live
    holder: an incomplete output is then what it looks like). Object stores publish by one
    pointer write, so a reader never sees them half-published: None."""

    if not fs.renames(output) or os.path.exists(os.path.join(output, SUCCESS)):
        return None
    workdir = work_dir(output)
    holder = RunInfo.from_json(_loads(RunLock._read(os.path.join(workdir, LOCK)) or b""))
    if holder is None or why_dead(holder, DEFAULT_STALE_AFTER) is not None:
        return None
    who = f"run {holder.run_id}, pid {holder.pid}"
    if holder.host != socket.gethostname():
        who += f", host {holder.host}"
    aside = os.path.join(workdir, RUN_PREFIX + holder.run_id, PREVIOUS)
    if os.path.lexists(output) or os.path.isdir(aside):
        return LockedError(f"another run is publishing {output} ({who}); try again when it "
                           "has finished")
    return LockedError(f"{output} is not published yet: another run is writing it ({who}); "
                       "try again when it has finished")


def output_version(output: str) -> tuple[Any, ...]:
    """What changes whenever `output` is published again: a local output's directory (each
    publish renames a new one into place), its `_SUCCESS` and its manifest's bytes; an object
    store's `_SUCCESS` pointer (it names the version)."""

    def digest(path: str) -> str | None:
        try:
            return hashlib.sha256(fs.read_bytes(path)).hexdigest()
        except (OSError, StorageError):  # absent, or going away under us
            return None

    if not fs.renames(output):  # published by writing the pointer, not by a rename
        return ("pointer", digest(fs.join(output, SUCCESS)))
    try:
        st = os.stat(output)
    except OSError:
        return ("absent",)
    return (st.st_dev, st.st_ino, os.path.exists(os.path.join(output, SUCCESS)),
            digest(os.path.join(output, MANIFEST)))


def read_settled(output: str, read: Callable[[], T]) -> T:
    """`read()` (a report, a verify) of a published `output`, made consistent with the run
    that may be publishing it meanwhile: a failure while a live run has the output half
    published is exit 4 (`publishing`), not damage; a read the publish replaced the output
    under (a manifest of one version, shards of the next: false counts, sha256 mismatches,
    missing shards) is done once more on the new version, and is exit 4 if it changes again.
    A failure on an output nobody touched is the reader's own, unchanged."""
    for _ in range(2):
        before = output_version(output)
        try:
            result = read()
        except Exception as e:
            busy = publishing(output)
            if busy is not None:
                raise busy from e
            if output_version(output) == before:
                raise
            log.info("%s was published again while being read (%s): reading it again",
                     output, e)
            continue
        if output_version(output) == before:
            return result
        busy = publishing(output)
        if busy is not None:
            raise busy
    raise LockedError(f"{output} was published again twice while being read; try again when "
                      "the runs publishing it have finished")
