"""What the file readers share: `paths:` lists and globs made into files (every pattern must
match), files paired by column (IDX, npy), their options (`block_rows`, integers, flags), the
`FileSource` base of the one-path-list formats, and the excerpts and UTF-8 checks of bad rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.base.errors import ConfigError, quote
from etl.sources.base import DEFAULT_BLOCK_ROWS, Source, options
from etl.storage import fs


def join(base_dir: str, path: str) -> str:
    """A job-relative path made usable: absolute and remote paths stay as they are."""
    try:
        return fs.resolve(base_dir, path)
    except ValueError as e:
        raise ConfigError(str(e)) from e


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def expand_each(patterns: Sequence[str], base_dir: str, where: str) -> list[str]:
    """Every pattern must match something: a typo in a job file is a launch error, not 0 rows."""
    found: set[str] = set()
    for pattern in patterns:
        full = join(base_dir, pattern)
        try:
            matched = fs.expand(full)
        except OSError as e:  # e.g. no such bucket
            raise ConfigError(f"{where}: cannot list {full!r}: {_first_line(e)}") from e
        if not matched:
            said = "" if full == pattern else f" ({full})"
            raise ConfigError(f"{where}: no input files match {pattern!r}{said}")
        for path in matched:
            if _CONTROL.search(path):  # a line break would split every message naming it
                raise ConfigError(f"{where}: {quote(path)} (from {pattern!r}) has a control "
                                  "character (a line break, tab, ...) in its name, which would "
                                  "break the one-line messages and logs naming it: rename it")
            kind = fs.not_a_file(path)
            if kind is not None:  # a FIFO would hang the read, a device never end
                raise ConfigError(f"{where}: {quote(path)} (from {pattern!r}) is {kind}, not a "
                                  "file: inputs must be regular files; move it away or narrow "
                                  "the pattern")
        found.update(matched)
    return sorted(found)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


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

    def key_files(self) -> list[str]:
        """The key column's files: one unit (and `Block.source`) per pair."""
        return list(self.found()[self.key_column])

    def every_file(self) -> list[str]:
        return sorted(f for files in self.found().values() for f in files)

    def partners(self, path: str) -> dict[str, str]:
        """column -> file of the pair `path` (a key column file) names."""
        keys = self.key_files()
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


class FileSource(Source):
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


def null_values_option(opts: Mapping[str, Any], default: list[str], where: str) -> list[str]:
    """`null_values:`, the texts a text source reads as missing (null), e.g. ["", NA, N/A].

    YAML reads an unquoted `null` or `NaN` as a null or a float: those are taken as the text
    they were written as ("null", "NaN"), so `null_values: [NA, null, NaN]` means what it says."""
    value = opts.get("null_values", default)
    if not isinstance(value, list):
        raise ConfigError(f"{where}: 'null_values' must be a list of texts, e.g. "
                          f"[\"\", NA, N/A], got {value!r}")
    out: list[str] = []
    for v in value:
        if v is None:
            v = "null"
        elif isinstance(v, float) and v != v:
            v = "NaN"
        elif isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ConfigError(f"{where}: 'null_values' must be a list of texts, got {v!r} in "
                              f"{value!r}")
        out.append(str(v))
    return list(dict.fromkeys(out))


def mark_nulls(col: pa.Array, markers: list[str]) -> pa.Array:
    """Text cells equal to one of `markers` as nulls (lists of text: their items), one Arrow
    kernel per column; every other value, and every non-text column, is kept as it is."""
    if not markers:
        return col
    kind = col.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        values = mark_nulls(col.values, markers)
        if values is col.values:
            return col
        cls = pa.ListArray if pa.types.is_list(kind) else pa.LargeListArray
        offsets = col.offsets
        mask = col.is_null() if col.null_count else None
        return cls.from_arrays(offsets, values, mask=mask)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        found = pc.is_in(col, value_set=pa.array(markers, kind))
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        found = pc.is_in(col, value_set=pa.array([m.encode() for m in markers], kind))
    else:
        return col
    if not pc.any(found).as_py():
        return col
    return pc.if_else(found, pa.scalar(None, kind), col)
