"""Plain text, one sequence per line, tokenised with Arrow compute kernels.

Lines are found with one NumPy scan per chunk and handed to Arrow as one buffer, so there is
no Python step per line (etl.sources.lines, shared with the CSV and JSON Lines readers).
Columns: `id` (0-based line index, int64), `text`, `tokens` (list of strings), `length`
(int64 token count). Lines that are not UTF-8 become BadRecords `not_utf8`, lines longer than
`max_record_bytes` `oversized_record` (skipped while they stream past, never held whole), both
with their 1-based line; blank lines are skipped by default but keep their line number, so
ids never shift. A gzip file that breaks off raises BadInputError naming the file and line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.base.errors import ConfigError
from etl.sources.base import (
    Block,
    Split,
)
from etl.sources.file_source import FileSource, bool_option
from etl.sources.lines import decode_lines, line_blocks, line_end, line_splits


class LineSource(FileSource):
    """A format of one record per line (text, JSON Lines): split at line starts, a split
    owning the lines that start in its byte range (gzip files: one split)."""

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        return line_splits(path, target_bytes)


class TextReader(LineSource):
    """`format: text`; options: tokenizer (whitespace|chars), lowercase, skip_empty, block_rows."""

    OPTIONS = {"tokenizer", "lowercase", "skip_empty", "block_rows"}
    TOKENIZERS = ("whitespace", "chars")

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        super().__init__(config, base_dir, where)
        self.tokenizer = self.opts.get("tokenizer", "whitespace")
        if self.tokenizer not in self.TOKENIZERS:
            raise ConfigError(f"{where}: 'tokenizer' must be one of {list(self.TOKENIZERS)}, "
                              f"got {self.tokenizer!r}")
        self.lowercase = bool_option(self.opts, "lowercase", False, where)
        self.skip_empty = bool_option(self.opts, "skip_empty", True, where)

    def read_split(self, split: Split) -> Iterator[Block]:
        path = split.path
        for block in line_blocks(split, self.block_rows, self.max_record_bytes):
            text, rows, bad = decode_lines(block, path)
            bad = sorted(bad + block.oversized_records(path, self.max_record_bytes),
                         key=lambda b: b.line or 0)
            trimmed = pc.utf8_trim_whitespace(text)
            empty = np.asarray(pc.equal(pc.utf8_length(trimmed), 0), bool)
            if self.skip_empty and empty.any():
                text, trimmed = text.filter(pa.array(~empty)), trimmed.filter(pa.array(~empty))
                rows, empty = rows[~empty], empty[~empty]
            tokens = self._tokens(text if self.tokenizer == "chars" else trimmed, empty)
            ids = block.first + rows.astype(np.int64)
            columns = {
                "id": ids,
                "text": text,
                "tokens": tokens,
                "length": np.asarray(pc.list_value_length(tokens), np.int64),
            }
            yield Block(columns=columns, positions=ids, source=path, bad=bad, lines=ids + 1,
                        end_offset=line_end(block, path))

    def _tokens(self, text: pa.Array, empty: np.ndarray) -> pa.Array:
        if self.lowercase:
            text = pc.utf8_lower(text)
        if self.tokenizer == "chars":
            # Every character is a token (spaces too): decode the block once as UTF-32.
            text = text.cast(pa.large_string())
            bounds = np.frombuffer(text.buffers()[1], np.int64)[text.offset :][: len(text) + 1]
            data = text.buffers()[2].to_pybytes()[bounds[0] : bounds[-1]] if len(text) else b""
            utf32 = data.decode("utf-8").encode("utf-32-le")
            values = pa.array(np.frombuffer(utf32, "<U1"), pa.large_string())
            counts = np.asarray(pc.utf8_length(text), np.int64)
            offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            return pa.LargeListArray.from_arrays(pa.array(offsets), values)
        tokens = pc.utf8_split_whitespace(text)
        if empty.any():  # "" splits into [""]; an empty line has no tokens
            tokens = pc.if_else(pa.array(empty), pa.scalar([], tokens.type), tokens)
        return tokens
