"""Existing TFRecord files, passed through record by record.

Each record's bytes go out unchanged in the `__serialized__` column (Arrow large_binary): the
pipeline shuffles and reshards them without decoding. Framing is checked as it is read (CRCs
on by default); at the first corrupted or truncated record the file's records so far still go
through and one BadRecord names the file, the record index and the byte offset. Nothing after
a broken frame can be trusted (the next length is unknown), so the rest of the file is skipped.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from etl.errors import BadRecord, ConfigError, VerifyError
from etl.sources.base import Block
from etl.sources.csv_source import FileSource, bool_option
from etl.tfrecord import COMPRESSIONS, compression_of, read_file

SERIALIZED = "__serialized__"


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

    def read(self, path: str) -> Iterator[Block]:
        compression = compression_of(path) if self.compression == "auto" else self.compression
        records: list[bytes] = []
        start = 0
        try:
            for _, data in read_file(path, compression, self.check_crc):
                records.append(data)
                if len(records) == self.block_rows:
                    yield _block(records, start, path)
                    start += len(records)
                    records = []
        except (VerifyError, zlib.error, EOFError, OSError) as e:
            index = start + len(records)
            reason = str(e).removeprefix(f"{path}: ")  # BadRecord.source names the file
            bad = BadRecord(path, index, f"record {index}: {reason}; the rest of the file is "
                                         f"skipped", raw=f"compression={compression}")
            yield _block(records, start, path, [bad])
            return
        if records:
            yield _block(records, start, path)


def _block(
    records: list[bytes], start: int, path: str, bad: list[BadRecord] | None = None
) -> Block:
    return Block(
        columns={SERIALIZED: pa.array(records, pa.large_binary())},
        positions=np.arange(start, start + len(records), dtype=np.int64),
        source=path,
        bad=bad or [],
    )
