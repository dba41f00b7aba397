"""Inputs are pinned: what a run publishes was made from the bytes its fingerprints name.

The fingerprints (etl.schedule.fingerprint) are taken when the inputs are listed; the pipeline reads
them afterwards. An upstream writer still appending to today's file, or a file replaced
while the run reads it, would otherwise be published half-read under the fingerprint of the
whole file, and the next scheduled run would skip the span as current. So each input's
identity is recorded before its fingerprint is taken and compared again after the last read
(before anything is published):

- local files: size, modification and change time (ns), inode and device. The change time
  cannot be set back by a user (`touch -d` and `os.utime` move it forward), so a rewrite of
  the same size with the old mtime restored is still seen, without reading the file again.
- gs:// objects: generation and size (every overwrite makes a new generation).

Any difference fails the run with InputChanged (exit 2) naming the file; nothing is
published and the next run reads the file again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from etl.base.errors import ConfigError
from etl.storage import fs
from etl.storage.object_store import Store

Pin = tuple[Any, ...]


class InputChanged(ConfigError):
    """An input changed between listing and the end of reading (exit 2)."""


def pins(paths: Iterable[str]) -> dict[str, Pin]:
    """path -> its identity now; pseudo-files (python sources) and directories are left out
    (their records come from code, and are never judged current anyway)."""
    paths = list(paths)
    found: dict[str, Pin] = {}
    gcs = [p for p in paths if p.startswith("gs://")]
    if gcs:
        store = Store()
        for path in gcs:
            info = store.stat(path)
            found[path] = ("gone",) if info is None else ("gs", info.generation, info.size)
    for path in paths:
        if path in found or not fs.on_disk(path):
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:
            found[path] = ("gone",)
            continue
        if os.path.isdir(path):
            continue
        found[path] = ("file", st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
    return found


def check_unchanged(before: dict[str, Pin]) -> None:
    """InputChanged naming the first input whose identity differs from `before`."""
    after = pins(before)
    for path, was in before.items():
        now = after.get(path)
        if now != was:
            raise InputChanged(f"input {path} changed while being read ({_what(was, now)}); "
                               "nothing was published: the next run reads it again (a file "
                               "still being written must be complete before its span runs)")


def _what(was: Pin, now: Pin | None) -> str:
    if now is None or now[0] == "gone":
        return "it is gone"
    if was[0] == "gs":
        return (f"generation {was[1]} -> {now[1]}, {was[2]} -> {now[2]} bytes"
                if now[2] != was[2] else f"generation {was[1]} -> {now[1]}")
    if now[1] != was[1]:
        return f"{was[1]} -> {now[1]} bytes"
    if now[4:] != was[4:]:
        return "replaced by another file"
    return "rewritten in place (same size, other modification or change time)"
