"""The one seam for file access: local paths use the OS (atomic renames, fsync), anything
with a scheme (gs://, ...) goes through Beam's FileSystems, imported only when needed."""

from __future__ import annotations

import glob as globlib
import os
import shutil
from typing import Any, BinaryIO


def is_remote(path: str) -> bool:
    return "://" in path


def _fs() -> Any:
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    return FileSystems


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return _fs().join(base, *parts)
    return os.path.join(base, *parts)


def open_read(path: str) -> BinaryIO:
    if is_remote(path):
        return _fs().open(path, compression_type="uncompressed")
    return open(path, "rb")


def open_write(path: str, durable: bool = True) -> BinaryIO:
    """Write handle; `durable` local files are fsynced on close (temp spills skip it)."""
    if is_remote(path):
        return _fs().create(path, mime_type="application/octet-stream",
                            compression_type="uncompressed")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return _SyncedFile(path) if durable else open(path, "wb")


class _SyncedFile:
    """A local file that is fsynced on close: a published shard survives a power cut."""

    def __init__(self, path: str):
        self._fh = open(path, "wb")

    def write(self, data: bytes) -> int:
        return self._fh.write(data)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> _SyncedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_bytes(path: str, data: bytes) -> None:
    with open_write(path) as fh:
        fh.write(data)


def read_bytes(path: str) -> bytes:
    with open_read(path) as fh:
        return fh.read()


def exists(path: str) -> bool:
    return _fs().exists(path) if is_remote(path) else os.path.exists(path)


def match(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of files matching a glob, sorted."""
    if is_remote(pattern):
        found = _fs().match([pattern])[0].metadata_list
        return sorted((m.path, m.size_in_bytes) for m in found)
    return sorted((p, os.path.getsize(p)) for p in globlib.glob(pattern) if os.path.isfile(p))


def list_dir(prefix: str) -> list[tuple[str, int]]:
    """Every file below a directory/prefix (recursive), as (path, size)."""
    if is_remote(prefix):
        return match(prefix.rstrip("/") + "/**")
    out = []
    for root, _, files in os.walk(prefix):
        out.extend((os.path.join(root, f), os.path.getsize(os.path.join(root, f))) for f in files)
    return sorted(out)


def delete_tree(path: str) -> None:
    if is_remote(path):
        files = [p for p, _ in list_dir(path)]
        if files:
            _fs().delete(files)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def delete(paths: list[str]) -> None:
    remote = [p for p in paths if is_remote(p)]
    if remote:
        _fs().delete(remote)
    for p in paths:
        if not is_remote(p) and os.path.exists(p):
            os.remove(p)


def rename(src: str, dst: str) -> None:
    if is_remote(src):
        _fs().rename([src], [dst])
    else:
        os.replace(src, dst)


def size(path: str) -> int:
    if is_remote(path):
        return _fs().match([path])[0].metadata_list[0].size_in_bytes
    return os.path.getsize(path)
