"""ArrayRecord shards (`format: array_record`): the same serialized records as our TFRecord
shards, in Google's ArrayRecord container (Riegeli chunks plus a footer index), the format
Grain's `ArrayRecordDataSource` reads with random access.

Writing, locally and on gs://: the `array_record` package's writer is C++ that opens a local
path itself (no Python stream, no file-system plug-in). So each shard is written to a scratch
file on the worker's local disk (etl.storage.scratch: inside the run's own directory when the
staging is local, so a killed run's scratch goes with its run directory; else in the temp
directory under a name that lets the next run remove a dead process's leftovers), then
copied through etl.storage.fs to its attempt file (local: renamed into place; gs://: one
whole-object upload, which a failed upload never creates and a retry replaces whole),
hashing it on the way. One path for both, so published bytes always go through fs (fsync,
O_DIRECT, errors naming the path) and the manifest's sha256 is of the bytes that were
copied. The alternative, writing straight into the staging directory, works only on local
disks and would still need a second read for the sha256. The cost is one local copy of each
shard (at most max_shard_bytes).

Writer options (WRITER_OPTIONS), measured with array-record 0.8.6 on 200k records of the
11-column benchmark CSV (schemas/bench_csv.yaml, 182 bytes each, one shard, 2-core machine):

| options                   | file    | run (200k rows) | Grain `__getitems__` x256 | single `[i]` |
|---------------------------|---------|-----------------|---------------------------|--------------|
| group_size:1,uncompressed | 47.5 MB | 1.2-1.7 s       | 88k records/s             | 4.3k/s       |
| group_size:1 (zstd:3)     | 40.1 MB | 2.4-2.8 s       | 50k records/s             | 4.5k/s       |
| group_size:16             | 12.2 MB | -               | 119k records/s            | 53k/s        |
| group_size:65536          | 10.0 MB | -               | 5k records/s              | 100/s        |

(the TFRecord shard: 39.6 MB, 0.9 s.) `group_size:1` because Grain requires it: it logs an
ERROR for every file of any other group size, and a random read then decodes one record.
Uncompressed, because zstd on one small record per chunk saved 16% and doubled the run time;
gzip/zlib `compression:` is refused for ArrayRecord at config time (the rule is its
adapter's, etl.formats.array_record_shards; etl.job.config words the message). Note: in
0.8.6 a single-record read by index (`read([i])`, what Grain's `__getitem__` calls) costs time
in proportion to the shard's record count (4.4k/s at 200k records, 84k/s at 10k), while a
range read does not; keep shards of small records moderate (`shards:` / `shard_size:`) when
Grain reads them one by one. Reading needs a local file too: a remote shard is copied to a
temporary file first.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from etl.base.errors import VerifyError
from etl.formats.tfrecord import FOOTER, HEADER
from etl.storage import fs, scratch

WRITER_OPTIONS = "group_size:1,uncompressed"  # see the table above
RANDOM_READ_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"  # tuned for random reads
COPY_CHUNK = 8 << 20


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
def scratch_file(name: str, run_dir: str | None = None) -> Iterator[str]:
    """A local path for one shard's ArrayRecord file, removed with its folder afterwards.
    `run_dir`: the run's local directory to hold it (never created here: a worker still
    going after its run was cleaned up fails instead of making it again); None: the temp
    directory (etl.storage.scratch names it for the next run's sweep)."""
    with scratch.scratch_dir("array-record", run_dir) as tmp:
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
    if fs.local_path(path) is not None:
        yield path
        return
    with scratch.scratch_dir("array-record") as tmp:
        local = os.path.join(tmp, fs.basename(path))
        with fs.open_read(path) as src, fs.open_write(local, durable=False) as dst:
            while True:
                data = src.read(COPY_CHUNK)
                if not data:
                    break
                dst.write(data)
        yield local


# The first 64 bytes of every Riegeli/records file, so of every ArrayRecord file: the block
# header at 0 and the file signature chunk. Readers seek past them to the chunk they want and
# never check them; etl.read.random_access compares them on opening a shard (one 64-byte read)
# so damage there is found too.
SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f00000000000000004000000000000000"
    "91bac23c9287e1a90000000000000000e19f13c0e9b1c37273000000000000000000000000000000")


def signature_problem(path: str) -> str | None:
    """What is wrong with the start of the ArrayRecord file at `path`, None when nothing."""
    with fs.open_read(path) as fh:
        head = fh.read(len(SIGNATURE))
    if head == SIGNATURE:
        return None
    if len(head) < len(SIGNATURE):
        return f"{len(head)} bytes: too short for an ArrayRecord file"
    at = next(i for i in range(len(SIGNATURE)) if head[i] != SIGNATURE[i])
    return (f"not an ArrayRecord file: byte {at} of its 64-byte Riegeli signature differs "
            "(damaged)")


def riegeli_reason(e: BaseException) -> str:
    """The first clause of a Riegeli error, without its hash values."""
    text = str(e).split(";")[0].replace("Corrupted Riegeli/records file: ", "")
    return re.sub(r" \(computed 0x[0-9a-f]+, stored 0x[0-9a-f]+\)", "", text)[:200]


def open_random(local_path: str) -> Any:
    """The package's own reader of a local ArrayRecord file, set for random reads (what
    etl.read.random_access holds open per shard; it checks `ok()`, the record count and each
    read itself). RuntimeError when its footer does not read."""
    return _module().ArrayRecordReader(local_path, RANDOM_READ_OPTIONS)


class Reader:
    """An open local ArrayRecord file; VerifyError names `name` when it is not one (its
    signature, its footer, or a chunk whose hash does not match)."""

    def __init__(self, local_path: str, name: str | None = None):
        self.name = name or local_path
        if not fs.exists(local_path):
            raise VerifyError(f"{self.name}: no such file")
        problem = signature_problem(local_path)
        if problem is not None:
            raise VerifyError(f"{self.name}: {problem}")
        try:
            self._r = _module().ArrayRecordReader(local_path)
        except RuntimeError as e:
            raise VerifyError(f"{self.name}: not a readable ArrayRecord file (truncated or "
                              f"damaged: {riegeli_reason(e)})") from e
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
                                  f"{lo}-{min(n, lo + batch) - 1}: {riegeli_reason(e)}") from e
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
