"""CSV files through pyarrow's streaming reader, every column as text.

Columns are read as strings (never inferred) so two blocks of one file can never disagree on a
type: the encoder parses numbers against the schema. The parser runs single-threaded because
only then does pyarrow report the row number of a malformed row; Beam parallelises across
files instead.

Bad rows never stop a file:
- a row with the wrong number of fields (including an unterminated quote, which swallows the
  rest of the file into one field) comes back from pyarrow's `invalid_row_handler`;
- a row with bytes that are not UTF-8: cells are read as binary and checked per column, so
  only the offending rows are rejected (pyarrow's own check would fail the whole block).
Both become `BadRecord`s whose position is the 1-based physical line the row starts on
(quoted newlines in earlier rows are counted, so it matches what an editor shows). Blank
lines are no records (in a file of more than one column a row whose every field is empty
is taken for one); they only use up their line and record index.
Good rows' positions are record indexes: 0 for the first row after the header, counting
every row the parser saw (rejected and blank ones included), so fixing one bad row never
renumbers the others.

The helpers at the top (paths, `block_rows`, excerpts, column/file pairing) serve every reader
in this package; they would sit best in `base.py`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from etl.errors import BadRecord, ConfigError
from etl.sources.base import DEFAULT_BLOCK_ROWS, Block, expand, open_file, options


# ---- helpers shared by the readers -------------------------------------------------------------
def join(base_dir: str, path: str) -> str:
    """A job-relative path made usable: absolute and remote paths stay as they are."""
    if "://" in path or os.path.isabs(path):
        return path
    if "://" in base_dir:
        return base_dir.rstrip("/") + "/" + path
    return os.path.join(base_dir, path)


def expand_each(patterns: Sequence[str], base_dir: str, where: str) -> list[str]:
    """Every pattern must match something: a typo in a job file is a launch error, not 0 rows."""
    found: set[str] = set()
    for pattern in patterns:
        matched = expand(join(base_dir, pattern))
        if not matched:
            raise ConfigError(f"{where}: no input files match {pattern!r} "
                              f"(relative to {base_dir!r})")
        found.update(matched)
    return sorted(found)


def path_list(config: Mapping[str, Any], where: str) -> list[str]:
    """`paths:` as a list of strings (a single string is accepted)."""
    paths = config.get("paths")
    if isinstance(paths, str):
        return [paths]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise ConfigError(f"{where}: 'paths' must be a path, a glob or a list of them, "
                          f"got {paths!r}")
    return list(paths)


class PairedFiles:
    """`paths: {column: glob, ...}`: each column's files, paired with the others' in sorted order.

    The first column's file names the pair: it is what `files()` returns and `Block.source`
    says, so a record's identity is (that file, index).
    """

    def __init__(self, config: Mapping[str, Any], base_dir: str, where: str):
        paths = config.get("paths")
        if not isinstance(paths, Mapping) or not paths or not all(
            isinstance(k, str) and (isinstance(v, str) or (
                isinstance(v, list) and v and all(isinstance(p, str) for p in v)))
            for k, v in paths.items()
        ):
            raise ConfigError(f"{where}: 'paths' must map column names to paths/globs, e.g. "
                              f"{{image: train-images.gz, label: train-labels.gz}}, got {paths!r}")
        self.patterns = {k: [v] if isinstance(v, str) else list(v) for k, v in paths.items()}
        self.base_dir = base_dir
        self.where = where
        self._found: dict[str, list[str]] | None = None

    @property
    def key_column(self) -> str:
        return next(iter(self.patterns))

    def found(self) -> dict[str, list[str]]:
        """column -> its files, sorted (globs expanded once)."""
        if self._found is None:
            found = {
                name: expand_each(patterns, self.base_dir, f"{self.where}: paths.{name}")
                for name, patterns in self.patterns.items()
            }
            counts = {name: len(files) for name, files in found.items()}
            if len(set(counts.values())) > 1:
                raise ConfigError(f"{self.where}: the 'paths' columns match different numbers of "
                                  f"files {counts}; files are paired in sorted order, so they "
                                  f"must agree")
            self._found = found
        return self._found

    def keys(self) -> list[str]:
        return list(self.found()[self.key_column])

    def every_file(self) -> list[str]:
        return sorted(f for files in self.found().values() for f in files)

    def partners(self, path: str) -> dict[str, str]:
        """column -> file of the pair `path` (a key column file) names."""
        keys = self.keys()
        if path not in keys:
            raise ConfigError(f"{self.where}: {path!r} is not one of the {self.key_column!r} "
                              f"files {keys}")
        i = keys.index(path)
        return {name: files[i] for name, files in self.found().items()}


def int_option(
    opts: Mapping[str, Any], name: str, default: int, where: str, minimum: int = 0
) -> int:
    value = opts.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


def bool_option(opts: Mapping[str, Any], name: str, default: bool, where: str) -> bool:
    value = opts.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {name!r} must be true or false, got {value!r}")
    return value


def block_rows(opts: Mapping[str, Any], where: str) -> int:
    return int_option(opts, "block_rows", DEFAULT_BLOCK_ROWS, where, minimum=1)


class FileSource:
    """Set-up shared by the readers whose `paths:` is a list of files/globs, one unit each.

    `files()` are what `read()` takes (and `Block.source`); `inputs()` every file read, which
    only multi-file formats make differ.
    """

    OPTIONS: ClassVar[set[str]] = {"block_rows"}

    def __init__(self, config: Mapping[str, Any], base_dir: str, where: str):
        self.opts = options(config, self.OPTIONS, where)
        self.where = where
        self.base_dir = base_dir
        self.patterns = path_list(config, where)
        self.block_rows = block_rows(self.opts, where)

    def files(self) -> list[str]:
        return expand_each(self.patterns, self.base_dir, self.where)

    def inputs(self) -> list[str]:
        return self.files()


def excerpt(raw: bytes | str, limit: int = 120) -> str:
    """A short, printable excerpt of offending input for the dead-letter output."""
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
    return text if len(text) <= limit else text[: limit - 3] + "..."


def utf8_bad_rows(col: pa.Array) -> np.ndarray:
    """Rows of a binary column that are not valid UTF-8 (the slow scan runs only on failure)."""
    try:
        col.cast(pa.string())
        return np.zeros(len(col), bool)
    except pa.ArrowInvalid:
        return np.array([_not_utf8(v) for v in col.to_pylist()], bool)


def _not_utf8(value: bytes | None) -> bool:
    try:
        if value is not None:
            value.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


# ---- the CSV reader ----------------------------------------------------------------------------
class CsvReader(FileSource):
    """`format: csv`; options: delimiter, quote_char, header, columns, skip_rows, block_rows."""

    OPTIONS = {"delimiter", "quote_char", "header", "columns", "skip_rows", "block_rows"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        super().__init__(config, base_dir, where)
        opts = self.opts
        self.delimiter = opts.get("delimiter", ",")
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1:
            raise ConfigError(f"{where}: 'delimiter' must be one character, got {self.delimiter!r}")
        self.quote_char = opts.get("quote_char", '"')
        if self.quote_char not in (None, False) and (
            not isinstance(self.quote_char, str) or len(self.quote_char) != 1
        ):
            raise ConfigError(f"{where}: 'quote_char' must be one character or null (no quoting), "
                              f"got {self.quote_char!r}")
        self.header = bool_option(opts, "header", True, where)
        self.columns = opts.get("columns")
        if self.columns is not None and (
            not isinstance(self.columns, list) or not self.columns
            or not all(isinstance(c, str) for c in self.columns)
        ):
            raise ConfigError(f"{where}: 'columns' must be a list of column names, "
                              f"got {self.columns!r}")
        if not self.header and self.columns is None:
            raise ConfigError(f"{where}: 'header: false' needs a 'columns:' list of names")
        self.skip_rows = int_option(opts, "skip_rows", 0, where)
        self.numeric: dict[str, pa.DataType] = {}

    def prefer_types(self, numeric: Mapping[str, str]) -> None:
        """Columns the schema reads as numbers (Schema.numeric_columns): turns on the fast path."""
        self.numeric = {name: pa.type_for_alias(t) for name, t in numeric.items()}

    def _parse_options(self, handler: Any) -> pa_csv.ParseOptions:
        quoting = self.quote_char not in (None, False)
        return pa_csv.ParseOptions(
            delimiter=self.delimiter,
            quote_char=self.quote_char if quoting else False,
            newlines_in_values=quoting,
            ignore_empty_lines=False,  # keeps pyarrow's row numbers equal to line numbers
            invalid_row_handler=handler,
        )

    def _names(self, path: str) -> list[str]:
        """Column names: the `columns:` list, else the header row (read with a throwaway reader)."""
        if self.columns is not None:
            return list(self.columns)
        with open_file(path) as fh:
            reader = pa_csv.open_csv(
                fh,
                read_options=pa_csv.ReadOptions(skip_rows=self.skip_rows, use_threads=False),
                parse_options=self._parse_options(lambda row: "skip"),
            )
            return list(reader.schema.names)

    def read(self, path: str) -> Iterator[Block]:
        """Fast path first when the schema named numeric columns: pyarrow parses with all
        cores and converts those columns itself (1M benchmark rows: stage 1 1.6 s -> 1.1 s).
        The first malformed row, unparsable number or invalid UTF-8 makes it stop; the
        careful path then takes over after the records already delivered, so bad rows get
        their line numbers and the results are exactly the careful path's."""
        if not self.numeric:
            yield from self._read_careful(path)
            return
        delivered = 0  # records before this index are out
        try:
            for block in self._read_fast(path):
                yield block
                delivered = int(block.positions[-1]) + 1
        except pa.ArrowInvalid:
            yield from self._read_careful(path, skip=delivered)

    def _read_fast(self, path: str) -> Iterator[Block]:
        """Blocks of good rows; raises pa.ArrowInvalid at the first row it cannot take."""
        names = self._names(path)
        read_options = pa_csv.ReadOptions(
            use_threads=True,
            block_size=1 << 22,
            skip_rows=self.skip_rows,
            column_names=names if self.columns is not None else None,
            skip_rows_after_names=1 if (self.header and self.columns is not None) else 0,
        )
        convert = pa_csv.ConvertOptions(
            column_types={name: self.numeric.get(name, pa.binary()) for name in names},
            null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=True,
        )
        buffer = _Rows(names)
        cursor = 0
        with open_file(path) as fh:
            reader = pa_csv.open_csv(fh, read_options=read_options,
                                     parse_options=self._parse_options(None),
                                     convert_options=convert)
            for batch in reader:
                m = batch.num_rows
                positions = np.arange(cursor, cursor + m, dtype=np.int64)
                cursor += m
                blank = _blank_rows(batch)
                if blank is not None:
                    batch, positions = batch.filter(pa.array(~blank)), positions[~blank]
                buffer.add(batch, positions)
                while buffer.rows >= self.block_rows:
                    yield buffer.take(self.block_rows, path, None)
        while buffer.rows:
            yield buffer.take(self.block_rows, path, None)

    def _read_careful(self, path: str, skip: int = 0) -> Iterator[Block]:
        """Single-threaded, every column as text, bad rows reported with their line;
        records before `skip` (already delivered by the fast path) are left out."""
        for block in self._read_text(path):
            if skip and block.num_rows and block.positions[0] < skip:
                keep = np.asarray(block.positions) >= skip
                block = Block({k: v.filter(pa.array(keep)) for k, v in block.columns.items()},
                              np.asarray(block.positions)[keep], block.source, block.bad)
            if block.num_rows or block.bad:
                yield block

    def _read_text(self, path: str) -> Iterator[Block]:
        names = self._names(path)
        rejected: list[tuple[int, str]] = []  # (row number as pyarrow counts it, row text)

        def on_invalid(row: Any) -> str:
            rejected.append((row.number, row.text))
            return "skip"

        read_options = pa_csv.ReadOptions(
            use_threads=False,
            skip_rows=self.skip_rows,
            column_names=names if self.columns is not None else None,
            skip_rows_after_names=1 if (self.header and self.columns is not None) else 0,
        )
        convert = pa_csv.ConvertOptions(column_types={name: pa.binary() for name in names})
        header_rows = self.skip_rows + (1 if self.header else 0)
        lines = _LineTracker(header_rows + 1, header_rows, len(names), self.quote_char or "")
        buffer = _Rows(names)
        with open_file(path) as fh:
            reader = pa_csv.open_csv(
                fh, read_options=read_options, parse_options=self._parse_options(on_invalid),
                convert_options=convert,
            )
            for batch in reader:
                buffer.add(*lines.place(batch, rejected, path))
                rejected.clear()
                while buffer.rows >= self.block_rows:
                    yield buffer.take(self.block_rows, path, lines)
        lines.place(_empty(names), rejected, path, final=True)
        while buffer.rows or lines.bad:
            yield buffer.take(self.block_rows, path, lines)


class _Rows:
    """Good rows waiting to fill a block: parser batches follow byte sizes, blocks follow rows."""

    def __init__(self, names: list[str]):
        self.names = names
        self.batches: list[pa.RecordBatch] = []
        self.positions: list[np.ndarray] = []
        self.rows = 0

    def add(self, batch: pa.RecordBatch, positions: np.ndarray) -> None:
        if batch.num_rows:
            self.batches.append(batch)
            self.positions.append(positions)
            self.rows += batch.num_rows

    def take(self, n: int, path: str, lines: _LineTracker | None) -> Block:
        """The first `n` (or fewer) waiting rows as text columns, with the bad rows found so far."""
        table = pa.Table.from_batches(self.batches or [_empty(self.names)])
        positions = np.concatenate(self.positions or [np.zeros(0, np.int64)])
        head, rest = table.slice(0, n), table.slice(n)
        self.batches = rest.combine_chunks().to_batches() if rest.num_rows else []
        self.positions = [positions[n:]] if rest.num_rows else []
        self.rows = rest.num_rows
        columns = {n: _as_text(head.column(n).combine_chunks()) for n in self.names}
        bad: list[BadRecord] = []
        if lines is not None:
            bad, lines.bad = lines.bad, []
        return Block(columns=columns, positions=positions[:n], source=path, bad=bad)


def _as_text(col: pa.Array) -> pa.Array:
    """Binary cells as UTF-8 text (invalid UTF-8 raises ArrowInvalid); numbers stay numbers."""
    return col.cast(pa.string()) if pa.types.is_binary(col.type) else col


def _blank_rows(batch: pa.RecordBatch) -> np.ndarray | None:
    """Rows whose every field is empty (numbers: null), in a file of several columns; the
    careful path treats them as no record, so the fast path does too. None when none are."""
    if batch.num_columns < 2 or not batch.num_rows:
        return None
    blank = np.ones(batch.num_rows, bool)
    for col in batch.columns:
        if pa.types.is_binary(col.type):
            blank &= np.asarray(pc.binary_length(col).fill_null(0), np.int64) == 0
        else:
            blank &= np.asarray(col.is_null())
        if not blank.any():
            return None
    return blank


def _empty(names: list[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], pa.binary()) for _ in names], names=names)


class _LineTracker:
    """Turns pyarrow's row numbers into record indexes and 1-based physical line numbers.

    pyarrow numbers rows (1-based, counting skipped and header rows) but not lines: a quoted
    newline makes a row span several lines. Good rows' quoted newlines are counted per batch
    (vectorised) and rejected rows' in their text, so every bad row gets the line it starts on.
    Good rows get record indexes that leave gaps where the parser rejected rows, so positions
    stay the same whatever the block sizes.
    """

    def __init__(self, first_line: int, header_rows: int, expected: int, quote: str):
        self.first_line = first_line
        self.header_rows = header_rows
        self.expected = expected  # fields per row
        self.quote = quote  # "" when quoting is off
        self.cursor = 0  # record index right after the last good row placed so far
        self.newlines = 0  # quoted newlines in all records before `cursor`
        self.waiting: list[tuple[int, str]] = []  # rejected rows (record index, text) past cursor
        self.bad: list[BadRecord] = []

    def place(
        self, batch: pa.RecordBatch, rejected: list[tuple[int, str]], path: str, final: bool = False
    ) -> tuple[pa.RecordBatch, np.ndarray]:
        """Positions of a batch's good rows; rows with bad UTF-8 are dropped and reported.

        Rejected rows before the batch's last good row are settled now; `final` settles all.
        """
        self.waiting.extend((number - 1 - self.header_rows, text) for number, text in rejected)
        self.waiting.sort()
        waiting = np.array([r for r, _ in self.waiting], np.int64)
        m = batch.num_rows
        k = np.arange(m, dtype=np.int64)
        gaps = waiting - self.cursor - np.arange(len(waiting))  # good rows before each rejected
        positions = self.cursor + k + np.searchsorted(gaps, k, side="right")
        extra = np.zeros(m, np.int64)
        not_utf8 = np.zeros(m, bool)
        blank = np.full(m, len(batch.columns) > 1)
        for col in batch.columns:
            extra += np.asarray(pc.count_substring(col, "\n").fill_null(0), np.int64)
            not_utf8 |= utf8_bad_rows(col)
            blank &= np.asarray(pc.binary_length(col).fill_null(0), np.int64) == 0
        before = np.concatenate([[0], np.cumsum(extra)])  # quoted newlines of good rows before
        new_cursor = int(positions[-1]) + 1 if m else self.cursor
        if final:
            new_cursor = waiting[-1] + 1 if len(waiting) else new_cursor
        found: list[tuple[int, BadRecord]] = []
        rejected_extra = 0
        keep: list[tuple[int, str]] = []
        for record, text in self.waiting:
            if record >= new_cursor:
                keep.append((record, text))
                continue
            good_before = int(before[np.searchsorted(positions, record)])
            line = self.first_line + record + self.newlines + good_before + rejected_extra
            rejected_extra += text.count("\n")
            found.append((record, self._malformed(path, line, text)))
        for i in np.flatnonzero(not_utf8).tolist():
            record = int(positions[i])
            earlier = sum(t.count("\n") for r, t in self.waiting if r < record)
            line = self.first_line + record + self.newlines + int(before[i]) + earlier
            raw = b"|".join(b"" if c[i].as_py() is None else c[i].as_py() for c in batch.columns)
            found.append((record, BadRecord(path, line, f"line {line}: not valid UTF-8 text",
                                            raw=excerpt(raw))))
        self.bad.extend(b for _, b in sorted(found, key=lambda f: f[0]))
        self.newlines += int(before[-1]) + rejected_extra
        self.waiting = keep
        self.cursor = new_cursor
        if not_utf8.any() or blank.any():
            good = ~not_utf8 & ~blank
            batch = batch.filter(pa.array(good))
            positions = positions[good]
        return batch, positions

    def _malformed(self, path: str, line: int, text: str) -> BadRecord:
        if self.quote and text.count(self.quote) % 2:
            reason = (f"line {line}: unbalanced quote (the field runs on to the end of the row "
                      f"or file)")
        else:
            reason = f"line {line}: wrong number of fields (expected {self.expected})"
        return BadRecord(path, line, reason, raw=excerpt(text))
