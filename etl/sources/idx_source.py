"""MNIST-style IDX files: `paths: {image: train-images-idx3-ubyte.gz, label: ...}`.

Each `paths` key is a column; its files (paths or globs) are paired with the other columns' in
sorted order. The first column's file (the images, for MNIST) names the pair: it is what
`files()` returns and what `Block.source` says, so record identity is (image file, index).
Columns are NumPy blocks straight from the file: image (n, 28, 28) uint8, label (n,) uint8.
Bad files (the rule for binary inputs: what is lost is counted when the header says how many
records there are, the run fails when it does not):
- a wrong magic number or truncated header, a plain file longer than its dims describe, or paired
  files whose headers promise different record counts: BadInputError naming the file(s) and the
  byte, raised by `files()` (at plan time, before any work: only headers are read) and again by
  `read`; nothing in the pair can be trusted;
- data that ends early (a truncated file, a gzip stream that breaks): the complete records go
  through and one `unreadable_rest` BadRecord counts the records the header promised but the
  data did not hold (record index and byte offset of the first one), so `max_bad_fraction`
  sees the real loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np

from etl.base.errors import BadInputError, BadRecord
from etl.formats.idx import IdxHeader, check_end, is_gzip, open_idx, read_block
from etl.sources.base import Block, Source, Split, options, position, record_splits
from etl.sources.file_source import PairedFiles, block_rows
from etl.storage import fs


class IdxReader(Source):
    """`format: idx`; `paths: {column: glob}`; options: block_rows."""

    OPTIONS = {"block_rows"}
    READS_EARLY = True  # one zlib stream, outside the GIL (etl.sources.base.Source)

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        opts = options(config, self.OPTIONS, where)
        self.where = where
        self.block_rows = block_rows(opts, where)
        self.pairs = PairedFiles(config, base_dir, where)

    @property
    def key_column(self) -> str:
        """The column whose file gives a record its identity (and `Block.source`)."""
        return self.pairs.key_column

    def files(self) -> list[str]:
        keys = self.pairs.key_files()
        for key in keys:  # headers only: a broken file fails the run before any work
            with ExitStack() as stack:
                self._open(key, stack)
        return keys

    def inputs(self) -> list[str]:
        return self.pairs.every_file()

    def record_count(self, path: str) -> int:
        """The count every header of the pair states (they must agree); a file shorter than
        that yields fewer records, and the rest is counted as lost when it is read."""
        with ExitStack() as stack:
            opened = self._open(path, stack)
        return next(iter(opened.values()))[1].count

    def _open(self, path: str, stack: ExitStack) -> dict[str, tuple[str, IdxHeader, Any]]:
        """column -> (file, header, stream at the first record); headers agree on the count."""
        opened = {}
        for name, f in self.pairs.partners(path).items():
            header, stream = stack.enter_context(open_idx(f))
            opened[name] = (f, header, stream)
        counts = {f: header.count for f, header, _ in opened.values()}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{f} has {c}" for f, c in counts.items())
            raise BadInputError(f"{self.where}: paired IDX files hold different numbers of "
                                f"records (first dimension of their headers): {listed}")
        return opened

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        """Record ranges of about `target_bytes` (of all paired files together) when every file
        of the pair is plain and complete, so a split seeks to its first record. A gzip file
        cannot seek, and a truncated one must count its lost records once: one split."""
        with ExitStack() as stack:
            opened = self._open(path, stack)
            headers = [header for _, header, _ in opened.values()]
            for f, header, stream in opened.values():
                if is_gzip(stream) or _size(f) != \
                        header.header_bytes + header.count * header.record_bytes:
                    return [Split(path)]
            own = next((h for f, h, _ in opened.values() if f == path), headers[0])
        return record_splits(path, headers[0].count, sum(h.record_bytes for h in headers),
                             target_bytes, own.header_bytes, own.record_bytes)

    def read_split(self, split: Split) -> Iterator[Block]:
        path = split.path
        with ExitStack() as stack:
            opened = self._open(path, stack)
            total = next(iter(opened.values()))[1].count
            own, where = next(((h, _Place(h, s, split.size)) for f, h, s in opened.values()
                               if f == path), (None, None))
            start = split.start
            if split.stop is not None:
                total = min(total, split.stop)
            if start:  # only plain, complete files are split: seek to the first record
                for _, header, stream in opened.values():
                    stream.seek(header.header_bytes + start * header.record_bytes)
            while start < total:
                want = min(self.block_rows, total - start)
                parts = {name: read_block(stream, header, want, f)
                         for name, (f, header, stream) in opened.items()}
                n = min(len(block) for block, _ in parts.values())
                columns = {name: block[:n] for name, (block, _) in parts.items()}
                if n == want:
                    yield Block(columns, np.arange(start, start + n, dtype=np.int64), source=path,
                                end_offset=None if where is None else where.after(start + n))
                    start += n
                    continue
                # some file ended early: its complete records go, the rest is counted as lost
                short = min(parts, key=lambda name: len(parts[name][0]))
                f, header, _ = opened[short]
                lost = total - start - n
                byte = header.header_bytes + (start + n) * header.record_bytes
                gz = " (uncompressed)" if f.endswith(".gz") else ""
                named = "" if f == path else f"{f}: "
                bad = BadRecord(path, "unreadable_rest",
                                f"{named}{parts[short][1]} at{gz} byte {byte}: records {start + n} to "
                                f"{total - 1} of the {total} its header promises are missing",
                                record=start + n, byte=byte, count=lost)
                yield Block(columns, np.arange(start, start + n, dtype=np.int64), source=path,
                            bad=[bad])
                return
            if split.stop is None:
                for f, header, stream in opened.values():
                    check_end(stream, header, f)


class _Place:
    """Where a read of the unit's own file is, in that file's bytes (Block.end_offset, progress
    only). Plain: the end of the last record read. gzip: the compressed position, which is the
    raw file's tell() (the decompressor reads ahead, GzipStream.READ_SIZE at a time, so a small file is
    read whole with its header) capped by the share of the file's size the records read so far
    are of the uncompressed data (the header says how long that is); without the size (read
    outside a plan) the raw tell() alone."""

    def __init__(self, header: IdxHeader, stream: Any, size: int | None):
        self.header, self.size = header, size
        self.raw = stream.fileobj if is_gzip(stream) else None

    def after(self, records: int) -> int | None:
        h = self.header
        done = h.header_bytes + records * h.record_bytes
        if self.raw is None:
            return done
        told = position(self.raw)
        if told is None or self.size is None:
            return told
        total = h.header_bytes + h.count * h.record_bytes
        return min(told, self.size * done // max(total, 1), self.size)


def _size(path: str) -> int:
    return fs.size(path)
