"""The TFRecord shard format (`format: tfrecord`, the default): the adapter of
etl.formats.shards' table for shards framed by etl.formats.tfrecord, whole-file gzip/zlib
compressed when asked, with an index file beside each uncompressed shard
(etl.formats.record_index) for random access.

Its writer (a sink fed framed records: compressed, hashed and indexed as they pass), its
reader, and `verify`'s re-read of a shard and its index file live here, so the shard writer,
the manifest and the readers ask this adapter instead of naming the format.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from etl.base.behind import Behind
from etl.base.errors import VerifyError
from etl.formats.record_index import (
    FRAME_OVERHEAD,
    IndexFileError,
    index_lines,
    index_name,
    parse_index,
)
from etl.formats.shard_adapter import IndexFile, OpenAttempt, ShardAdapter, ShardSink
from etl.formats.tfrecord import (
    COMPRESSIONS,
    Compressor,
    compression_of,
    decompressing_reader,
    iter_records,
    read_file,
)
from etl.storage import fs

NAME = "tfrecord"
SUFFIX = ".tfrecord"  # then the compression's: .gz, .zz


class TFRecordShards(ShardAdapter):
    name = NAME
    compressions = tuple(COMPRESSIONS)
    pattern = f"*{SUFFIX}*"
    tf_data = True

    def suffix(self, compression: str) -> str:
        return SUFFIX + COMPRESSIONS[compression]

    def is_shard(self, path: str) -> bool:
        return SUFFIX in fs.basename(path)

    def stem(self, name: str) -> str | None:
        return name.split(SUFFIX, 1)[0] if SUFFIX in name else None

    def indexable(self, compression: str) -> bool:
        """Uncompressed shards only: offsets into a gzip/zlib stream are no random access."""
        return compression == "none"

    def open_sink(self, final: str, compression: str, index: bool, attempt: OpenAttempt,
                  run_dir: str | None) -> AbstractContextManager[ShardSink]:
        return _TFRecordSink.open(final, compression, index, attempt)

    def read_file(self, path: str, check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
        """Each record's byte offset in the uncompressed stream (gzip/zlib by the suffix)."""
        return read_file(path, compression_of(path), check_crc)

    def verify(self, path: str, entry: dict[str, Any], check_records: bool,
               index: str | None) -> int:
        return _verify_shard(path, entry, check_records, index)


ADAPTER = TFRecordShards()


class _TFRecordSink:
    """A TFRecord shard (whole-file compressed when asked) and, with `index`, its index
    file, both written as attempt files that appear together or not at all."""

    def __init__(self, shard: BinaryIO, compression: str, index: BinaryIO | None,
                 index_name: str):
        self._fh, self._index_fh, self._index_name = shard, index, index_name
        self._comp = Compressor(compression)
        self._sha, self._index_sha = hashlib.sha256(), hashlib.sha256()
        # hashing and index lines run on threads of their own, in order (etl.base.behind)
        self._hashing = Behind(self._sha.update, "etl-hash")
        self._indexing = Behind(self._index_piece, "etl-index")
        self.num_bytes = self._index_bytes = self._frames_end = 0
        self.sha256 = ""
        self.index_file: IndexFile | None = None

    @classmethod
    @contextmanager
    def open(cls, final: str, compression: str, index: bool,
             attempt: OpenAttempt) -> Iterator[_TFRecordSink]:
        with ExitStack() as stack:
            shard = stack.enter_context(attempt(final))
            fh = stack.enter_context(attempt(index_name(final))) if index else None
            sink = cls(shard, compression, fh, fs.basename(index_name(final)))
            try:
                yield sink
            finally:  # a failed write leaves no thread behind
                sink._hashing.close()
                sink._indexing.close()

    def write(self, framed: pa.Buffer, frame_sizes: np.ndarray) -> None:
        self._put(self._comp.compress(framed))
        if self._index_fh is not None:
            self._indexing.put(frame_sizes)

    def _index_piece(self, frame_sizes: np.ndarray) -> None:
        """The index lines of one piece (on the indexing thread, pieces in order)."""
        assert self._index_fh is not None
        lines, self._frames_end = index_lines(frame_sizes - FRAME_OVERHEAD, self._frames_end)
        self._index_sha.update(lines)
        self._index_bytes += len(lines)
        self._index_fh.write(lines)

    def _put(self, data: bytes) -> None:
        self._hashing.put(data)
        self.num_bytes += len(data)
        self._fh.write(data)

    def finish(self) -> None:
        self._put(self._comp.flush())
        self._hashing.wait()
        self._indexing.wait()
        self.sha256 = self._sha.hexdigest()
        if self._index_fh is not None:
            self.index_file = IndexFile(self._index_name, self._index_bytes,
                                        self._index_sha.hexdigest())


def _verify_shard(path: str, entry: dict[str, Any], check_records: bool,
                  index_path: str | None = None) -> int:
    """Re-read a TFRecord shard; with its index file, every index line must be the offset
    and length of the frame read there (so each lands on a frame whose header CRC holds), one
    line per record."""
    if not fs.exists(path):
        raise VerifyError(f"{path}: missing shard listed in the manifest")
    index = None if index_path is None else _IndexCheck(index_path, entry["index"])
    sha = hashlib.sha256()
    size = 0

    def chunks() -> Iterable[bytes]:
        nonlocal size
        with fs.open_read(path) as fh:
            while True:
                data = fh.read(1 << 20)
                if not data:
                    return
                sha.update(data)
                size += len(data)
                yield data

    count = 0
    if check_records or index is not None:
        raw = chunks()
        try:
            stream = decompressing_reader(_Reader(raw), compression_of(path))
            for offset, data in iter_records(stream, path):
                if index is not None:
                    index.frame(count, offset, len(data) + FRAME_OVERHEAD)
                count += 1
        except IndexFileError:
            raise
        except VerifyError as e:
            raise VerifyError(str(e) if str(e).startswith(path) else f"{path}: {e}") from e
        except Exception as e:  # zlib errors on a corrupted compressed shard
            raise VerifyError(f"{path}: cannot decompress: {e}") from e
    else:
        for _ in chunks():
            pass
        count = entry["num_records"]
    if size != entry["num_bytes"]:
        raise VerifyError(f"{path}: {size} bytes on disk, manifest says {entry['num_bytes']}")
    if sha.hexdigest() != entry["sha256"]:
        raise VerifyError(f"{path}: sha256 {sha.hexdigest()} does not match the manifest")
    if count != entry["num_records"]:
        raise VerifyError(f"{path}: holds {count} records, manifest says {entry['num_records']}")
    if index is not None:
        index.done(count)
    return count


class _IndexCheck:
    """A shard's index file, compared line by line with the frames as the shard is re-read;
    errors name the index file and the 1-based line (etl.formats.record_index)."""

    def __init__(self, path: str, entry: dict[str, Any]):
        if not fs.exists(path):
            raise VerifyError(f"{path}: missing index file listed in the manifest")
        self.path, self.entry = path, entry
        self.data = fs.read_bytes(path)
        self.offsets, self.lengths = parse_index(self.data, path)

    def frame(self, i: int, offset: int, length: int) -> None:
        if i >= len(self.offsets):
            raise IndexFileError(f"{self.path}: line {i + 1}: missing: {len(self.offsets)} lines "
                                 f"for a shard of more records (record {i + 1} at offset "
                                 f"{offset})")
        if self.offsets[i] != offset or self.lengths[i] != length:
            raise IndexFileError(f"{self.path}: line {i + 1}: '{self.offsets[i]} "
                                 f"{self.lengths[i]}' is not record {i + 1}'s frame, which is at "
                                 f"offset {offset} with length {length}")

    def done(self, records: int) -> None:
        if len(self.offsets) != records:
            raise IndexFileError(f"{self.path}: line {records + 1}: one line too many: "
                                 f"{len(self.offsets)} lines for a shard of {records} records")
        size, sha = len(self.data), hashlib.sha256(self.data).hexdigest()
        if size != self.entry["num_bytes"]:
            raise VerifyError(f"{self.path}: {size} bytes on disk, manifest says "
                              f"{self.entry['num_bytes']}")
        if sha != self.entry["sha256"]:
            raise VerifyError(f"{self.path}: sha256 {sha} does not match the manifest")


class _Reader:
    """File-like over an iterator of chunks (so the decompressor sees one stream)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._it = iter(chunks)

    def read(self, _n: int = -1) -> bytes:
        return next(self._it, b"")
