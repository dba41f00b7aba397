"""CSV dialect sniffing for `infer-schema`: encoding, delimiter and header row, from the first
64 KiB of each file, so the proposed job names what a run needs instead of reading one junk
column (a `;` file), a number as a column name (a headerless file) or refusing non-UTF-8 text.

- encoding: a UTF-8 byte order mark -> `utf-8-sig`; text that is not UTF-8 -> `cp1252` when
  every byte is a cp1252 character, else `latin-1` (which maps every byte);
- delimiter: of `,` `;` tab `|` (and a space, when it separates only numbers), the one that
  splits the sampled lines into the same number (> 1) of fields most often;
- header: the first row is data, not names, when all its cells are numbers and so are its
  columns' cells below; a first line with
  fewer fields than every data line (scikit-learn's `150,4,setosa,...`) is skipped
  (`skip_rows: 1`) with no header;
- names: the header's, or `column_0, column_1, ...`; duplicate names become `name_2`, ... and an
  empty name `column_<i>` (in a `columns:` list the job writes), a trailing empty column (every
  line ends with the delimiter) is named and left out of the schema, each said in a note.

`--delimiter`, `--encoding` and `--no-header` override what is sniffed.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import re
from dataclasses import dataclass, field

from etl.base.errors import ConfigError
from etl.storage import fs

HEAD_BYTES = 1 << 16
DELIMITERS = (",", ";", "\t", "|", " ")
_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'", " ": "space"}
_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")


@dataclass
class Dialect:
    """How to read a CSV file, as the job's source will name it."""

    encoding: str = "utf-8"
    delimiter: str = ","
    header: bool = True
    skip_rows: int = 0
    names: list[str] = field(default_factory=list)  # the column names a run reads
    renamed: bool = False  # names differ from the header's: the job writes `columns:`
    left_out: dict[str, str] = field(default_factory=dict)  # column -> why (not a feature)
    notes: list[str] = field(default_factory=list)  # what was found, for the summary

    def source_keys(self) -> dict[str, object]:
        """The job source's keys for this dialect (only those that differ from the defaults)."""
        out: dict[str, object] = {}
        if self.delimiter != ",":
            out["delimiter"] = self.delimiter
        if self.encoding != "utf-8":
            out["encoding"] = self.encoding
        if self.skip_rows:
            out["skip_rows"] = self.skip_rows
        if not self.header:
            out["header"] = False
        if self.renamed or not self.header:
            out["columns"] = list(self.names)
        return out


def head(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes of a file (decompressed for .gz)."""
    with fs.open_read(path) as raw:
        if path.lower().endswith(".gz"):
            with gzip.GzipFile(fileobj=raw) as gz:
                return gz.read(size)
        return raw.read(size)


def sniff(path: str, delimiter: str | None = None, encoding: str | None = None,
          header: bool | None = None) -> Dialect:
    """The dialect of one CSV file; arguments that are not None are taken as given."""
    data = head(path)
    d = Dialect()
    text, d.encoding = _decode(data, path, encoding, d.notes)
    lines = text.splitlines()
    if len(data) == HEAD_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut
    lines = [ln for ln in lines[:200] if ln.strip()]
    if delimiter is not None:
        if len(delimiter) != 1:
            raise ConfigError(f"--delimiter must be one character, got {delimiter!r}")
        d.delimiter = delimiter
    else:
        d.delimiter = _delimiter(lines, path)
    rows = list(csv.reader(lines, delimiter=d.delimiter))
    width = max((len(r) for r in rows[1:]), default=len(rows[0]) if rows else 0)
    if rows and len(rows) > 1 and len(rows[0]) < width and \
            all(len(r) == width for r in rows[1:]):
        d.skip_rows = 1
        d.header = False
        d.notes.append(f"the first line has {len(rows[0])} fields, every other {width}: not a "
                       "header row, skipped (skip_rows: 1), columns named column_0..")
        rows = rows[1:]
    elif header is not None:
        d.header = header
    else:
        d.header = _has_header(rows)
        if not d.header:
            shown = ", ".join(repr(c) for c in rows[0][:3]) + (", ..." if len(rows[0]) > 3
                                                               else "")
            d.notes.append(f"the first row ({shown}) holds numbers like the rows below, not "
                           "column names")
    if not rows:
        d.names = []
        return d
    if not d.header:
        d.names = [f"column_{i}" for i in range(len(rows[0]))]
    else:
        d.names = _names(rows, d)
        numeric = [c for c in rows[0] if _is_number(c)]
        if numeric:
            d.notes.append(f"header names that are numbers ({', '.join(map(repr, numeric[:3]))}"
                           "): check that the first line names the columns (--no-header reads "
                           "it as data)")
    return d


def _decode(data: bytes, path: str, encoding: str | None, notes: list[str]) -> tuple[str, str]:
    if encoding is not None:
        try:
            codecs.lookup(encoding)
        except LookupError as e:
            raise ConfigError(f"--encoding {encoding!r} is not a Python codec (utf-8, "
                              "utf-8-sig, latin-1, cp1252, ...)") from e
        return data.decode(encoding, "replace"), encoding
    if data.startswith(codecs.BOM_UTF8):
        notes.append("a UTF-8 byte order mark starts the file: encoding utf-8-sig")
        return data[3:].decode("utf-8", "replace"), "utf-8-sig"
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as e:
        if e.start >= len(data) - 3 and len(data) == HEAD_BYTES:  # a character cut at the end
            return data[:e.start].decode("utf-8", "replace"), "utf-8"
        line = data.count(b"\n", 0, e.start) + 1
        try:
            text, name = data.decode("cp1252"), "cp1252"
        except UnicodeDecodeError:
            text, name = data.decode("latin-1"), "latin-1"
        notes.append(f"not UTF-8 (byte {data[e.start]:#04x} on line {line} of "
                     f"{fs.basename(path)}): read as {name} (--encoding names another)")
        return text, name


def _delimiter(lines: list[str], path: str) -> str:
    """The candidate that splits most lines into one common number (> 1) of fields."""
    best, score = ",", (0, 0)
    sample = lines[:100]
    for cand in DELIMITERS:
        rows = list(csv.reader(sample, delimiter=cand))
        counts = [len(r) for r in rows]
        if not counts:
            continue
        if cand == " " and not all(_is_number(c) for r in rows[1:] for c in r):
            continue  # a space separates numbers only: text with spaces is one column
        common = max(set(counts), key=counts.count)
        if common < 2:
            continue
        agree = counts.count(common)
        if (agree, common) > score and agree * 10 >= len(counts) * 9:
            best, score = cand, (agree, common)
    if score == (0, 0) and path.lower().removesuffix(".gz").endswith(".tsv"):
        return "\t"
    return best


def delimiter_name(d: str) -> str:
    return _NAMES.get(d, repr(d))


def _is_number(cell: str) -> bool:
    return bool(_NUMBER.match(cell))


def _has_header(rows: list[list[str]]) -> bool:
    """False when the first row looks like data: all its cells are numbers (column names
    would be text), as are its columns' cells in the rows below."""
    if len(rows) < 2:
        return True
    first, rest = rows[0], rows[1:]
    if not all(_is_number(c) for c in first):
        return True
    for i, cell in enumerate(first):
        below = [r[i] for r in rest if i < len(r) and r[i].strip()]
        if not below:
            continue
        numbers = all(_is_number(c) for c in below)
        if numbers != _is_number(cell):
            return True
    return False


def _names(rows: list[list[str]], d: Dialect) -> list[str]:
    """The header's names, made distinct and non-empty; each change a note."""
    header = rows[0]
    names: list[str] = []
    seen: dict[str, int] = {}
    trailing = (len(header) > 1 and not header[-1].strip()
                and all(len(r) == len(header) and not r[-1].strip() for r in rows[1:]))
    for i, raw in enumerate(header):
        name = raw
        if not name.strip():
            name = f"column_{i}"
            d.renamed = True
            if trailing and i == len(header) - 1:
                d.left_out[name] = "a trailing empty column (every line ends with the " \
                                   "delimiter)"
                d.notes.append(f"every line ends with {delimiter_name(d.delimiter)}: a "
                               f"trailing empty column, named {name} in columns: and left "
                               "out of the schema (or remove the trailing delimiters)")
            else:
                d.notes.append(f"column {i} has no name in the header: named {name} in "
                               "columns:")
        elif name in seen:
            seen[name] += 1
            new = f"{name}_{seen[name]}"
            while new in header:
                seen[name] += 1
                new = f"{name}_{seen[name]}"
            d.notes.append(f"duplicate column name {name!r} (columns {header.index(name)} and "
                           f"{i}): the second is read as {new!r} (columns: in the job lists "
                           "the names a run uses; rename it there or in the file)")
            d.renamed = True
            name = new
        seen.setdefault(raw, 1)
        names.append(name)
    return names
