"""Parquet files, read in row batches by pyarrow (columns stay Arrow: no per-row Python).

A file pyarrow cannot open (broken footer, not Parquet at all) or a page it cannot decode
raises a RecordError naming the file (and the first row of the failing batch), which the
pipeline routes like any other unreadable input; earlier batches have already gone through.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from etl.errors import ConfigError, RecordError
from etl.sources.base import Block, open_file
from etl.sources.csv_source import FileSource


class ParquetReader(FileSource):
    """`format: parquet`; options: columns (subset to read), block_rows."""

    OPTIONS = {"columns", "block_rows"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        super().__init__(config, base_dir, where)
        self.columns = self.opts.get("columns")
        if self.columns is not None and (
            not isinstance(self.columns, list) or not all(isinstance(c, str) for c in self.columns)
        ):
            raise ConfigError(f"{where}: 'columns' must be a list of column names, "
                              f"got {self.columns!r}")

    def read(self, path: str) -> Iterator[Block]:
        with open_file(path) as fh:
            try:
                parquet = pq.ParquetFile(fh)
            except (pa.ArrowException, OSError) as e:
                raise RecordError(f"{path}: not a readable Parquet file: {e}") from e
            missing = sorted(set(self.columns or []) - set(parquet.schema_arrow.names))
            if missing:
                raise RecordError(f"{path}: Parquet file has no column(s) {missing} "
                                  f"({self.where}: columns); it has {parquet.schema_arrow.names}")
            batches = parquet.iter_batches(batch_size=self.block_rows, columns=self.columns)
            start = 0
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except (pa.ArrowException, OSError) as e:
                    raise RecordError(f"{path}: cannot decode Parquet data at row {start}: "
                                      f"{e}") from e
                n = batch.num_rows
                columns = {name: batch.column(name) for name in batch.schema.names}
                yield Block(columns, np.arange(start, start + n, dtype=np.int64), source=path)
                start += n
