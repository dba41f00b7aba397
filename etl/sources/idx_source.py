"""MNIST-style IDX files: `paths: {image: train-images-idx3-ubyte.gz, label: ...}`.

Each `paths` key is a column; its files (paths or globs) are paired with the other columns' in
sorted order. The first column's file (the images, for MNIST) names the pair: it is what
`files()` returns and what `Block.source` says, so record identity is (image file, index).
Columns are NumPy blocks straight from the file: image (n, 28, 28) uint8, label (n,) uint8.
A wrong magic number, dims that do not match the data, or paired files whose record counts
differ raise a RecordError naming the file(s): the whole pair is unusable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np

from etl.errors import RecordError
from etl.idx import iter_blocks, open_idx
from etl.sources.base import Block, options
from etl.sources.csv_source import PairedFiles, block_rows


class IdxReader:
    """`format: idx`; `paths: {column: glob}`; options: block_rows."""

    OPTIONS = {"block_rows"}

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
        return self.pairs.keys()

    def inputs(self) -> list[str]:
        return self.pairs.every_file()

    def read(self, path: str) -> Iterator[Block]:
        files = self.pairs.partners(path)
        with ExitStack() as stack:
            opened = {name: stack.enter_context(open_idx(f)) for name, f in files.items()}
            counts = {files[name]: header.count for name, (header, _) in opened.items()}
            if len(set(counts.values())) > 1:
                listed = ", ".join(f"{f} has {c}" for f, c in counts.items())
                raise RecordError(f"{self.where}: paired IDX files hold different numbers of "
                                  f"records: {listed}")
            streams = {
                name: iter_blocks(stream, header, self.block_rows, files[name])
                for name, (header, stream) in opened.items()
            }
            start = 0
            for blocks in zip(*streams.values(), strict=True):
                columns = dict(zip(streams, blocks, strict=True))
                n = len(blocks[0])
                yield Block(columns, np.arange(start, start + n, dtype=np.int64), source=path)
                start += n
