"""ArrayRecord shards (`format: array_record`): the same serialized records as our TFRecord
shards, in Google's ArrayRecord container (Riegeli chunks plus a footer index), the format
Grain's `ArrayRecordDataSource` reads with random access.

Writing, locally and on gs://: the `array_record` package's writer is C++ that opens a local
path itself (no Python stream, no file-system plug-in). So each shard is written to a scratch
file on the worker's local disk (a temporary directory, like the engine shuffle's scratch),
then copied through etl.storage.fs to its attempt file (local: renamed into place; gs://: one
whole-object upload, which a failed upload never creates and a retry replaces whole), hashing
it on the way. One path for both, so published bytes always go through fs (fsync, O_DIRECT,
errors naming the path) and the manifest's sha256 is of the bytes that were copied. The
alternative, writing straight into the staging directory, works only on local disks and
would still need a second read for the sha256. The cost is one local copy of each shard
(at most max_shard_bytes).

Writer options (WRITER_OPTIONS): `group_size:1`, each record its own chunk, so a random read
decompresses one record: what Grain's random access wants (measured in benchmarks/README.md).
The chunks are zstd-compressed (ArrayRecord's default); gzip/zlib `compression:` is refused for
ArrayRecord at config time (etl.job.config). Reading needs a local file too: a remote shard is
copied to a temporary file first.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from etl.base.errors import VerifyError
from etl.storage import fs

WRITER_OPTIONS = "group_size:1"
COPY_CHUNK = 8 << 20
HEADER = 12  # TFRecord frame: uint64 length + uint32 length CRC before the payload
FOOTER = 4


def _module() -> Any:
    from array_record.python import array_record_module  # noqa: PLC0415 - a C++ extension, loaded only for ArrayRecord shards

    return array_record_module


class Writer:
    """Serialized records into a new ArrayRecord file at a local path."""

    def __init__(self, local_path: str, options: str = WRITER_OPTIONS):
        self.path = local_path
        self._w = _module().ArrayRecordWriter(local_path, options)
        if not self._w.ok():
            raise OSError(f"{local_path}: cannot create an ArrayRecord file")

    def write_framed(self, framed: Any, frame_sizes: np.ndarray) -> None:
        """The payloads of consecutive TFRecord frames (`framed`: their bytes, `frame_sizes`:
        each frame's length): what the shuffle hands the shard writer."""
        view = memoryview(framed)
        at = 0
        write = self._w.write
        for n in frame_sizes.tolist():
            write(bytes(view[at + HEADER : at + n - FOOTER]))
            at += n

    def close(self) -> None:
        self._w.close()


@contextmanager
def scratch_file(name: str) -> Iterator[str]:
    """A local path for one shard's ArrayRecord file, removed with its folder afterwards."""
    with tempfile.TemporaryDirectory(prefix="etl-array-record-") as tmp:
        yield os.path.join(tmp, name)


def copy_out(local_path: str, fh: Any | None) -> tuple[int, str]:
    """Copy a finished local file into `fh` (an fs write handle; None: only hash it);
    (bytes, sha256)."""
    sha = hashlib.sha256()
    size = 0
    with fs.open_read(local_path) as src:
        while True:
            data = src.read(COPY_CHUNK)
            if not data:
                return size, sha.hexdigest()
            sha.update(data)
            size += len(data)
            if fh is not None:
                fh.write(data)


def digest(local_path: str) -> tuple[int, str]:
    """(bytes, sha256) of a file."""
    return copy_out(local_path, None)


@contextmanager
def local_copy(path: str) -> Iterator[str]:
    """`path` itself when local, else a temporary local copy (the reader needs a file)."""
    if not fs.is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="etl-array-record-") as tmp:
        local = os.path.join(tmp, fs.basename(path))
        with fs.open_read(path) as src, fs.open_write(local, durable=False) as dst:
            while True:
                data = src.read(COPY_CHUNK)
                if not data:
                    break
                dst.write(data)
        yield local


class Reader:
    """An open local ArrayRecord file; VerifyError names `name` when it is not one."""

    def __init__(self, local_path: str, name: str | None = None):
        self.name = name or local_path
        if not fs.exists(local_path):
            raise VerifyError(f"{self.name}: no such file")
        self._r = _module().ArrayRecordReader(local_path)
        if not self._r.ok():
            raise VerifyError(f"{self.name}: not a readable ArrayRecord file (truncated or "
                              "damaged: its footer index cannot be read)")

    def __len__(self) -> int:
        return int(self._r.num_records())

    def records(self, batch: int = 1024) -> Iterator[bytes]:
        n = len(self)
        for lo in range(0, n, batch):
            try:
                got = self._r.read(lo, min(n, lo + batch))
            except RuntimeError as e:
                raise VerifyError(f"{self.name}: damaged ArrayRecord data in records "
                                  f"{lo}-{min(n, lo + batch) - 1}: {str(e).split(';')[0]}") from e
            yield from got

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_file(path: str) -> Iterator[tuple[int, bytes]]:
    """(index, serialized record) of every record of an ArrayRecord file, local or remote."""
    with local_copy(path) as local, Reader(local, path) as reader:
        yield from enumerate(reader.records())


def count_records(local_path: str, name: str | None = None) -> int:
    """How many records the file holds, every chunk read (so damage inside is found)."""
    with Reader(local_path, name) as reader:
        return sum(1 for _ in reader.records())
