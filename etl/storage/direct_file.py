"""A durable local file written with O_DIRECT from page-aligned buffers, by a writer thread.

A file that is fsynced anyway gains nothing from the page cache, and on this VM filling fresh
page-cache pages is the slow part of writing: 480 MB in 16 MB files took 0.8-1.5 s (and as
much system CPU) written normally plus fsync, 0.27 s with O_DIRECT plus fsync.

O_DIRECT writes block until the disk has the data. Written from the thread that fills the
buffers, each 4 MiB write left that thread (a shard's gather, sort and sha256) idle for its
duration: the shard-writing stage kept 1.2 of 2 cores busy. So full buffers go to a writer
thread of the file's own, while the caller fills the next; at most `DEPTH` buffers are in
flight (bounded memory: DEPTH + 1 buffers a file). A file smaller than one buffer never starts
the thread. Data is copied into a buffer and written in whole blocks; the last, partial block
is written padded and the file truncated to its true size before the fsync. Write errors
raised in the writer thread reach the caller at its next write or at close, naming the path.
"""

from __future__ import annotations

import errno
import mmap
import os
import queue
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from etl.base.behind import Behind

# The largest piece of a write through the page cache handed to the kernel at once (every
# local write that does not bypass the cache: etl.storage.fs, and DirectFile where O_DIRECT is
# refused). Given 2 MiB or more in one write(), the page cache (ext4 on recent kernels) fills
# whole 2 MiB folios (FileHugePages in /proc/meminfo), whole free blocks of the size a VM's
# free page reporting hands back to its host, so every byte of them is faulted in again on
# the host. Smaller writes get smaller folios: a spill costs a fraction of the system CPU
# (benchmarks/README.md, "Cold memory").
WRITE_SLICE = 1 << 20


class DirectFile:
    """Write handle of one durable local file (see the module's docstring)."""

    BLOCK = 4096
    BUFFER = 4 << 20
    DEPTH = 2  # full buffers queued or being written while the caller fills the next

    def __init__(self, fd: int, path: str,
                 guarded: Callable[[str], AbstractContextManager[None]]) -> None:
        self.path = path
        self._fd = fd
        self._guarded = guarded
        self._buffers = [_BUFFERS.take()]
        self._view = memoryview(self._buffers[0])
        self._filled = 0
        self._size = 0
        self._closed = False
        self._direct = True
        self._free: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        # the writer thread (started with the first full buffer); it never raises: its write
        # error is kept in _error, and every buffer comes back, so the caller never waits
        self._writer = Behind(self._write_back, "etl-direct-write", depth=self.DEPTH + 1)
        self._error: BaseException | None = None

    @classmethod
    def open(cls, path: str,
             guarded: Callable[[str], AbstractContextManager[None]]) -> DirectFile | None:
        """None where O_DIRECT is unknown or refused (tmpfs, some network file systems)."""
        flag = getattr(os, "O_DIRECT", 0)
        if not flag:
            return None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o644)
        except OSError:
            return None
        return cls(fd, path, guarded)

    def write(self, data: bytes | memoryview) -> int:
        with self._guarded(self.path):
            return self._write(data)

    def _write(self, data: bytes | memoryview) -> int:
        src = memoryview(data).cast("B")
        done = 0
        while done < len(src):
            n = min(len(src) - done, self.BUFFER - self._filled)
            self._view[self._filled : self._filled + n] = src[done : done + n]
            self._filled += n
            done += n
            if self._filled == self.BUFFER:
                self._hand_off()
        self._size += len(src)
        return len(src)

    def _hand_off(self) -> None:
        """The full buffer to the writer thread; the next buffer to fill (a new one while
        fewer than DEPTH + 1 exist, else the first the writer gives back)."""
        self._writer.put(self._view)
        if len(self._buffers) <= self.DEPTH:
            self._buffers.append(_BUFFERS.take())
            self._view = memoryview(self._buffers[-1])
        else:
            self._view = self._free.get()
        self._filled = 0
        self._raise_written_error()

    def _write_back(self, view: memoryview) -> None:
        """On the writer thread: one full buffer to the disk, then back to the caller; after
        an error the rest come back unwritten (the caller raises it)."""
        if self._error is None:
            try:
                self._flush(view, self.BUFFER)
            except BaseException as e:  # noqa: BLE001 - raised again in the caller
                self._error = e
        self._free.put(view)

    def _raise_written_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _flush(self, view: memoryview, length: int) -> None:
        written = 0
        while written < length:  # O_DIRECT writes of whole blocks; short writes continue
            # refused O_DIRECT (below), the writes go through the page cache: WRITE_SLICE each
            end = length if self._direct else min(length, written + WRITE_SLICE)
            try:
                written += os.write(self._fd, view[written:end])
            except OSError as e:
                if e.errno != errno.EINVAL or not self._direct:
                    raise
                import fcntl  # noqa: PLC0415 - POSIX only, like O_DIRECT itself
                # the file system took the flag but refuses direct writes: write normally
                fcntl.fcntl(self._fd, fcntl.F_SETFL,
                            fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                self._direct = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._guarded(self.path):
            self._finish()

    def _finish(self) -> None:
        try:
            self._writer.close()
            self._raise_written_error()
            if self._filled:
                tail = self._filled
                padded = -(-tail // self.BLOCK) * self.BLOCK
                self._view[tail:padded] = bytes(padded - tail)
                self._flush(self._view, padded)
                os.ftruncate(self._fd, self._size)
            os.fsync(self._fd)
        finally:
            self._writer.close()
            os.close(self._fd)
            self._release()

    def _release(self) -> None:
        self._view.release()
        while not self._free.empty():
            self._free.get().release()
        for buf in self._buffers:
            _BUFFERS.give_back(buf)

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _BufferPool:
    """Page-aligned buffers (anonymous mmaps) kept for the next file. A fresh mapping is
    faulted in page by page, and on this VM a fresh page costs more than the copy into it
    (52 MB files written through fresh buffers per file: 214 against 65 ns a record; benchmarks/
    README.md, "Session of 2026-11-27"). A cache like malloc's free list: it holds no
    data between files and changes no result; at most KEEP buffers stay mapped."""

    KEEP = 12

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: list[mmap.mmap] = []

    def take(self) -> mmap.mmap:
        with self._lock:
            if self._kept:
                return self._kept.pop()
        return mmap.mmap(-1, DirectFile.BUFFER)

    def give_back(self, buf: mmap.mmap) -> None:
        with self._lock:
            if len(self._kept) < self.KEEP:
                self._kept.append(buf)
                return
        try:
            buf.close()
        except BufferError:
            pass  # a slice still referenced by a failed write's traceback: freed with it


_BUFFERS = _BufferPool()
