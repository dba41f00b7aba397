"""What a run may replace, and its work dir beside the output.

A run only ever replaces or removes a directory that is provably a previous output of ours
(its manifest lists every file in it) or an empty directory. Anything else at the output
path — a file, a user's directory, a directory holding the job's inputs, the current
directory — is refused before any work with one line saying why (ConfigError, exit 2).

Everything a local run keeps besides the output lives in a hidden work dir next to it,
`{parent}/.{name}.etl/`:

    lock.json                 the lock of the run in progress (etl.output.lock)
    run-{run_id}/             one run's scratch: _ETL_RUN.json (written first), spill/,
                              staging/ (the new output), previous-output/ (the old one, only
                              for the instant between the two renames of a publish)
    logs/{run_id}.log         each run's log (full tracebacks); the last KEEP_LOGS are kept

Leftover run dirs are recognised by their `_ETL_RUN.json` marker, never by name alone, and
removed only once their run is no longer alive (etl.output.lock.why_dead).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import time
from collections.abc import Iterable

from etl.base.errors import ConfigError, StorageError
from etl.base.units import format_size
from etl.output.layout import (
    LOGS,
    MANIFEST,
    MARKER,
    PREVIOUS,
    PRODUCER,
    RUN_PREFIX,
    SUCCESS,
    log_run_id,
    run_dir,
    run_dir_id,
    work_dir,
)
from etl.output.lock import RunInfo, why_dead
from etl.output.ownership import foreign_content, load_json, ours
from etl.storage import fs, scratch
from etl.storage.tree_removal import remove_trees

log = logging.getLogger(__name__)
KEEP_LOGS = 10


def has_run_dirs(output: str) -> bool:
    """A local output's work dir holds run directories (of a dead run, or one running now):
    a current output is then skipped only after taking the lock and clearing dead ones."""
    try:
        return any(n.startswith(RUN_PREFIX) for n in os.listdir(work_dir(output)))
    except OSError:
        return False


# ---------------------------------------------------------------------------------- refusal


def check_output(output: str, inputs: Iterable[str], cwd: str | None = None) -> None:
    """Raise ConfigError unless the run may (re)place the local output directory `output`
    (a gs:// prefix has its own rules: etl.output.remote.check_output; etl.output.place asks
    the right one).

    `inputs`: every file the run reads (source files, the job file, the schema file)."""
    here = os.path.abspath(output)
    if os.path.islink(here):
        raise ConfigError(f"refusing output {output}: it is a symbolic link; give the real "
                          "directory path")
    if os.path.exists(here) and not os.path.isdir(here):
        raise ConfigError(f"refusing output {output}: it is an existing file, not a dataset "
                          "directory; choose another output path")
    for path in inputs:
        if not fs.on_disk(path) or not os.path.exists(path):
            continue
        if fs.within(path, here):
            raise ConfigError(f"refusing output {output}: it holds the input {path}; the output "
                              "is replaced as a whole, choose a directory of its own")
    if fs.within(cwd or os.getcwd(), here):
        raise ConfigError(f"refusing output {output}: it is the current directory or one of "
                          "its parents; choose a directory of its own")
    outer = published_ancestor(here)
    if outer:
        raise ConfigError(f"refusing output {output}: it is inside {outer}, a published output "
                          f"of {PRODUCER}, which would then hold files its {MANIFEST} does not "
                          "list; choose a path outside it")
    if os.path.isdir(here):
        foreign = foreign_content(here)
        inner = published_inside(here) if foreign else None
        if inner:
            raise ConfigError(f"refusing output {output}: it holds {inner}, a published output "
                              f"of {PRODUCER}; it is replaced as a whole, so choose a directory "
                              "that holds no dataset")
        if foreign:
            raise ConfigError(f"refusing output {output}: {foreign}; it is replaced as a whole, "
                              "so choose a new or empty directory (or remove it yourself)")


def is_published(path: str) -> bool:
    """The directory `path` holds a dataset written by us (our manifest; `_SUCCESS` beside a
    format 1 one). Not whether it is whole: that is verify's job."""
    manifest = load_json(os.path.join(path, MANIFEST))
    return manifest is not None and ours(manifest, os.path.exists(os.path.join(path, SUCCESS)))


def published_ancestor(path: str) -> str | None:
    """The nearest directory above `path` that is a published output of ours, or None. An
    output inside one adds files (and a work dir) its manifest does not list: that dataset's
    verify fails and its next run refuses it."""
    here = os.path.abspath(path)
    while True:
        parent = os.path.dirname(here)
        if parent == here:
            return None
        if is_published(parent):
            return parent
        here = parent


def published_inside(path: str) -> str | None:
    """The first published output of ours strictly below the directory `path` (shallowest
    first, then by name), or None: what makes `path` itself no dataset to replace."""
    level = [path]
    while level:
        below = []
        for folder in level:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                child = os.path.join(folder, name)
                if os.path.isdir(child) and not os.path.islink(child):
                    if is_published(child):
                        return child
                    below.append(child)
        level = below
    return None


# -------------------------------------------------------------------------------- preflight


def check_inputs_readable(paths: Iterable[str]) -> None:
    """Every local input exists and can be opened (ConfigError naming the first that cannot)."""
    for path in paths:
        if not fs.on_disk(path):
            continue  # object-store inputs are checked when matched; python: pseudo-files
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                fs.open_read(path).close()
        except FileNotFoundError as e:
            raise ConfigError(f"input {path} does not exist") from e
        except OSError as e:
            raise ConfigError(f"input {path} cannot be read: {e.strerror or e}") from e


def check_writable(output: str) -> None:
    """Create the output's parent if needed and make sure we can create entries in it."""
    parent = os.path.dirname(os.path.abspath(output).rstrip(os.sep))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise StorageError(f"cannot create the output's parent directory {parent}: "
                           f"{e.strerror or e}; choose a writable location") from e
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StorageError(f"the output's parent directory {parent} is not writable; "
                           "choose a writable location")
    probe = os.path.join(parent, f".etl-write-test-{os.getpid()}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as e:
        raise StorageError(f"cannot write in the output's parent directory {parent}: "
                           f"{e.strerror or e}; choose a writable location") from e


def check_free_space(locations: Iterable[tuple[str, str]], needed: int) -> None:
    """Each local (path, role) must have at least `needed` bytes free (the inputs' total)."""
    for path, role in locations:
        if fs.local_path(path) is None:  # an object store has no free space to check
            continue
        probe = _existing_ancestor(path)
        free = shutil.disk_usage(probe).free
        if free < needed:
            raise StorageError(
                f"not enough free space for the {role} {path}: {format_size(free)} free on its file "
                f"system ({probe}), the inputs total {format_size(needed)}; free some space or "
                "choose another location")


def _existing_ancestor(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path




# ------------------------------------------------------------------------------ run dirs


def create_run_dir(workdir: str, info: RunInfo) -> str:
    """`run-{id}/` with its marker written before anything else goes in."""
    path = run_dir(workdir, info.run_id)
    try:
        os.makedirs(path)
    except OSError as e:
        raise StorageError(f"cannot create the run directory {path}: {e.strerror or e}") from e
    fs.write_bytes(os.path.join(path, MARKER), json.dumps(info.to_json(), indent=1).encode())
    return path


def remove_run_dir(path: str, settle_seconds: float = 5.0) -> None:
    """Remove a local run directory, its marker last: a removal cut short leaves a directory
    the next run still knows as a dead run's and removes, never an unmarked one it must
    leave alone. Entries that appear meanwhile (a stopped run's worker thread finishing its
    batch) are removed again for up to `settle_seconds`."""
    marker = os.path.join(path, MARKER)
    try:
        with open(marker, "rb") as fh:
            mark = fh.read()
    except FileNotFoundError:
        mark = None
    deadline = time.monotonic() + settle_seconds
    while True:
        try:
            with os.scandir(path) as entries:  # the spills, the replaced output: in parallel
                remove_trees([e.path for e in entries if e.name != MARKER])
            if mark is not None and os.path.lexists(marker):
                os.remove(marker)
            try:
                os.rmdir(path)
                return
            except OSError:
                if mark is not None:  # something came in after the marker left: mark it again
                    with open(marker, "wb") as fh:
                        fh.write(mark)
                raise
        except FileNotFoundError:
            if not os.path.lexists(path):
                return
            if time.monotonic() > deadline:
                raise
        except OSError as e:
            if e.errno != errno.ENOTEMPTY or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def recover_leftovers(workdir: str, output: str, stale_after: float,
                      current: str | None = None) -> list[str]:
    """Remove run dirs of runs that are no longer alive (by their marker); if one of them
    died between the two renames of its publish, first put the old output back. Returns
    what was removed.

    `current`: the run id of the caller, which holds the output's lock. Then a `run-RUN_ID`
    folder without a marker (a worker pool's process that went on writing after its
    launcher's clean-up had removed the marker and the folder made it again) is removed
    too: its name is one a run makes, in the work dir runs make, and no other run can be
    alive in it while the caller holds the lock (a run makes its folder only while it holds
    the lock, and removes it before it lets go). Any other entry without our marker is left
    alone."""
    removed = []
    try:
        names = sorted(os.listdir(workdir))
    except FileNotFoundError:
        return removed
    for name in names:
        path = os.path.join(workdir, name)
        if not name.startswith(RUN_PREFIX) or not os.path.isdir(path):
            continue
        if os.path.islink(path):  # never followed where we delete: not a folder a run made
            log.warning("leaving %s alone: it is a symbolic link", path)
            continue
        info = RunInfo.from_json(load_json(os.path.join(path, MARKER)))
        if info is None:
            reason = _unmarked_removable(path, name, current)
            if reason is None:
                log.warning("leaving %s alone: it holds no readable %s marker", path, MARKER)
                continue
        else:
            reason = why_dead(info, stale_after)
        if reason is None:
            continue
        previous = os.path.join(path, PREVIOUS)
        if info is not None and os.path.isdir(previous) and not os.path.exists(output):
            os.replace(previous, output)
            log.warning("restored the previous output %s, left aside by %s", output,
                        info.describe())
        try:
            remove_run_dir(path)
        except OSError as e:
            log.warning("could not remove the leftover run directory %s: %s", path, e)
            continue
        removed.append(path)
        log.warning("removed the leftover run directory %s (%s)", path, reason)
    return removed


def recover_scratch(stale_after: float) -> list[str]:
    """Remove the scratch folders dead processes left in the temp directory (ArrayRecord
    shards and engine-shuffle chunks of a run killed with SIGKILL: etl.storage.scratch says
    which names, and how a dead owner is told). Returns what was removed."""
    removed = []
    for path, why in scratch.sweep(stale_after):
        log.warning("removed the leftover scratch folder %s (%s)", path, why)
        removed.append(path)
    return removed


def _unmarked_removable(path: str, name: str, current: str | None) -> str | None:
    """Why the marker-less `path` (`name` in the work dir) is a dead run's leftover, or None
    (see recover_leftovers)."""
    run_id = run_dir_id(name)
    if current is None or run_id is None or run_id == current:
        return None
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return None  # a symbolic link or a file: not a folder a run made
    except OSError:
        return None
    return ("it holds no marker: written again by a worker of a stopped run after its clean-up; "
            "this run holds the output's lock")


def prune_logs(workdir: str, keep: int = KEEP_LOGS, current: str | None = None) -> None:
    """Keep the files of the newest `keep` runs in `workdir/logs/` (`RUN_ID.log`, and
    `RUN_ID.rejected.jsonl`, `RUN_ID.lock-taken.json`; run ids start with their UTC start
    time), and always those of the run `current`.

    Only names a run makes (etl.output.layout.log_run_id) are counted or deleted: another
    program's `app1.log` in the folder is left alone. Only in the directories the project
    made: a work dir or logs folder that is a symbolic link (or not a directory) is not
    pruned at all, with a warning; the folders are opened without following links and every
    name is deleted relative to the opened folder, so a link swapped in meanwhile is never
    followed, and only regular files are deleted."""
    try:
        top = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError:  # ENOTDIR for a symbolic link (O_NOFOLLOW with O_DIRECTORY), ELOOP
        log.warning("not pruning old run logs in %s: %s is a symbolic link or not a "
                    "directory; only a folder this project made is pruned",
                    os.path.join(workdir, LOGS), workdir)
        return
    try:
        try:
            folder = os.open(LOGS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        except FileNotFoundError:
            return
        except OSError:
            log.warning("not pruning old run logs in %s: it is a symbolic link or not a "
                        "directory; only a folder this project made is pruned",
                        os.path.join(workdir, LOGS))
            return
        try:
            _prune_in(folder, keep, current)
        finally:
            os.close(folder)
    finally:
        os.close(top)


def _prune_in(folder: int, keep: int, current: str | None) -> None:
    """prune_logs's deletions inside the opened logs folder `folder`."""
    owned: dict[str, list[str]] = {}
    for name in os.listdir(folder):
        run_id = log_run_id(name)
        if run_id is not None:
            owned.setdefault(run_id, []).append(name)
    runs = sorted(owned)
    for run_id in runs[:-keep] if keep else runs:
        if run_id == current:
            continue
        for name in owned[run_id]:
            try:
                if stat.S_ISREG(os.lstat(name, dir_fd=folder).st_mode):
                    os.unlink(name, dir_fd=folder)
            except OSError:
                pass
