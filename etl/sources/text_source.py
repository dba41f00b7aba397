"""Plain text, one sequence per line, tokenised with Arrow compute kernels.

Lines are found with one NumPy scan per chunk and handed to Arrow as one buffer, so there is
no Python step per line. `line_blocks` is shared with the JSONL reader.
Columns: `id` (0-based line index, int64), `text`, `tokens` (list of strings), `length`
(int64 token count). Lines that are not UTF-8 become BadRecords (position: 1-based line
number); blank lines are skipped by default but keep their line number, so ids never shift.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.errors import BadRecord, ConfigError
from etl.sources.base import Block, open_file
from etl.sources.csv_source import FileSource, bool_option, excerpt, utf8_bad_rows

_CHUNK_BYTES = 1 << 24
_WHITESPACE = np.array([ord(" "), ord("\t"), ord("\r"), ord("\n")], np.uint8)


@dataclass
class LineBlock:
    """Up to `block_rows` consecutive lines of one file as one buffer."""

    first: int  # 0-based index of the first line in the file
    data: bytes
    bounds: np.ndarray  # int64, n+1: line i is data[bounds[i]:bounds[i+1]] (with its newline)

    @property
    def count(self) -> int:
        return len(self.bounds) - 1

    def line_numbers(self) -> np.ndarray:
        """1-based line numbers, as editors show them."""
        return self.first + 1 + np.arange(self.count, dtype=np.int64)

    def line(self, i: int) -> bytes:
        return self.data[self.bounds[i] : self.bounds[i + 1]].rstrip(b"\r\n")

    def blank(self) -> np.ndarray:
        """Lines holding only spaces, tabs and line ends (what pyarrow's JSON reader skips)."""
        u8 = np.frombuffer(self.data, np.uint8)
        ink = np.concatenate([[0], np.cumsum(~np.isin(u8, _WHITESPACE), dtype=np.int64)])
        return ink[self.bounds[1:]] == ink[self.bounds[:-1]]

    def binary(self) -> pa.Array:
        """The lines as one LargeBinary array, newlines still attached (zero-copy)."""
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), self.count,
            [None, pa.py_buffer(self.bounds.astype(np.int64)), pa.py_buffer(self.data)],
        )


def line_blocks(path: str, max_lines: int) -> Iterator[LineBlock]:
    """A file (gzip if it ends in .gz) as blocks of whole lines, without a Python step per line."""
    with open_file(path) as raw:
        stream: Any = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        buf = b""
        ends = np.zeros(0, np.int64)  # end (after the newline) of each whole line in buf
        first = 0
        eof = False
        while not eof:
            chunk = stream.read(_CHUNK_BYTES)
            eof = not chunk
            found = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord("\n")) + 1 + len(buf)
            buf += chunk
            ends = np.concatenate([ends, found])
            if eof and (ends[-1] if len(ends) else 0) != len(buf):
                ends = np.append(ends, len(buf))  # a last line without a newline
            start = 0
            while len(ends) >= max_lines or (eof and len(ends)):
                take, ends = ends[:max_lines], ends[max_lines:]
                stop = int(take[-1])
                bounds = np.concatenate([[start], take]) - start
                yield LineBlock(first, buf[start:stop], bounds.astype(np.int64))
                first += len(take)
                start = stop
            buf = buf[start:]
            ends = ends - start


def decode_lines(block: LineBlock, path: str) -> tuple[pa.Array, np.ndarray, list[BadRecord]]:
    """Lines as text without line ends, their row indexes in the block, and the non-UTF-8 ones."""
    lines = block.binary()
    bad = utf8_bad_rows(lines)
    rows = np.arange(block.count)
    rejected = []
    if bad.any():
        numbers = block.line_numbers()
        rejected = [
            BadRecord(path, int(numbers[i]), f"line {int(numbers[i])}: not valid UTF-8 text",
                      raw=excerpt(block.line(i)))
            for i in np.flatnonzero(bad).tolist()
        ]
        rows = rows[~bad]
        lines = lines.filter(pa.array(~bad))
    text = pc.utf8_rtrim(lines.cast(pa.large_string()), characters="\r\n")
    return text, rows, rejected


class TextReader(FileSource):
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

    def read(self, path: str) -> Iterator[Block]:
        for block in line_blocks(path, self.block_rows):
            text, rows, bad = decode_lines(block, path)
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
            yield Block(columns=columns, positions=ids, source=path, bad=bad)

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
