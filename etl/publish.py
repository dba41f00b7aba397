"""Put a fully written, checked staging directory in place of the output; `_SUCCESS` last.

Only called once the output was checked to be ours or absent (etl.output_guard) and under
the output's lock (etl.run_lock).
"""

from __future__ import annotations

import os

from etl import fs
from etl.errors import StorageError
from etl.manifest import SUCCESS


def publish(staging: str, output: str, run_id: str, aside: str | None = None) -> None:
    """Local: the old output is renamed to `aside` (inside the run's work dir, where the run's
    marker covers it), the staging directory renamed into place, `_SUCCESS` written, then the
    aside deleted. Both renames are atomic, so a reader sees the old version or the new one;
    if a step fails the old output is put back. A crash between the two renames leaves the
    old output in the aside, and the next run puts it back (etl.output_guard.recover_leftovers).

    Object stores (issue 11 redoes this): the old marker is deleted first, the old objects
    removed, the new ones copied, the marker written last.
    """
    if fs.is_remote(output):
        old = fs.list_dir(output)
        marker = [p for p, _ in old if p.endswith("/" + SUCCESS)]
        fs.delete(marker)
        fs.delete([p for p, _ in old if p not in marker])
        for path, _ in fs.list_dir(staging):
            fs.rename(path, fs.join(output, path[len(staging.rstrip("/")) + 1 :]))
        fs.write_bytes(fs.join(output, SUCCESS), b"")
        return
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
