"""The ArrayRecord shard format (`format: array_record`): the adapter of etl.formats.shards'
table for shards written, read and verified by etl.formats.array_record (the one module
that opens an ArrayRecord file).

Its rules: no whole-file compression (ArrayRecord compresses each chunk itself) and no
index files (the file carries its own index; read at random by record number).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from etl.base.errors import VerifyError
from etl.formats import array_record
from etl.formats.shard_adapter import IndexFile, OpenAttempt, ShardAdapter, ShardSink
from etl.storage import fs

NAME = "array_record"
SUFFIX = ".array_record"


class ArrayRecordShards(ShardAdapter):
    name = NAME
    compressions = ("none",)
    compression_refused = ("ArrayRecord compresses each chunk itself, and a whole-file "
                           "gzip/zlib stream would lose its random access")
    index_refused = "an ArrayRecord file carries its own index"
    pattern = f"*{SUFFIX}"
    position = "index"
    by_number = True

    def suffix(self, compression: str) -> str:
        return SUFFIX

    def open_sink(self, final: str, compression: str, index: bool, attempt: OpenAttempt,
                  run_dir: str | None) -> AbstractContextManager[ShardSink]:
        return _ArrayRecordSink.open(final, attempt, run_dir)

    def read_file(self, path: str, check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
        """Each record's index (its chunk hashes are always checked)."""
        return array_record.read_file(path)

    def verify(self, path: str, entry: dict[str, Any], check_records: bool,
               index: str | None) -> int:
        return _verify_array_record(path, entry, check_records)

    def open_random(self, path: str) -> Any:
        return array_record.open_random(path)


ADAPTER = ArrayRecordShards()


class _ArrayRecordSink:
    """An ArrayRecord shard: the payloads written to a local scratch file, then copied to
    the attempt file (etl.formats.array_record says why)."""

    def __init__(self, writer: array_record.Writer):
        self._writer = writer
        self.num_bytes = 0
        self.sha256 = ""
        self.index_file: IndexFile | None = None
        self._out: BinaryIO | None = None

    @classmethod
    @contextmanager
    def open(cls, final: str, attempt: OpenAttempt,
             run_dir: str | None) -> Iterator[_ArrayRecordSink]:
        with array_record.scratch_file(fs.basename(final), run_dir) as local, \
                attempt(final) as out:
            sink = cls(array_record.Writer(local))
            sink._out = out
            try:
                yield sink
            finally:
                sink._writer.close()

    def write(self, framed: pa.Buffer, frame_sizes: np.ndarray) -> None:
        self._writer.write_framed(framed, frame_sizes)

    def finish(self) -> None:
        self._writer.close()
        assert self._out is not None
        self.num_bytes, self.sha256 = array_record.copy_out(self._writer.path, self._out)


def _verify_array_record(path: str, entry: dict[str, Any], check_records: bool) -> int:
    """An ArrayRecord shard: size and sha256 of its bytes, and (`check_records`) every
    record read back through the ArrayRecord reader (its chunk hashes checked) and counted."""
    if not fs.exists(path):
        raise VerifyError(f"{path}: missing shard listed in the manifest")
    with array_record.local_copy(path) as local:
        size, sha = array_record.digest(local)
        if size != entry["num_bytes"]:
            raise VerifyError(f"{path}: {size} bytes on disk, manifest says {entry['num_bytes']}")
        if sha != entry["sha256"]:
            raise VerifyError(f"{path}: sha256 {sha} does not match the manifest")
        count = array_record.count_records(local, path) if check_records else entry["num_records"]
    if count != entry["num_records"]:
        raise VerifyError(f"{path}: holds {count} records, manifest says {entry['num_records']}")
    return count
