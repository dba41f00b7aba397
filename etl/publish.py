"""Put a fully written, checked staging directory in place of the output; `_SUCCESS` last.

Only called once the output was checked to be ours or absent (etl.output_guard,
etl.remote_output) and under the output's lock (etl.run_lock).

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

from etl import fs
from etl.errors import LockedError, StorageError
from etl.manifest import MANIFEST, PRODUCER, SUCCESS


def publish(staging: str, output: str, run_id: str, aside: str | None = None) -> None:
    """Local: the old output is renamed to `aside` (inside the run's work dir, where the run's
    marker covers it), the staging directory renamed into place, `_SUCCESS` written, then the
    aside deleted. Both renames are atomic, so a reader sees the old version or the new one;
    if a step fails the old output is put back. A crash between the two renames leaves the
    old output in the aside, and the next run puts it back (etl.output_guard.recover_leftovers).

    Object-store outputs are published by `publish_version` (etl.remote_output.RemoteRun).
    """
    if fs.is_remote(output):
        raise StorageError(f"{output}: object-store outputs are published as versions "
                           "(etl.remote_output), not by renames")
    aside = aside or os.path.join(os.path.dirname(os.path.abspath(staging)), f"old-{run_id}")
    moved = False
    try:
        if os.path.lexists(output):
            os.replace(output, aside)
            moved = True
        os.replace(staging, output)
    except OSError as e:
        if moved:
            os.replace(aside, output)
        raise StorageError(f"cannot move the new output into place at {output}: "
                           f"{e.strerror or e}; the previous output is unchanged") from e
    try:
        fs.write_bytes(os.path.join(output, SUCCESS), b"")
        _fsync_dir(os.path.dirname(os.path.abspath(output)))
    except (OSError, StorageError) as e:
        os.replace(output, staging)  # new version back out, old one back in
        if moved:
            os.replace(aside, output)
        raise StorageError(f"cannot write {SUCCESS} in {output}: {e}; the previous output "
                           "is unchanged") from e
    if moved:
        fs.delete_tree(aside)


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

    `store` is an etl.object_store.Store. Until the pointer is written nothing a reader
    trusts has changed; a run that lost the race to another publisher (the pointer moved
    since it started) raises LockedError and has published nothing.
    """
    from etl.object_store import Conflict  # noqa: PLC0415 - google-cloud-storage on demand

    src = staging.rstrip("/") + "/"
    dst = output.rstrip("/") + "/" + version + "/"
    for name in files:
        try:
            if fs.is_remote(src):
                store.copy_new(src + name, dst + name)
            else:
                store.upload_new(os.path.join(staging, name), dst + name)
        except Conflict as e:
            raise StorageError(f"cannot publish {dst + name}: an object of another content "
                               f"is already there ({e}); nothing published") from e
    try:
        store.write(dst + SUCCESS, b"", if_generation_match=0)
    except Conflict as e:
        raise StorageError(f"cannot publish {dst + SUCCESS}: already there; nothing "
                           "published") from e
    pointer = {"producer": PRODUCER, "version": version, "run_id": version,
               "manifest": f"{version}/{MANIFEST}", "previous": previous,
               "published": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    url = output.rstrip("/") + "/" + SUCCESS
    try:
        store.write(url, json.dumps(pointer, indent=1).encode(), seen_generation)
    except Conflict as e:
        found = store.read(url)
        if found is not None and _names(found[0]) == version:
            return  # our own write landed; only its reply was lost (and retried)
        raise LockedError(f"{output} was published by another run while this one was working "
                          f"(its {SUCCESS} changed); this run published nothing") from e


def _names(raw: bytes) -> str | None:
    try:
        return str(json.loads(raw).get("version"))
    except (ValueError, AttributeError):
        return None
