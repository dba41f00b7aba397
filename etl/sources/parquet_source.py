"""Parquet files, read in row batches by pyarrow (columns stay Arrow: no per-row Python).

Bad files (the rule for binary inputs: what is lost is counted when the file says how many
records there are, the run fails when it does not):
- a file pyarrow cannot open (broken footer, not Parquet at all) or without a `columns:`
  column: BadInputError naming the file, raised by `files()` at plan time (only footers are
  read) and again by `read`: its row count is in the footer, so it is unknown;
- a row group that cannot be decoded (a corrupt page): its rows not yet read are one
  `unreadable_rest` BadRecord (first row index, byte offset of the row group, count from the
  footer), and reading goes on with the next row group; positions stay the row numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from itertools import accumulate
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from etl.base.errors import BadInputError, BadRecord, ConfigError
from etl.sources.base import Block, Split
from etl.sources.file_source import FileSource
from etl.storage import fs


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

    def files(self) -> list[str]:
        found = super().files()
        for path in found:  # footers only: a broken file fails the run before any work
            with ExitStack() as stack:
                self._open(path, stack)
        return found

    def inputs(self) -> list[str]:
        return super().files()

    def _open(self, path: str, stack: ExitStack) -> pq.ParquetFile:
        fh = stack.enter_context(fs.open_read(path))
        try:
            parquet = stack.enter_context(pq.ParquetFile(fh))
        except (pa.ArrowException, OSError) as e:
            raise BadInputError(f"{path}: not a readable Parquet file (its footer, at the end of "
                                f"the file, cannot be read: {e}); fix or re-create it, or leave "
                                f"it out of 'paths'") from e
        missing = sorted(set(self.columns or []) - set(parquet.schema_arrow.names))
        if missing:
            raise BadInputError(f"{path}: Parquet file has no column(s) {missing} "
                                f"({self.where}: columns); it has {parquet.schema_arrow.names}")
        return parquet

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        """Runs of whole row groups of about `target_bytes` (compressed sizes, from the
        footer); `start`/`stop` are row indexes at row-group boundaries, so positions stay the
        file's row numbers."""
        with ExitStack() as stack:
            meta = self._open(path, stack).metadata
            groups = meta.num_row_groups if meta.num_rows else 0
            sizes = [_group_bytes(meta.row_group(g)) for g in range(groups)]
            rows = [meta.row_group(g).num_rows for g in range(groups)]
        cuts, size, row = [0], 0, 0
        for g in range(groups):
            if size >= target_bytes and row > cuts[-1]:
                cuts.append(row)
                size = 0
            size += sizes[g]
            row += rows[g]
        n = len(cuts)
        # each row group's first row -> the group
        first_group = dict(zip(accumulate(rows, initial=0), range(groups), strict=False))
        return [Split(path, i, n, a, cuts[i + 1] if i + 1 < n else None,
                      offset=_group_offset(meta, first_group[a]) if i else None)
                for i, a in enumerate(cuts)]

    def read_split(self, split: Split) -> Iterator[Block]:
        path = split.path
        with ExitStack() as stack:
            parquet = self._open(path, stack)
            meta = parquet.metadata
            start = 0
            for group in range(meta.num_rows and meta.num_row_groups):
                rows = meta.row_group(group).num_rows
                if start < split.start or (split.stop is not None and start >= split.stop):
                    start += rows
                    continue
                done = 0
                batches = parquet.iter_batches(batch_size=self.block_rows, row_groups=[group],
                                               columns=self.columns)
                while True:
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    except (pa.ArrowException, OSError) as e:
                        lost = rows - done
                        byte = _group_offset(meta, group)
                        yield Block({}, np.zeros(0, np.int64), source=path, bad=[BadRecord(
                            path, "unreadable_rest",
                            f"row group {group} cannot be decoded ({type(e).__name__}: {e}); "
                            f"its rows {start + done} to {start + rows - 1} are lost",
                            record=start + done, byte=byte, count=lost)])
                        break
                    n = batch.num_rows
                    columns = {name: batch.column(name) for name in batch.schema.names}
                    yield Block(columns, np.arange(start + done, start + done + n, dtype=np.int64),
                                source=path, end_offset=_batch_end(meta, group, done + n, rows))
                    done += n
                start += rows


def _group_bytes(group: pq.RowGroupMetaData) -> int:
    """Bytes of a row group in the file (its column chunks, compressed)."""
    return sum(group.column(c).total_compressed_size for c in range(group.num_columns))


def _batch_end(meta: pq.FileMetaData, group: int, done: int, rows: int) -> int | None:
    """Progress: how far into the file a batch ending `done` rows into its row group is (the
    group's bytes pro rata; None where the footer does not say)."""
    at = _group_offset(meta, group)
    if at is None:
        return None
    return at + _group_bytes(meta.row_group(group)) * done // max(rows, 1)


def _group_offset(meta: pq.FileMetaData, group: int) -> int | None:
    """Byte offset of a row group's first column chunk (where its data starts)."""
    try:
        column = meta.row_group(group).column(0)
        return int(column.dictionary_page_offset or column.data_page_offset)
    except (IndexError, ValueError, AttributeError):
        return None
