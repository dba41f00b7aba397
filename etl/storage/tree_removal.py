"""Removing local folder trees with their files unlinked on several threads.

A 10M-row run leaves ~1.1 GB of spill files and, with `--force`, the ~1.2 GB output it
replaced. Unlinking a spill file frees its page-cache pages (CPU in the kernel), unlinking a
shard written with O_DIRECT waits on the disk (its extents freed and discarded, one file at a
time), and `shutil.rmtree` did both one after the other after everything else had finished.
With the trees' files taken in turns by several threads, one thread's wait overlaps another's
work; benchmarks/README.md has the figure. Symbolic links are removed, never followed. Every
local tree the project removes goes through here (`fs.delete_tree` too).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

# unlinks are system calls (the GIL is released while each runs), and some wait on the disk:
# more threads than cores keep the CPU-bound ones going while others wait
THREADS = max(4, min(8, os.cpu_count() or 1))


def _walk(top: str, files: list[str], folders: list[str]) -> None:
    """Every file (and link) under `top` into `files`, its folders into `folders` with each
    folder after the folders inside it."""
    with os.scandir(top) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _walk(entry.path, files, folders)
            else:
                files.append(entry.path)
    folders.append(top)


def remove_trees(paths: list[str], threads: int = THREADS) -> None:
    """Remove each of `paths` (a folder with everything in it, or a file): files unlinked on
    up to `threads` threads, then the folders, innermost first. The first error is raised
    once every removal that could run has run (as shutil.rmtree would raise it: an OSError
    naming the path); a path that is gone already is no error."""
    per_tree: list[list[str]] = []
    folders: list[str] = []
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            per_tree.append([])
            _walk(path, per_tree[-1], folders)
        elif os.path.lexists(path):
            per_tree.append([path])
    files = _in_turns(per_tree)
    errors: list[OSError] = []

    def unlink(path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            errors.append(e)

    if len(files) > 1 and threads > 1:
        with ThreadPoolExecutor(min(threads, len(files)), "remove-tree") as pool:
            list(pool.map(unlink, files))
    else:
        for path in files:
            unlink(path)
    if errors:
        raise errors[0]
    for folder in folders:
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            pass


def _in_turns(per_tree: list[list[str]]) -> list[str]:
    """The trees' files interleaved, each tree's spread evenly over the whole order (its
    k-th of n files at (k + 0.5) / n): the threads work on different trees at once, and
    seldom two on the same one (the replaced output's unlinks wait on the disk one at a
    time; the spills' use the CPU)."""
    order = [((k + 0.5) / len(files), t, path)
             for t, files in enumerate(per_tree) for k, path in enumerate(files)]
    return [path for _, _, path in sorted(order)]
