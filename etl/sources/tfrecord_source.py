"""Existing TFRecord files, checked frame by frame and against the schema, then passed through.

Each good record's bytes go out unchanged in the `__serialized__` column (Arrow large_binary):
the pipeline shuffles and reshards them without re-encoding. A record's position is its frame
index in the file; every broken frame counts as one index, so fixing or losing one record never
renumbers the others. What is rejected, and why (`etl.formats.tfrecord.scan_records` does the framing):

- a frame whose data CRC fails: one `corrupt_record` (record index, byte offset of its frame);
  its length header was valid, so reading goes on with the next frame;
- a frame whose length header CRC fails: the reader resynchronises at the next offset holding a
  whole valid frame; the skipped bytes are one `corrupt_record` naming the byte range;
- a frame longer than `max_record_bytes`: one `oversized_record`, skipped without being read;
- a file that ends inside a frame: one `corrupt_record`;
- with `prepare(schema, ...)` (the pipeline always calls it): a record of the wrong proto kind,
  a feature of the wrong list type, a required feature missing, or a value count that does not
  fit the shape: `schema_mismatch` / `missing_required` / `wrong_shape` (etl.contract.record_check), so
  nothing `make_dataset` cannot parse is ever published.
A gzip/zlib stream that cannot be decompressed past some point raises BadInputError naming the
file and the uncompressed offset: how many records were lost is unknown, so the run fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from etl.base.errors import BadInputError, BadRecord, ConfigError
from etl.contract.record_check import RecordChecker
from etl.formats.tfrecord import COMPRESSIONS, BrokenStreamError, compression_of, scan_records
from etl.sources.base import Block
from etl.sources.file_source import FileSource, bool_option
from etl.storage import fs

if TYPE_CHECKING:
    from etl.contract.record_check import RecordChecker
    from etl.contract.schema import Schema

SERIALIZED = "__serialized__"
_BLOCK_BYTES = 64 << 20  # a block is cut at block_rows records or this many bytes


class TFRecordReader(FileSource):
    """`format: tfrecord`; options: compression (auto | none | gzip | zlib), check_crc,
    block_rows."""

    OPTIONS = {"compression", "check_crc", "block_rows"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        super().__init__(config, base_dir, where)
        self.compression = self.opts.get("compression", "auto")
        if self.compression != "auto" and self.compression not in COMPRESSIONS:
            raise ConfigError(f"{where}: 'compression' must be one of "
                              f"{['auto', *COMPRESSIONS]}, got {self.compression!r}")
        self.check_crc = bool_option(self.opts, "check_crc", True, where)
        self.checker: RecordChecker | None = None

    def prepare(self, schema: Schema, max_record_bytes: int) -> None:
        """Check every record against `schema` before it is passed on, and reject frames over
        `max_record_bytes` unread."""

        super().prepare(schema, max_record_bytes)
        self.checker = RecordChecker(schema)

    def read(self, path: str) -> Iterator[Block]:
        compression = compression_of(path) if self.compression == "auto" else self.compression
        records: list[bytes] = []
        indexes: list[int] = []
        offsets: list[int] = []
        bad: list[BadRecord] = []
        size = 0
        with fs.open_read(path) as fh:
            frames = scan_records(fh, compression, self.check_crc, self.max_record_bytes)
            try:
                for frame in frames:
                    if frame.data is None:
                        bad.append(BadRecord(path, frame.code, frame.reason, record=frame.index,
                                             byte=frame.offset))
                    else:
                        records.append(frame.data)
                        indexes.append(frame.index)
                        offsets.append(frame.offset)
                        size += len(frame.data)
                    if len(records) >= self.block_rows or size >= _BLOCK_BYTES:
                        yield self._block(records, indexes, offsets, bad, path, _tell(fh))
                        records, indexes, offsets, bad, size = [], [], [], [], 0
            except BrokenStreamError as e:
                where = f"uncompressed byte {e.offset}"
                raise BadInputError(f"{path}: cannot read {compression} TFRecord data past "
                                    f"{where}: {e.why}; the records after it are lost (their "
                                    f"number is unknown), so nothing is published. Fix or "
                                    f"re-create the file, or leave it out of 'paths'") from e
        if records or bad:
            yield self._block(records, indexes, offsets, bad, path)

    def _block(self, records: list[bytes], indexes: list[int], offsets: list[int],
               bad: list[BadRecord], path: str, end_offset: int | None = None) -> Block:
        column = pa.array(records, pa.large_binary())
        positions = np.array(indexes, np.int64)
        where = np.array(offsets, np.int64)
        bad = list(bad)
        if self.checker is not None and len(records):
            keep, rejected = self.checker.check(column, path, positions, where)
            if rejected:
                bad += rejected
                take = pa.array(np.flatnonzero(keep))
                column, positions, where = column.take(take), positions[keep], where[keep]
        bad.sort(key=lambda b: (b.record if b.record is not None else -1))
        return Block(columns={SERIALIZED: column}, positions=positions, source=path, bad=bad,
                     offsets=where, end_offset=end_offset)


def _tell(fh: Any) -> int | None:
    """How far the scan has read the file (progress; its read-ahead included)."""
    try:
        return int(fh.tell())
    except (OSError, ValueError, AttributeError):
        return None
