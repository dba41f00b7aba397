"""Put a fully written, checked staging directory in place of the output; `_SUCCESS` last.

Only called once the output was checked to be ours or absent (etl.output.guard,
etl.output.remote) and under the output's lock (etl.output.lock).

Local outputs: two atomic renames (`publish`). Object stores have no rename, so a gs://
output is versioned (`publish_version`): the run's files are copied to `OUT/{version}/`,
each created only if absent, then the one pointer object `OUT/_SUCCESS` is swung to the new
version, replacing only the generation the run saw when it started.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from etl.base import signals
from etl.base.errors import LockedError, StorageError
from etl.base.pause import pause
from etl.output.layout import MANIFEST, PRODUCER, SUCCESS
from etl.output.lock import check_held
from etl.output.manifest import seal
from etl.storage import fs
from etl.storage.object_store import Conflict


def publish(staging: str, output: str, run_id: str, aside: str | None = None,
            delete_aside: bool = True) -> None:
    """Local: the old output is renamed to `aside` (inside the run's work dir, where the run's
    marker covers it), the staging directory renamed into place, `_SUCCESS` written, then the
    aside deleted. Both renames are atomic, so a reader sees the old version or the new one;
    if a step fails the old output is put back. A crash between the two renames leaves the
    old output in the aside, and the next run puts it back (etl.output.guard.recover_leftovers).

    The whole publish is a critical section (etl.base.signals): a SIGINT/SIGTERM that arrives
    before `_SUCCESS` is written rolls the output back and raises Interrupted; one that
    arrives after it lets the publish complete, then raises.

    `delete_aside=False`: the aside is left for the caller, whose run directory holds it and
    is removed next (the old output's unlinks then overlap the spills': etl.storage.tree_removal).

    Object-store outputs are published by `publish_version` (etl.output.remote.RemoteRun).
    """
    if not fs.renames(output):
        raise StorageError(f"{output}: object-store outputs are published as versions "
                           "(etl.output.remote), not by renames")
    aside = aside or os.path.join(os.path.dirname(os.path.abspath(staging)), f"old-{run_id}")
    # every file is final: record their sizes, times and inodes (the skip rule compares them)
    seal(staging)
    with signals.critical():
        pause("publish:start")
        signals.raise_pending(signals.UNCHANGED)
        check_held(run_id)  # stopped since the run's last check and taken over: publish nothing
        moved = placed = False
        try:
            if os.path.lexists(output):
                os.replace(output, aside)
                moved = True
            pause("publish:aside")
            if signals.pending() is None:
                os.replace(staging, output)
                placed = True
                pause("publish:renamed")
            if signals.pending() is None:
                fs.write_bytes(os.path.join(output, SUCCESS), b"")
                _fsync_dir(os.path.dirname(os.path.abspath(output)))
        except BaseException as e:
            _roll_back(staging, output, aside, moved, placed)
            if isinstance(e, OSError | StorageError):
                raise StorageError(f"cannot publish {output}: {e}; the previous output is "
                                   "unchanged") from e
            raise
        if signals.pending() is not None:  # nothing current changed yet: back out
            _roll_back(staging, output, aside, moved, placed)
            signals.raise_pending(signals.UNCHANGED)
        pause("publish:success")
        if moved and delete_aside:
            fs.delete_tree(aside)


def _roll_back(staging: str, output: str, aside: str, moved: bool, placed: bool) -> None:
    """Undo the renames done so far: new version back to staging, old one back in place.
    If that fails the old output stays in `aside` inside the run's directory, which the run
    then keeps (etl.output.guard: the next run puts it back)."""
    try:
        if placed:
            os.replace(output, staging)
        if moved:
            os.replace(aside, output)
    except OSError as e:
        raise StorageError(f"cannot put the previous output back at {output}: "
                           f"{e.strerror or e}; it is kept at {aside}, and the next run "
                           "restores it") from e


def _fsync_dir(path: str) -> None:
    """Make the renames durable (a directory's entries are its data)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory
    finally:
        os.close(fd)


def publish_version(store: Any, staging: str, files: list[str], output: str, version: str,
                    seen_generation: int, previous: str | None) -> None:
    """Copy `files` (relative to `staging`) to `OUT/{version}/` (each created only if absent),
    write the version's own empty `_SUCCESS`, then the pointer `OUT/_SUCCESS` (JSON naming the
    version), replacing only generation `seen_generation` (0: create only if absent).

    `store` is an etl.storage.object_store.Store. Until the pointer is written nothing a reader
    trusts has changed; a run that lost the race to another publisher (the pointer moved
    since it started) raises LockedError and has published nothing.
    """
    src = staging.rstrip("/") + "/"
    dst = output.rstrip("/") + "/" + version + "/"
    for name in files:
        signals.raise_pending(signals.UNCHANGED)  # a signal while copying: nothing current changed
        try:
            fs.put_new(store, src + name, dst + name)
        except Conflict as e:
            raise StorageError(f"cannot publish {dst + name}: an object of another content "
                               f"is already there ({e}); nothing published") from e
    try:
        store.write(dst + SUCCESS, b"", if_generation_match=0)
    except Conflict as e:
        raise StorageError(f"cannot publish {dst + SUCCESS}: already there; nothing "
                           "published") from e
    pause("publish:copied")
    signals.raise_pending(signals.UNCHANGED)
    # the version's objects as published, one listing: the skip rule compares each object's
    # generation and crc32c with this record (etl.output.manifest.verify, quick)
    objects = {o.url[len(dst):]: [o.generation, o.crc32c] for o in store.list(dst)}
    pointer = {"producer": PRODUCER, "version": version, "run_id": version,
               "manifest": f"{version}/{MANIFEST}", "previous": previous,
               "published": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "objects": objects}
    url = output.rstrip("/") + "/" + SUCCESS
    try:
        store.write(url, json.dumps(pointer, indent=1).encode(), seen_generation)
    except Conflict as e:
        found = store.read(url)
        if found is None or _names(found[0]) != version:
            raise LockedError(f"{output} was published by another run while this one was "
                              f"working (its {SUCCESS} changed); this run published "
                              "nothing") from e
        # else our own write landed; only its reply was lost (and retried)
    pause("publish:pointer")


def _names(raw: bytes) -> str | None:
    try:
        return str(json.loads(raw).get("version"))
    except (ValueError, AttributeError):
        return None
