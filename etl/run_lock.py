"""One run per output at a time: a create-if-absent `lock.json` in the output's work dir.

The lock names its holder (run id, host, pid, the pid's start time, start time), so a second
run can say who holds it and whether that run is still alive. A lock whose holder is gone (a
dead pid on this host, a pid now used by another process, or a lock older than
`stale_after`) is recovered without a race: the stale file is renamed aside under a name only
this run uses, re-read to make sure it is the very lock that was judged stale, and only then
removed before a new lock is created with O_EXCL. Two runs recovering at once cannot both
win: only one rename of the same file succeeds, and O_EXCL admits one creator.

Object-store outputs (gs://) get the same lock as an object created only if absent
(ObjectLock: if_generation_match=0; taken over and released by generation).
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from etl.errors import LockedError, StorageError

log = logging.getLogger(__name__)
LOCK = "lock.json"
DEFAULT_STALE_AFTER = 24 * 3600.0


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


def why_dead(info: RunInfo, stale_after: float, now: float | None = None) -> str | None:
    """Why the run `info` describes is no longer alive, or None if it may still run.
    On another host only the age can tell."""
    age = (time.time() if now is None else now) - info.started
    if age > stale_after:
        return f"it started {age / 3600:.1f} h ago, more than the {stale_after / 3600:g} h allowed"
    if info.host != socket.gethostname():
        return None
    if not _pid_exists(info.pid):
        return f"pid {info.pid} is no longer running on this host"
    if info.pid_start is not None:
        now_start = process_start(info.pid)
        if now_start is not None and now_start != info.pid_start:
            return f"pid {info.pid} now belongs to another process"
    return None


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
        raise LockedError(f"could not take the lock {self.path}: other runs keep taking it")

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
        except FileNotFoundError:
            return None

    def verify(self) -> None:
        """Still ours? Checked right before publishing, so a lock broken by another run (with
        --break-lock while this one was alive) never lets two runs publish."""
        holder = RunInfo.from_json(_loads(self._read(self.path) or b""))
        if holder is None or holder.run_id != self.info.run_id:
            other = holder.describe() if holder else "nobody"
            raise LockedError(f"the lock {self.path} was taken over by {other} while this run "
                              "was working; nothing published")

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
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
        self.store = store  # etl.object_store.Store
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
        from etl.object_store import Conflict  # noqa: PLC0415

        body = json.dumps(self.info.to_json(), indent=1).encode()
        for _ in range(10):
            try:
                self.generation = self.store.write(self.path, body, if_generation_match=0)
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
                return
            reason = takeover_reason(holder, self.break_lock, self.stale_after, self.output,
                                     self.path)
            if self.store.delete(self.path, if_generation_match=generation):
                who = holder.describe() if holder else "an unreadable lock"
                log.warning("recovered the stale lock of %s: %s", who, reason)
        raise LockedError(f"could not take the lock {self.path}: other runs keep taking it")

    def verify(self) -> None:
        """Still ours (same generation)? Checked before publishing."""
        found = self.store.read(self.path)
        if found is None or found[1] != self.generation:
            holder = None if found is None else RunInfo.from_json(_loads(found[0]))
            other = holder.describe() if holder else "nobody"
            raise LockedError(f"the lock {self.path} was taken over by {other} while this run "
                              "was working; nothing published")

    def release(self) -> None:
        generation, self.generation = self.generation, None
        if generation is None:
            return
        try:
            self.store.delete(self.path, if_generation_match=generation)
        except StorageError as e:  # the lock then goes stale; the next run recovers it
            log.warning("could not remove the lock %s: %s", self.path, e)
