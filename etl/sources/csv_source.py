"""CSV files through pyarrow, every column as text (or, on the fast path, the schema's numbers).

Columns are read as strings (never inferred) so two blocks of one file can never disagree on a
type: the encoder parses numbers against the schema. Good rows carry `Block.lines`, the 1-based
physical line each starts on (quoted newlines of earlier rows, the header and `skip_rows`
counted, so it matches what an editor shows; `skip_rows` and the header are one line each).

Bad rows never stop a file, and never take good neighbours down with them:
- a row with the wrong number of fields on one line: `wrong_field_count`, that line;
- a row that runs over several lines and is bad (a quote that opens a field and is not closed
  where the row should end): the row's FIRST line is rejected, as `unterminated_quote` when that
  line holds an odd number of quote characters, else `wrong_field_count`, and parsing resumes
  at the NEXT physical line: the lines the bad row ran over are parsed again as rows of their
  own (a later bad quote among them is handled the same way). pyarrow itself accepts a quote
  left open at the end of the data as a value running to the end; a sentinel row appended
  after the data tells that case apart, so it is rejected the same way. So 1,000 rows with one
  unterminated quote give 999 good rows and 1 rejected record, on the right line. A quote that
  a later line happens to close makes one valid (multi-line) value; the encoder judges it.
- a row with bytes that are not UTF-8: `not_utf8` (cells are checked per column, so only the
  offending rows are rejected);
- a physical line longer than `max_record_bytes` (default 64 MiB, set by `prepare`):
  `oversized_record`, one record; it is skipped while the raw bytes stream past (never held
  whole) and the parser sees a line break there (a quoted row it was part of ends before it).
  A quoted field still open after `max_record_bytes` of lines is rejected like an unterminated
  quote at its first line.
Memory stays bounded by about one 16 MiB region plus `max_record_bytes`.

Every row is one record; a good row's position is the 0-based physical line index of its first
line, counted from the first line after `skip_rows` and the header (so without quoted newlines
it is the row index, blank and rejected rows counted). Positions are unique (no two records
start on one line) and never depend on how the file is split or on what came before, so fixing
one bad row never renumbers the others. Blank lines are no records in a file of more than one
column (a row whose every field is empty is taken for one); they only use up their line.

Splits (`splits`, `read_split`): byte ranges cut only at line starts where the sequential
reader is provably at a record start (`_QuoteScan`); the first split holds `skip_rows` and the
header, the others get the column names and the number of lines before them. A split then gives
exactly the records, positions, lines and bad records the whole-file read gives for its lines.
gzip files are one split.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from etl.base.errors import BadInputError, BadRecord, ConfigError
from etl.sources import csv_compiled
from etl.sources.base import (
    Block,
    Split,
    position,
)
from etl.sources.encoding import Transcoded, text_encoding, transcode
from etl.sources.file_source import (
    FileSource,
    bool_option,
    excerpt,
    int_option,
    mark_nulls,
    null_values_option,
    utf8_bad_rows,
)
from etl.sources.lines import (
    LineRange,
    bounded_line,
    line_splits,
    next_line_start,
    skip_line,
    split_lines,
)
from etl.storage import fs


# ---- the CSV reader ----------------------------------------------------------------------------
class CsvReader(FileSource):
    """`format: csv`; options: delimiter, quote_char, header, columns, skip_rows, block_rows,
    encoding, null_values (the dialect keys: docs/bad-input.md, "CSV dialect")."""

    OPTIONS = {"delimiter", "quote_char", "header", "columns", "skip_rows", "block_rows",
               "encoding", "null_values"}
    # Arrow's streaming reader decodes a split's columns on one thread: a worker with one file
    # reads its halves at once (etl.sources.base.Source); the only state kept is `_known`
    READS_IN_STREAMS = True
    FAST_BLOCK_BYTES = 1 << 22  # what the fast path reads at a time (Arrow's block, our chunk)

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
        if self.columns is not None and len(set(self.columns)) < len(self.columns):
            twice = sorted({c for c in self.columns if self.columns.count(c) > 1})
            raise ConfigError(f"{where}: 'columns' names {twice} more than once; give every "
                              f"column its own name")
        self.skip_rows = int_option(opts, "skip_rows", 0, where)
        self.encoding, self.codec = text_encoding(opts, where, self.delimiter, self._quote)
        self.null_values = null_values_option(opts, [""], where)
        self.numeric: dict[str, pa.DataType] = {}
        self._known: dict[str, list[str]] = {}  # path -> its column names (read once)

    def prepare(self, schema: Any, max_record_bytes: int) -> None:
        """Columns the schema reads as numbers (`schema.numeric_columns()`) turn on the fast
        path; a physical line over `max_record_bytes` is rejected as `oversized_record`."""
        super().prepare(schema, max_record_bytes)
        self.numeric = {name: pa.type_for_alias(t) for name, t in schema.numeric_columns().items()}

    @property
    def _quote(self) -> str:
        return self.quote_char if self.quote_char not in (None, False) else ""

    @property
    def _header_lines(self) -> int:
        return self.skip_rows + (1 if self.header else 0)

    def _sentinel(self, columns: int) -> bytes:
        """A row appended after the data: on its own it is `"0",,…` (recognised and dropped);
        after a row still inside an open quote, its first quote closes that row, which then
        ends in `0"`. pyarrow takes a quote left open at the end of the data as a good value
        that runs to the end, so this is how a row running off the end is told apart."""
        if not self._quote:
            return b""
        return (self._quote + "0" + self._quote + self.delimiter * (columns - 1) + "\n").encode()

    def _parse_options(self, handler: Any) -> pa_csv.ParseOptions:
        quoting = bool(self._quote)
        return pa_csv.ParseOptions(
            delimiter=self.delimiter,
            quote_char=self.quote_char if quoting else False,
            newlines_in_values=quoting,
            ignore_empty_lines=False,  # keeps pyarrow's row numbers equal to line numbers
            invalid_row_handler=handler,
        )

    def _names(self, path: str) -> list[str]:
        """Column names: the `columns:` list, else the header line (the line after `skip_rows`,
        parsed on its own: a bad row further on must not stop the names being read), else
        (`header: false`) `column_0, column_1, ...`, as many as the first line has fields.
        Header names that cannot name features are refused here (`_check_names`)."""
        if self.columns is not None:
            return list(self.columns)
        if path in self._known:
            return self._known[path]
        limit = self.max_record_bytes
        what = "header" if self.header else "first line"
        with fs.open_read(path) as raw, (gzip.GzipFile(fileobj=raw) if path.endswith(".gz")
                                      else contextlib.nullcontext(raw)) as fh:
            for _ in range(self.skip_rows):
                skip_line(fh)  # streamed past: a skipped line may be of any length
            header, whole = bounded_line(fh, limit)
            more = whole and bool(fh.read(1))
        if not whole:
            hint = ("is this a CSV file?" if self.header
                    else "name the columns with 'columns:' so it need not be read")
            raise BadInputError(f"{self.where}: {path}: line {self.skip_rows + 1}, the {what}, "
                                f"has no line break in its first {limit:,} bytes "
                                f"(max_record_bytes), so its columns cannot be read: {hint}")
        header = header.rstrip(b"\r\n")
        if not header.strip() and more:
            raise ConfigError(f"{self.where}: {path}: line {self.skip_rows + 1}, the {what}, is "
                              f"blank: set skip_rows: {self.skip_rows + 1} to skip it")
        if self.codec:
            header = transcode(header, self.codec)
        try:  # one block holds the whole line, however long (pyarrow's default is 1 MiB)
            reader = pa_csv.open_csv(
                pa.BufferReader(header + b"\n"),
                read_options=pa_csv.ReadOptions(use_threads=False,
                                                block_size=max(1 << 20, len(header) + 2)),
                parse_options=self._parse_options(None),
            )
        except pa.ArrowInvalid as e:
            raise BadInputError(f"{self.where}: {path}: line {self.skip_rows + 1}, the {what}, "
                                f"cannot be read as CSV: {str(e).strip().splitlines()[0]}") from e
        names = list(reader.schema.names)
        if self.header and more:  # (an empty file has no records: the run says so)
            _check_names(names, f"{self.where}: {path}", self.delimiter)
        else:
            names = [f"column_{i}" for i in range(len(names))]
        self._known[path] = names
        return names

    def data_start(self, path: str) -> int:
        """Byte offset of the first data line (after `skip_rows` and the header line)."""
        with fs.open_read(path) as fh:
            return self._skip_header(fh)

    def _skip_header(self, fh: Any) -> int:
        """`fh` moved from the file's start past `skip_rows` and the header; its position."""
        fh.seek(0)
        for _ in range(self._header_lines):
            if not skip_line(fh):
                break
        return fh.tell()

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        """Byte ranges cut only at line starts the quote scan proves are record starts for
        this reader (see `_record_start`); the first split holds `skip_rows` and the header.
        gzip: one split."""

        self._names(path)  # a header that names no usable columns is refused at launch
        if path.endswith(".gz"):
            return [Split(path)]
        begin = self.data_start(path)
        if not self._quote:
            return line_splits(path, target_bytes, begin)
        prove = _QuoteScan(self._quote.encode(), self.delimiter.encode())
        return line_splits(path, target_bytes, begin, prove.boundary)

    def read_split(self, split: Split) -> Iterator[Block]:
        """Fast path first when the schema named numeric columns: pyarrow parses with all
        cores and converts those columns itself (1M benchmark rows: stage 1 1.6 s -> 1.1 s).
        The first malformed row, unparsable number, invalid UTF-8, over-long line or quote
        left open at the end makes it stop; the careful path then takes over after the
        records already delivered, so the results are exactly the careful path's."""
        if not self.numeric or split.path.endswith(".gz"):  # pyarrow gets the file's raw bytes
            yield from self._read_careful(split)
            return
        delivered = 0  # records before this position are out
        try:
            for block in self._read_fast(split):
                yield block
                delivered = int(block.positions[-1]) + 1
        except pa.ArrowInvalid:
            yield from self._read_careful(split, skip=delivered)

    def _read_fast(self, split: Split) -> Iterator[Block]:
        """Blocks of good rows; raises pa.ArrowInvalid at the first row it cannot take."""
        path = split.path
        names = self._names(path)
        first = split.first
        read_options, convert = self._fast_options(names, first)
        buffer = _Rows(names, self.null_values)
        cursor = 0  # record index of the next row
        first_line = (self._header_lines if first else split.first_line) + 1
        sentinel = self._sentinel(len(names))
        with fs.open_read(path) as fh:
            reader = self._fast_batches(fh, split, sentinel, read_options, convert, names)
            last: pa.RecordBatch | None = None  # the last non-empty batch
            # progress: the reader reads far ahead of the batches it hands out, but each batch
            # is one block of `block_size` input bytes (the last one less)
            begin, parsed = (0 if split.whole else split.start), 0
            # a row of the loop's holds a number in each number column: none is blank
            plain_has_no_blank = bool(self.numeric.keys() & set(names))
            for batch, plain in reader:
                parsed += read_options.block_size
                m = batch.num_rows
                if not plain and _any_newline(batch):  # quoted: the careful path checks quotes
                    raise _RunsOff("a quoted value runs over several lines")
                if not plain and _any_nonfinite(batch):  # "1e400", "inf": both parse as inf
                    raise _RunsOff("a number that is not finite")
                lines = first_line + np.arange(cursor, cursor + m, dtype=np.int64)
                positions = lines - self._header_lines - 1
                cursor += m
                if self.max_record_bytes < read_options.block_size and _longest(batch) * 2 > \
                        self.max_record_bytes:  # maybe over the limit: the careful path decides
                    raise _RunsOff("a row near max_record_bytes")
                blank = None if plain and plain_has_no_blank else _blank_rows(batch)
                if blank is not None:
                    keep = ~blank
                    batch, positions, lines = batch.filter(pa.array(keep)), positions[keep], lines[keep]
                buffer.add(batch, positions, lines)
                last = batch if batch.num_rows else last
                while buffer.rows > self.block_rows:  # the last row may be the sentinel: keep it
                    yield _ending(buffer.take(self.block_rows, path, []),
                                  _upto(begin + parsed, _tell(fh, path)))
            end = _tell(fh, path)
        if sentinel:  # the file's last row is followed by the sentinel row, unless it runs off
            if last is None or not _is_sentinel(last, last.num_rows - 1):
                raise _RunsOff("a quoted field is still open at the end of the file")
            buffer.drop_last()
        while buffer.rows:
            yield _ending(buffer.take(self.block_rows, path, []), end)

    def _fast_options(self, names: list[str],
                      first: bool) -> tuple[pa_csv.ReadOptions, pa_csv.ConvertOptions]:
        """Arrow's read and convert options for a split (`first`: the file's first split)."""
        read_options = pa_csv.ReadOptions(
            use_threads=True,
            block_size=self.FAST_BLOCK_BYTES,
            skip_rows=self.skip_rows if first else 0,
            column_names=names if (self.columns is not None or not first or not self.header)
            else None,
            skip_rows_after_names=1 if (first and self.header and self.columns is not None) else 0,
        )
        # numbers: a marker (and "", which the encoder reads as missing anyway) is null; text
        # cells stay bytes here and `_Rows.take` nulls the markers among them
        convert = pa_csv.ConvertOptions(
            column_types={name: self.numeric.get(name, pa.binary()) for name in names},
            null_values=list(dict.fromkeys(["", *self.null_values])),
            strings_can_be_null=False, quoted_strings_can_be_null=True,
        )
        return read_options, convert

    def _fast_batches(self, fh: Any, split: Split, sentinel: bytes,
                      read_options: pa_csv.ReadOptions, convert: pa_csv.ConvertOptions,
                      names: list[str]) -> Iterator[tuple[pa.RecordBatch, bool]]:
        """The split's (batch, plain) pairs: from its first data line in chunks, each through
        the compiled loop or Arrow (etl.sources.csv_compiled.read_chunks), when the rows
        before that line are plain lines (no quote, no carriage return: Arrow's rows are then
        lines); else, and for other encodings, Arrow's streaming reader over the whole split
        (`_open_fast`), every batch not plain."""
        start = None if self.codec else self._plain_start(fh, split)
        if start is None:
            for batch in self._open_fast(fh, split, sentinel, read_options, convert):
                yield batch, False
            return
        fh.seek(start)
        data = LineRange(fh, None if split.stop is None else split.stop - start)

        def arrow(handle: Any, threads: bool) -> pa_csv.CSVStreamingReader:
            return pa_csv.open_csv(handle, read_options=pa_csv.ReadOptions(
                use_threads=threads, block_size=read_options.block_size, column_names=names),
                parse_options=self._parse_options(None), convert_options=convert)

        def tail(carry: bytes) -> Iterator[pa.RecordBatch]:
            if sentinel or carry:
                yield from arrow(_WithTail(io.BytesIO(carry), sentinel), False)

        yield from csv_compiled.read_chunks(
            data, read_options.block_size, self._quote.encode(),
            parser=lambda: self._chunk_parser(names),
            alone=lambda chunk: arrow(pa.BufferReader(pa.py_buffer(chunk)), False),
            rest=lambda head, more: arrow(_WithTail(_Prefixed(head, more), sentinel), True),
            tail=tail)

    def _plain_start(self, fh: Any, split: Split) -> int | None:
        """Where the split's data lines start; for the file's first split, None unless the
        lines skipped before them (`skip_rows`, the header) hold no quote and no carriage
        return, so that Arrow would skip exactly those lines, and the data after them does not
        start with a BOM (Arrow keeps one there, and drops one at the start of what it reads)."""
        if not split.first:
            return split.start
        start = self._skip_header(fh)
        fh.seek(0)
        head = fh.read(start + len(csv_compiled.BOM))
        fh.seek(0)  # where Arrow's streaming reader of the whole file starts, if it is used
        if b"\r" in head[:start] or (self._quote and self._quote.encode() in head[:start]):
            return None
        if start and head[start:].startswith(csv_compiled.BOM):
            return None
        return start

    def compile_ahead(self, path: str) -> None:
        """The chunk loop for the file's columns, where the fast path will ask for it (a file
        of two blocks or more, read as is): it then need not wait ~0.3 s for the compile."""
        if (self.numeric and not self.codec and not path.endswith(".gz")
                and fs.size(path) >= 2 * self.FAST_BLOCK_BYTES):
            self._chunk_parser(self._names(path))

    def _chunk_parser(self, names: list[str]) -> csv_compiled.ChunkParser | None:
        """The compiled loop for these columns, or None: a null marker the loop would read as
        a number (Arrow reads it as null), or no loop for these types here."""
        if any(csv_compiled.PLAIN_NUMBER.fullmatch(v) for v in self.null_values):
            return None
        types = [self.numeric.get(name, pa.binary()) for name in names]
        return csv_compiled.chunk_parser(names, types, self.delimiter, self._quote)

    def _open_fast(self, fh: Any, split: Split, sentinel: bytes,
                   read_options: pa_csv.ReadOptions,
                   convert: pa_csv.ConvertOptions) -> pa_csv.CSVStreamingReader:
        """Arrow's streaming reader over the split's bytes (decoded to UTF-8 when the file is
        in another encoding), the sentinel row after them when there is one."""
        data: Any = fh
        if not split.whole:
            fh.seek(split.start)
            data = LineRange(fh, None if split.stop is None else split.stop - split.start)
        if self.codec:
            data = Transcoded(data, self.codec)
        return pa_csv.open_csv(_WithTail(data, sentinel) if sentinel else data,
                               read_options=read_options,
                               parse_options=self._parse_options(None),
                               convert_options=convert)

    def _read_careful(self, split: Split, skip: int = 0) -> Iterator[Block]:
        """Single-threaded, every column as text, bad rows reported with their line;
        records before position `skip` (already delivered by the fast path) are left out."""
        for block in self._read_text(split):
            if skip and block.num_rows and block.positions[0] < skip:
                keep = np.asarray(block.positions) >= skip
                block = Block({k: v.filter(pa.array(keep)) for k, v in block.columns.items()},
                              np.asarray(block.positions)[keep], block.source, block.bad,
                              lines=np.asarray(block.lines)[keep])
            if block.num_rows or block.bad:
                yield block

    def _read_text(self, split: Split) -> Iterator[Block]:
        """The file in regions of whole lines (one chunk of the line scan, plus the lines of a
        row still open at the end of the last region), each parsed by `_Careful`."""

        path = split.path
        names = self._names(path)
        limit = self.max_record_bytes
        parser = _Careful(self, names, path)
        buffer = _Rows(names, self.null_values)
        skip = self._header_lines if split.first else 0
        carry, carry_line = b"", 0  # lines of a row that was still open at the end of a region
        run = None  # the last run of lines (Block.end_offset: how far the scan got)
        for run in split_lines(split, limit):
            start = min(skip, run.count)
            skip -= start
            cuts = sorted(i for i in run.oversized if i >= start)
            for cut in [*cuts, None]:
                stop = run.count if cut is None else cut
                if stop > start:
                    data = run.data[run.bounds[start] : run.bounds[stop]]
                    first = carry_line if carry else run.first + start + 1
                    buf = carry + data if carry else data
                    carry, carry_line = parser.region(buf, first, final=False)
                    if len(carry) > limit:  # open too long: no record may be that big
                        parser.region(carry, carry_line, final=True)
                        carry = b""
                if cut is not None:  # an over-long line ends the region (and any open row)
                    if carry:
                        parser.region(carry, carry_line, final=True)
                        carry = b""
                    parser.oversized(run.first + cut + 1, run.oversized[cut])
                    start = cut + 1
            for item in parser.take():
                buffer.add(*item)
            while buffer.rows >= self.block_rows:
                block = buffer.take(self.block_rows, path, parser.take_bad())
                yield _ending(block, _row_end(run, block, path))
        end = None if run is None else run.file_offset(run.end_byte, path)
        if carry:
            parser.region(carry, carry_line, final=True)
        for item in parser.take():
            buffer.add(*item)
        while buffer.rows or parser.bad:
            yield _ending(buffer.take(self.block_rows, path, parser.take_bad()), end)


def _row_end(run: Any, block: Block, path: str) -> int | None:
    """Block.end_offset of a careful-path block taken while `run` (an etl.sources.lines.LineRun) is
    parsed: the end of the line its last row starts on, in the file's own bytes (gzip:
    compressed, pro rata within the run's read), so a run of many blocks moves progress
    block by block."""
    if block.lines is None or not len(block.lines):
        return run.file_offset(run.end_byte, path)
    i = min(max(int(block.lines[-1]) - 1 - run.first, -1), run.count - 1)
    return run.file_offset(run.end_byte - int(run.bounds[-1] - run.bounds[i + 1]), path)


def _tell(fh: Any, path: str) -> int | None:
    """How far the parser has read the file (its read-ahead included); None for gzip."""
    return None if path.endswith(".gz") else position(fh)


def _upto(estimate: int, told: int | None) -> int | None:
    return None if told is None else min(estimate, told)


def _ending(block: Block, end_offset: int | None) -> Block:
    block.end_offset = end_offset
    return block


def _check_names(names: list[str], where: str, delimiter: str) -> None:
    """Column names must name features: none empty, none twice, and a header of one column
    holding another delimiter is a file read with the wrong one. One-line ConfigErrors, each
    naming the columns (1-based) and the key that fixes it."""
    empty = [i + 1 for i, n in enumerate(names) if n == ""]
    if empty and empty[-1] == len(names) and len(names) > 1:
        raise ConfigError(
            f"{where}: the header ends with the delimiter, so column {len(names)} has no name "
            f"(every line ends with {delimiter!r}?): name every column with 'columns:' (the "
            f"last one e.g. '_trailing'), or remove the trailing delimiter from the file")
    if empty:
        raise ConfigError(f"{where}: column(s) {empty} of the header have no name: name every "
                          f"column with 'columns:' (the header line is then skipped)")
    seen: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        seen.setdefault(n, []).append(i + 1)
    twice = {n: at for n, at in seen.items() if len(at) > 1}
    if twice:
        said = ", ".join(f"{n!r} (columns {', '.join(map(str, at))})" for n, at in twice.items())
        raise ConfigError(
            f"{where}: duplicate column names {said}: rename them with 'columns:' (a name per "
            f"column; the header line is then skipped), or set 'header: false' if the first "
            f"line is data")
    if len(names) == 1 and delimiter:
        counts = {d: names[0].count(d) for d in (",", ";", "\t", "|") if d != delimiter}
        best = max(counts, key=lambda d: counts[d])
        if counts[best]:
            shown = "\\t" if best == "\t" else best
            raise ConfigError(
                f"{where}: the header is one column {excerpt(names[0], 60)!r} holding "
                f"{counts[best]} {best!r}: it looks like {best!r}-separated: set "
                f"delimiter: '{shown}' (or, if it is one column, name it with 'columns:')")


class _RunsOff(pa.ArrowInvalid):
    """The fast path's last row is still inside a quote at the end of the file."""


class _WithTail:
    """A read handle that gives `tail` after the file's own bytes (after a newline, if the
    file does not end with one): how the fast path appends the sentinel row."""

    def __init__(self, fh: Any, tail: bytes):
        self.fh, self.tail, self.last, self.closed = fh, tail, b"\n", False

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        if data:
            self.last = data[-1:]
            return data
        tail, self.tail = self.tail, b""
        return (b"\n" if tail and self.last not in (b"\n", b"\r") else b"") + tail

    def close(self) -> None:
        self.closed = True


class _Prefixed:
    """A read handle that gives `head`, then what `fh` has left."""

    def __init__(self, head: bytes, fh: Any):
        self.head, self.fh, self.closed = head, fh, False

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if not self.head:
            return self.fh.read(n)
        if n < 0:
            head, self.head = self.head, b""
            return head + self.fh.read()
        head, self.head = self.head[:n], self.head[n:]
        return head

    def close(self) -> None:
        self.closed = True


def _is_sentinel(batch: pa.RecordBatch, row: int) -> bool:
    """Whether a row is exactly the sentinel `"0",,…` (numbers converted, text as bytes)."""
    values = [c[row].as_py() for c in batch.columns]
    return values[0] in (b"0", 0) and all(v in (None, b"") for v in values[1:])


def _longest(batch: pa.RecordBatch) -> int:
    """Bytes of text in the longest row (numbers not counted)."""
    size = np.zeros(batch.num_rows, np.int64)
    for col in batch.columns:
        if pa.types.is_binary(col.type):
            size += np.asarray(pc.binary_length(col).fill_null(0), np.int64)
    return int(size.max()) if batch.num_rows else 0


def _any_nonfinite(batch: pa.RecordBatch) -> bool:
    """Whether a float column may hold an inf or NaN: its sum is not finite (a sum that
    overflows also says yes, which only costs the careful path). Arrow parses both a text
    beyond the type's range and "inf" as inf; only the careful path sees which it was."""
    for col in batch.columns:
        if pa.types.is_floating(col.type) and col.null_count < len(col):
            total = pc.sum(col).as_py()
            if total is not None and not np.isfinite(total):
                return True
    return False


def _any_newline(batch: pa.RecordBatch) -> bool:
    """Whether a text value of the batch holds a newline (a quoted one: the row runs over
    several lines). One memchr over each text column's value bytes: ~0.4 ns a row, where
    counting them per row (_newlines) took ~9 and a fresh array per column."""
    for col in batch.columns:
        if pa.types.is_binary(col.type) or pa.types.is_string(col.type):
            wide = False
        elif pa.types.is_large_binary(col.type) or pa.types.is_large_string(col.type):
            wide = True
        else:
            continue
        _, offsets, data = col.buffers()
        if data is None or not len(col):
            continue
        ends = np.frombuffer(offsets, np.int64 if wide else np.int32, len(col) + 1,
                             col.offset * (8 if wide else 4))
        if memoryview(data)[int(ends[0]):int(ends[-1])].tobytes().find(b"\n") >= 0:
            return True
    return False


def _newlines(batch: pa.RecordBatch) -> np.ndarray:
    """Quoted newlines in each row (a row spans that many lines more than one)."""
    extra = np.zeros(batch.num_rows, np.int64)
    for col in batch.columns:
        if pa.types.is_binary(col.type) or pa.types.is_string(col.type):
            extra += np.asarray(pc.count_substring(col, "\n").fill_null(0), np.int64)
    return extra


class _Careful:
    """Parses regions of whole lines one at a time with pyarrow (single-threaded, text
    columns) and applies the recovery rule of the module docstring.

    Every row is one record: `record` counts them in file order (good, rejected and blank
    rows alike), so a row's position never depends on where the regions or blocks fall.
    """

    def __init__(self, reader: CsvReader, names: list[str], path: str):
        self.names = names
        self.path = path
        self.quote = reader._quote.encode()
        self.delimiter = reader.delimiter
        self.sentinel = reader._sentinel(len(names))
        self.parse_options = reader._parse_options
        self.limit = reader.max_record_bytes
        self.record = 0
        self.header_lines = reader._header_lines
        self.codec = reader.codec
        self.not_text = (f"not valid {reader.encoding} text" if self.codec else
                         "not valid UTF-8 text (a file in another encoding: set encoding:, "
                         "e.g. cp1252 or latin-1)")
        self.good: list[tuple[pa.RecordBatch, np.ndarray, np.ndarray]] = []
        self.bad: list[BadRecord] = []

    def take(self) -> list[tuple[pa.RecordBatch, np.ndarray, np.ndarray]]:
        good, self.good = self.good, []
        return good

    def take_bad(self) -> list[BadRecord]:
        bad, self.bad = self.bad, []
        return bad

    def oversized(self, line: int, size: int) -> None:
        self.bad.append(BadRecord(
            self.path, "oversized_record",
            f"line of {size} bytes is over max_record_bytes ({self.limit}); skipped unread",
            line=line))
        self.record += 1

    def _parse(self, data: bytes) -> tuple[pa.Table, list[tuple[int, str, int]]]:
        rejected: list[tuple[int, str, int]] = []  # (0-based row, text, fields found)

        def on_invalid(row: Any) -> str:
            rejected.append((row.number - 1, row.text, row.actual_columns))
            return "skip"

        if self.codec:  # same lines, same line breaks: ASCII-compatible codecs only
            data = transcode(data, self.codec)
        table = pa_csv.read_csv(
            pa.BufferReader(data),
            read_options=pa_csv.ReadOptions(use_threads=False, column_names=self.names,
                                            block_size=len(data) + 1),
            parse_options=self.parse_options(on_invalid),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.binary() for name in self.names}),
        )
        return table, rejected

    def region(self, buf: bytes, first_line: int, final: bool, depth: int = 0) -> tuple[bytes, int]:
        """Parse `buf` (whole lines, the first is line `first_line`). When not `final` and
        its last row is still inside a quote at the end, that row is left out: its lines
        come back (with their first line number) to be parsed again with the next lines."""
        while buf:
            kind, buf, first_line = self._region_once(buf, first_line, final, depth)
            if kind == "carry":
                return buf, first_line
        return b"", 0

    def _region_once(self, buf: bytes, first_line: int, final: bool,
                     depth: int) -> tuple[str, bytes, int]:
        """One parse of `buf`: ("done", b"", 0), ("carry", lines of an open last row, their
        first line) or ("again", lines to parse next, their first line) after a bad row whose
        re-parsed lines still end inside a quote."""
        data = buf if buf.endswith(b"\n") else buf + b"\n"
        table, rejected, rej, good_rows, extra, total, runs_off = self._parse_region(data)
        starts = first_line + np.arange(total) + np.cumsum(extra) - extra
        found = dict(zip(rej.tolist(), [(t, f) for _, t, f in rejected], strict=True))
        breaks = [r for r in rej.tolist() if extra[r] > 0 and r < total]
        if not (breaks or runs_off or extra.any()):  # no row over several lines: all done
            self._rows(table, good_rows, found, starts, 0, total)
            return "done", b"", 0
        line_at = np.concatenate([[0], np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1])
        breaks = sorted(breaks + self._malformed(data, line_at, starts - first_line, extra,
                                                 good_rows[good_rows < total - runs_off]))
        if runs_off:
            breaks = [r for r in breaks if r < total - 1] + [total - 1]
        done = 0
        for r in breaks:
            self._rows(table, good_rows, found, starts, done, r)
            i = int(starts[r]) - first_line  # the bad row's first line, in buf
            last = r == total - 1 and runs_off
            if last and not final:
                return "carry", buf[line_at[i] :], int(starts[r])
            text = data[line_at[i] : line_at[i + 1]]
            code, reason = self._bad_row_reason(text, last and len(data) > self.limit,
                                                found.get(r, ('', '?'))[1])
            self.bad.append(BadRecord(self.path, code, reason, line=int(starts[r]),
                                      raw=excerpt(text.rstrip(b"\r\n"))))
            self.record += 1
            # the lines the bad row ran over are parsed again, as rows of their own
            if last:
                return "again", data[line_at[i + 1] :], int(starts[r]) + 1
            end = i + int(extra[r]) + 1
            sub = data[line_at[i + 1] : line_at[end]]
            if depth < 32:
                carry, line = self.region(sub, int(starts[r]) + 1, final=False, depth=depth + 1)
                if carry:  # a row there runs on past the bad row's end: parse on through buf
                    return "again", carry + data[line_at[end] :], line
            else:  # nested bad quotes: line by line, so the nesting stops here
                for k in range(i + 1, end):
                    self.region(data[line_at[k] : line_at[k + 1]], first_line + k, final=True,
                                depth=depth + 1)
            done = r + 1
        self._rows(table, good_rows, found, starts, done, total)
        return "done", b"", 0

    def _parse_region(self, data: bytes) -> tuple[pa.Table, list[tuple[int, str, int]], np.ndarray,
                                                  np.ndarray, np.ndarray, int, bool]:
        """`data` parsed (the sentinel row after it, when there is one): the table, the
        rejected rows and their numbers, the good rows' numbers, each row's extra lines (a
        row over n lines: n - 1), the number of rows, and whether the last row runs off the
        end (a quote still open there swallowed the sentinel)."""
        table, rejected = self._parse(data + self.sentinel)
        total = table.num_rows + len(rejected)
        rej = np.array([r for r, _, _ in rejected], np.int64)
        is_good = np.ones(total, bool)
        is_good[rej] = False
        good_rows = np.flatnonzero(is_good)
        extra = np.zeros(total, np.int64)
        if total != data.count(b"\n") + bool(self.sentinel):  # else every row is one line
            extra[good_rows] = _newlines(table.combine_chunks().to_batches()[0]) if table.num_rows else 0
        extra[rej] = [text.count("\n") for _, text, _ in rejected]
        runs_off = False
        if self.sentinel:
            if is_good[-1] and _is_sentinel(table.slice(table.num_rows - 1).combine_chunks()
                                            .to_batches()[0], 0):
                total -= 1
                table, good_rows, extra = table.slice(0, total), good_rows[:-1], extra[:-1]
            else:
                runs_off = True
        return table, rejected, rej, good_rows, extra, total, runs_off

    def _bad_row_reason(self, text: bytes, over_limit: bool, fields: Any) -> tuple[str, str]:
        """The code and reason of a bad row over several lines: still open after
        max_record_bytes, an unbalanced quote, or a wrong number of fields."""
        if over_limit:
            return ("unterminated_quote",
                    f"quoted field still open after max_record_bytes ({self.limit}) "
                    f"bytes; parsing resumes at the next line")
        if text.count(self.quote) % 2:
            return ("unterminated_quote",
                    "unbalanced quote (the field runs on over the next lines); "
                    "parsing resumes at the next line")
        return ("wrong_field_count",
                f"wrong number of fields (expected {len(self.names)}, found "
                f"{fields} in a row over several lines); "
                f"parsing resumes at the next line")

    def _malformed(self, data: bytes, line_at: np.ndarray, first: np.ndarray, extra: np.ndarray,
                   good_rows: np.ndarray) -> list[int]:
        """Good rows over several lines that are not one strict CSV row: pyarrow takes a quote
        left open and closed by a later field's quote (`"a\\n1,"b",2`) as one value `a\\n1,b"`.
        Only rows with quoted newlines are checked (Python's csv module, strict)."""
        multi = good_rows[extra[good_rows] > 0]
        if not len(multi) or not self.quote:
            return []
        begin = line_at[first[multi]]
        end = line_at[first[multi] + extra[multi] + 1]
        bad = []
        for r, a, b in zip(multi.tolist(), begin.tolist(), end.tolist(), strict=True):
            try:
                rows = list(csv.reader(io.StringIO(data[a:b].decode("latin-1"), newline=""),
                                       delimiter=self.delimiter, quotechar=self.quote.decode(),
                                       strict=True))
            except csv.Error:
                rows = []
            if len(rows) != 1 or len(rows[0]) != len(self.names):
                bad.append(r)
        return bad

    def _rows(self, table: pa.Table, good_rows: np.ndarray, found: dict[int, tuple[str, int]],
              starts: np.ndarray, a: int, b: int) -> None:
        """Rows a..b-1 of a parse, none of them spanning lines when rejected: the good ones
        go out (blank ones dropped, non-UTF-8 ones rejected), the others are rejected."""
        if b <= a:
            return
        for r in [r for r in found if a <= r < b]:
            text, fields = found[r]
            self.bad.append(BadRecord(
                self.path, "wrong_field_count",
                f"wrong number of fields (expected {len(self.names)}, found {fields})",
                line=int(starts[r]), raw=excerpt(text)))
        lo, hi = np.searchsorted(good_rows, [a, b])
        if hi > lo:
            batch = table.slice(int(lo), int(hi - lo)).combine_chunks().to_batches()
            batch = batch[0] if batch else _empty(self.names)
            rows = good_rows[lo:hi]
            lines = starts[rows]
            positions = lines - self.header_lines - 1
            not_utf8 = np.zeros(len(rows), bool)
            blank = np.full(len(rows), len(self.names) > 1)
            text = []
            for col in batch.columns:
                try:  # checked once, here: the block's text columns are these strings
                    text.append(col.cast(pa.string()))
                except pa.ArrowInvalid:
                    not_utf8 |= utf8_bad_rows(col)
                    text.append(col)
                if blank.any():
                    blank &= np.asarray(pc.binary_length(col).fill_null(0), np.int64) == 0
            for k in np.flatnonzero(not_utf8).tolist():
                raw = b"|".join(b"" if c[k].as_py() is None else c[k].as_py() for c in batch.columns)
                self.bad.append(BadRecord(self.path, "not_utf8", self.not_text,
                                          line=int(lines[k]), raw=excerpt(raw)))
            keep = ~not_utf8 & ~blank
            batch = pa.RecordBatch.from_arrays(text, names=self.names)
            if not keep.all():
                batch, positions, lines = batch.filter(pa.array(keep)), positions[keep], lines[keep]
                if not_utf8.any():
                    batch = pa.RecordBatch.from_arrays([_as_text(c) for c in batch.columns],
                                                       names=self.names)
            self.good.append((batch, positions, lines))
        self.record += b - a


class _Rows:
    """Good rows waiting to fill a block: parser batches follow byte sizes, blocks follow rows."""

    def __init__(self, names: list[str], null_values: list[str]):
        self.names = names
        self.null_values = null_values
        self.batches: list[pa.RecordBatch] = []
        self.positions: list[np.ndarray] = []
        self.lines: list[np.ndarray] = []
        self.rows = 0

    def add(self, batch: pa.RecordBatch, positions: np.ndarray, lines: np.ndarray) -> None:
        if batch.num_rows:
            self.batches.append(batch)
            self.positions.append(positions)
            self.lines.append(lines)
            self.rows += batch.num_rows

    def drop_last(self) -> None:
        """Forget the last waiting row (the fast path's sentinel)."""
        self.batches[-1] = self.batches[-1].slice(0, self.batches[-1].num_rows - 1)
        self.positions[-1], self.lines[-1] = self.positions[-1][:-1], self.lines[-1][:-1]
        self.rows -= 1

    def take(self, n: int, path: str, bad: list[BadRecord]) -> Block:
        """The first `n` (or fewer) waiting rows as text columns, with the bad rows given."""
        table = pa.Table.from_batches(self.batches or [_empty(self.names)])
        positions = np.concatenate(self.positions or [np.zeros(0, np.int64)])
        lines = np.concatenate(self.lines or [np.zeros(0, np.int64)])
        head, rest = table.slice(0, n), table.slice(n)
        self.batches = rest.combine_chunks().to_batches() if rest.num_rows else []
        self.positions = [positions[n:]] if rest.num_rows else []
        self.lines = [lines[n:]] if rest.num_rows else []
        self.rows = rest.num_rows
        columns = {name: mark_nulls(_as_text(head.column(name).combine_chunks()), self.null_values)
                   for name in self.names}
        return Block(columns=columns, positions=positions[:n], source=path,
                     bad=sorted(bad, key=lambda b: b.line or 0), lines=lines[:n].astype(np.int64))


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


# ---- where a CSV file may be split ---------------------------------------------------------------
_FS, _IQ, _QQ, _UQ = 0, 1, 2, 3  # field start, in quotes, quote in quotes, unquoted field
_SCAN_LIMIT = 64 << 20  # give a boundary up after this many bytes without a provable one


class _QuoteScan:
    """Finds line starts where the reader is provably at a record start, whatever came before.

    pyarrow's tokenizer (newlines_in_values, double_quote, no escape char) is a small automaton:
    a quote at a field start opens a quoted field, `""` inside one is a quote, a quote closes it
    and the field goes on unquoted (where quotes are plain characters); delimiter, CR and LF end
    a field, CR/LF a record, except inside quotes. So at each line start the reader is either
    at a record start (FS) or inside a quoted value running on from an earlier line (IQ). The
    recovery rule (a bad row over several lines is rejected at its first line and parsing
    resumes at the next line) can only put it at FS on a line an open row ran over: so every
    line an open quote reaches may be either. A line start is proven when the lines before it
    leave only FS possible: it follows a known record start (the data start, an earlier
    boundary) by lines without quote characters, or a line that ends a record from FS and from
    IQ alike (e.g. `"a",1` or `b",2`). A split then starts exactly where the sequential reader
    starts a record, no row crosses it, and the reader keeps no state across it but line
    numbers, which the split carries (positions are line-based for this reason).
    """

    def __init__(self, quote: bytes, delimiter: bytes):
        self.quote, self.delimiter = quote[0], delimiter[0]
        self.quote_bytes = quote

    def step(self, line: bytes, state: int) -> int:
        """FS or IQ at the end of `line` (with its newline), entered in `state`."""
        q, d = self.quote, self.delimiter
        s = state
        for c in line:
            if s == _IQ:
                if c == q:
                    s = _QQ
            elif s == _QQ:
                s = _IQ if c == q else _FS if c in (d, 10, 13) else _UQ
            elif c in (d, 10, 13):
                s = _FS
            elif s == _FS:
                s = _IQ if c == q else _UQ
        return _IQ if s == _IQ else _FS

    def boundary(self, fh: Any, target: int, previous: int) -> int | None:
        """The first provable record start at or after `target` (None: none found)."""

        k = next_line_start(fh, target, previous)
        if k is None:
            return None
        q = self._last_quote(fh, previous, k)
        states = {_FS}
        if q is not None:  # lines after the last quote line are plain: they keep the states
            start = self._line_start(fh, previous, q)
            fh.seek(start)
            line, whole = bounded_line(fh, _SCAN_LIMIT)  # never a gigabyte line in memory
            if not whole:
                return None
            entry = {_FS} if start == previous else {_FS, _IQ}
            states = self._next(line, entry)
        at = k
        fh.seek(k)
        while states != {_FS}:
            line, whole = bounded_line(fh, _SCAN_LIMIT)
            if not line or not whole or at - k > _SCAN_LIMIT:
                return None
            at += len(line)
            if self.quote_bytes in line:
                states = self._next(line, states)
        return at

    def _next(self, line: bytes, states: set[int]) -> set[int]:
        out = {self.step(line, s) for s in states}
        return out | {_FS} if _IQ in out else out  # a restart may begin on any line of an open row

    @staticmethod
    def _line_start(fh: Any, floor: int, at: int) -> int:
        """Start of the line holding byte `at` (not before `floor`, a line start)."""
        end = at
        while end > floor:
            begin = max(floor, end - (1 << 20))
            fh.seek(begin)
            nl = fh.read(end - begin).rfind(b"\n")
            if nl >= 0:
                return begin + nl + 1
            end = begin
        return floor

    def _last_quote(self, fh: Any, floor: int, end: int) -> int | None:
        """Offset of the last quote character in [floor, end), read backwards in windows."""
        while end > floor:
            begin = max(floor, end - (4 << 20))
            fh.seek(begin)
            i = fh.read(end - begin).rfind(self.quote_bytes)
            if i >= 0:
                return begin + i
            end = begin
        return None
