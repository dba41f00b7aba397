"""Local scratch folders a run's workers make outside its run directory, named so that the
next run can tell a dead process's leftovers from a live one's, and remove them.

Where a run has a local run directory, its scratch goes there (removed with it, by the run
or by the next run's recovery). Where it has none (a gs:// output, a remote shard copied to
read it), scratch goes to the system temp directory under a name that says who made it:

    etl-KIND-BOOT.PID.TICKS-RANDOM      e.g. etl-array-record-3f1c2a9e.41327.882211-k2j4x9

BOOT: the first 8 characters of this boot's id, PID and TICKS: the creating process and its
start time (Linux /proc). A kill -9 leaves such a folder; `sweep` (called by every run as it
starts) removes the ones whose process is gone: same boot, and the pid runs no more or now
belongs to a process started at another tick. A folder of another boot (or another host
sharing the temp directory) is removed only once it is older than the stale limit. Only
folders of the current user, never a symbolic link, and only these names: anything else in
the temp directory is left alone (older versions' unnamed `etl-array-record-XXXX` folders
too: nothing proves whose they are).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator

KINDS = ("array-record", "shard", "pipeline")
NAME = re.compile(r"etl-(?:array-record|shard|pipeline)-([0-9a-f]{8})\.(\d+)\.(\d+)-[a-z0-9_]{1,32}")


def _boot() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip().replace("-", "")[:8]
    except OSError:
        return "00000000"


def _start_ticks(pid: int) -> str | None:
    """The start tick of a live (not zombie) process, None when there is none or /proc
    does not tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
        fields = text[text.rindex(")") + 2 :].split()
        return None if fields[0] == "Z" else fields[19]
    except (OSError, ValueError, IndexError):
        return None


def owner_tag() -> str:
    """BOOT.PID.TICKS of this process."""
    pid = os.getpid()
    return f"{_boot()}.{pid}.{_start_ticks(pid) or 0}"


def make(kind: str, parent: str | None = None) -> str:
    """A new empty scratch folder (the caller removes it). `parent`: the run's own local
    directory; None: the system temp directory, under a name `sweep` recognises. The parent
    is never created: a worker that goes on after its run's directory was removed fails here
    instead of making it again."""
    if kind not in KINDS:
        raise ValueError(f"unknown scratch kind {kind!r}")
    return tempfile.mkdtemp(prefix=f"etl-{kind}-{owner_tag()}-",
                            dir=parent if parent is not None else tempfile.gettempdir())


@contextlib.contextmanager
def scratch_dir(kind: str, parent: str | None = None) -> Iterator[str]:
    """A new folder for scratch files (`make`), removed with what it holds afterwards (an
    exception too)."""
    folder = make(kind, parent)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def why_left(name: str, stale_after: float, mtime: float, boot: str | None = None,
             now: float | None = None) -> str | None:
    """Why the scratch folder `name` is a dead process's, or None (a live one's, or not one
    of ours)."""
    m = NAME.fullmatch(name)
    if m is None:
        return None
    made_boot, pid, ticks = m.group(1), int(m.group(2)), m.group(3)
    if made_boot == (boot or _boot()):
        now_ticks = _start_ticks(pid)
        if now_ticks is None:
            return f"pid {pid} is no longer running"
        if ticks != "0" and now_ticks != ticks:
            return f"pid {pid} now belongs to another process"
        return None
    age = (time.time() if now is None else now) - mtime
    if age > stale_after:
        return f"made {age / 3600:.1f} h ago on another boot or host"
    return None


def sweep(stale_after: float, parent: str | None = None) -> list[tuple[str, str]]:
    """Remove the scratch folders of dead processes in `parent` (default: the system temp
    directory); returns (path, why) of each removed. Never fails: what cannot be listed or
    removed stays."""
    folder = parent if parent is not None else tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        if not entry.name.startswith("etl-") or NAME.fullmatch(entry.name) is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue  # a symbolic link, a file, another user's: not ours to remove
        why = why_left(entry.name, stale_after, st.st_mtime)
        if why is None:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)  # never follows links inside
        if not os.path.lexists(entry.path):
            removed.append((entry.path, why))
    return removed
