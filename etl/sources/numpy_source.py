"""NumPy arrays: `.npy` files paired by column, or the arrays inside `.npz` archives.

- `format: npy`, `paths: {x: x-*.npy, y: y-*.npy}`: each key is a column; files are paired in
  sorted order and the first column's file names the pair (`files()`, `Block.source`).
- `format: npz`, `paths: [data-*.npz]`: every array in an archive is a column, or the ones
  `columns:` picks (a list of array names, or a mapping array name -> column name).
Row i of every column is record i. Blocks are read block by block (local .npy files at their
rows' offsets, so a split starts anywhere; remote ones and archive members streamed), so an
array never has to fit in memory, and a file truncated while a run reads it is a counted
short read, not a SIGBUS (column-major files are still memory-mapped). Object (pickled)
arrays are refused: loading them would run arbitrary code.

Bad files (the rule for binary inputs: what is lost is counted when the header says how many
records there are, the run fails when it does not):
- not a .npy array / a broken header, an object array, a 0-d array, an npz that is not a
  readable zip or lacks a selected array, columns of one record set whose first dimensions
  differ: BadInputError naming the file (and array), raised by `files()` at plan time (only
  headers are read) and again by `read`;
- array data that ends early (truncated file): the complete rows go through and one
  `unreadable_rest` BadRecord counts the rows the header promised but the data did not hold.
"""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from typing import Any, BinaryIO

import numpy as np

from etl.base.errors import BadInputError, BadRecord, ConfigError
from etl.sources.base import Block, Source, Split, options, record_splits
from etl.sources.file_source import PairedFiles, block_rows, expand_each, path_list
from etl.storage import fs

_Array = tuple[str, tuple[int, ...], "_Rows"]  # (what to call it, shape, its rows)


class NumpyReader(Source):
    """`format: npy` (paths: {column: glob}) or `npz` (paths: [globs]); options: columns
    (npz only), block_rows."""

    OPTIONS = {"columns", "block_rows"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        opts = options(config, self.OPTIONS, where)
        self.where = where
        self.base_dir = base_dir
        self.npz = config.get("format") == "npz"
        self.block_rows = block_rows(opts, where)
        self.rename: dict[str, str] | None = None  # npz array name -> column name
        columns = opts.get("columns")
        if columns is not None and not self.npz:
            raise ConfigError(f"{where}: 'columns' is for npz archives; for npy the 'paths' keys "
                              f"name the columns")
        if isinstance(columns, list) and columns and all(isinstance(c, str) for c in columns):
            self.rename = {c: c for c in columns}
        elif isinstance(columns, Mapping) and columns and all(
            isinstance(k, str) and isinstance(v, str) for k, v in columns.items()
        ):
            self.rename = dict(columns)
        elif columns is not None:
            raise ConfigError(f"{where}: 'columns' must list array names or map array names "
                              f"to column names, got {columns!r}")
        if self.npz:
            self.patterns = path_list(config, where)
        else:
            self.pairs = PairedFiles(config, base_dir, where)

    @property
    def key_column(self) -> str | None:
        """npy: the column whose file gives a record its identity; npz: the archive does."""
        return None if self.npz else self.pairs.key_column

    def files(self) -> list[str]:
        units = expand_each(self.patterns, self.base_dir, self.where) if self.npz \
            else self.pairs.key_files()
        for unit in units:  # headers only: a broken file fails the run before any work
            with ExitStack() as stack:
                self._open(unit, stack)
        return units

    def inputs(self) -> list[str]:
        return expand_each(self.patterns, self.base_dir, self.where) if self.npz \
            else self.pairs.every_file()

    def record_count(self, path: str) -> int:
        """The first dimension every array of the record set states (they must agree); a
        truncated array yields fewer rows, and the rest is counted as lost when it is read."""
        with ExitStack() as stack:
            arrays = self._open(path, stack)
        return next(iter(arrays.values()))[1][0]

    def _open(self, path: str, stack: ExitStack) -> dict[str, _Array]:
        arrays = self._open_npz(path, stack) if self.npz else self._open_npy(path, stack)
        counts = {label: shape[0] for label, shape, _ in arrays.values()}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{label} has {c}" for label, c in counts.items())
            raise BadInputError(f"{self.where}: arrays of one record set differ in length "
                                f"(first dimension): {listed}")
        return arrays

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        """Row ranges of about `target_bytes` when every array of the record set is
        local and complete (.npy files read at offsets), so a split slices its rows; archive
        members and remote files stream from the start, and a truncated array must count its
        lost rows once: one split."""
        if self.npz:
            return [Split(path)]
        with ExitStack() as stack:
            arrays = self._open(path, stack)
            if not all(rows.complete for _, _, rows in arrays.values()):
                return [Split(path)]
            total = next(iter(arrays.values()))[1][0]
            row_bytes = sum(rows.row_bytes for _, _, rows in arrays.values())
            own = next((rows for label, _, rows in arrays.values() if label == path), None)
        return record_splits(path, total, row_bytes, target_bytes,
                             own.header_bytes if own else 0, own.row_bytes if own else 0)

    def read_split(self, split: Split) -> Iterator[Block]:
        path = split.path
        with ExitStack() as stack:
            arrays = self._open(path, stack)
            total = next(iter(arrays.values()))[1][0]
            own = None if self.npz else next(
                (rows for label, _, rows in arrays.values() if label == path), None)
            start = split.start
            if split.stop is not None:
                total = min(total, split.stop)
            if start:  # only complete local arrays are split
                for _, _, rows in arrays.values():
                    rows.skip(start)
            while start < total:
                want = min(self.block_rows, total - start)
                parts = {column: rows.take(want) for column, (_, _, rows) in arrays.items()}
                n = min(len(block) for block, _ in parts.values())
                columns = {column: block[:n] for column, (block, _) in parts.items()}
                positions = np.arange(start, start + n, dtype=np.int64)
                if n == want:
                    yield Block(columns, positions, source=path,
                                end_offset=None if own is None else own.byte(start + n))
                    start += n
                    continue
                short = min(parts, key=lambda column: len(parts[column][0]))
                label, _, rows = arrays[short]
                named = "" if label == path else f"{label}: "
                lost = total - start - n
                yield Block(columns, positions, source=path, bad=[BadRecord(
                    path, "unreadable_rest",
                    f"{named}{parts[short][1]} at byte {rows.byte(start + n)}: rows {start + n} "
                    f"to {total - 1} of the {total} its header promises are missing",
                    record=start + n, byte=rows.byte(start + n), count=lost)])
                return

    def _open_npy(self, path: str, stack: ExitStack) -> dict[str, _Array]:
        """column -> (file, shape, rows) for the pair `path` names."""
        out = {}
        for name, f in self.pairs.partners(path).items():
            fh = stack.enter_context(fs.open_read(f))
            out[name] = (f, *_npy_rows(fh, f, mmap=fs.local_path(f) is not None))
        return out

    def _open_npz(self, path: str, stack: ExitStack) -> dict[str, _Array]:
        """column -> (archive[array], shape, rows) of the selected arrays."""
        fh = stack.enter_context(fs.open_read(path))
        try:
            archive = stack.enter_context(zipfile.ZipFile(fh))
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise BadInputError(f"{path}: not a readable npz archive (a zip's directory is at its "
                                f"end, so a truncated archive fails here): {e}") from e
        present = [m[:-4] for m in archive.namelist() if m.endswith(".npy")]
        wanted = self.rename or {name: name for name in present}
        missing = sorted(set(wanted) - set(present))
        if missing:
            raise BadInputError(f"{path}: npz archive has no array(s) {missing}; it holds "
                                f"{present}")
        out = {}
        for name, column in wanted.items():
            label = f"{path}[{name}]"
            try:
                member = stack.enter_context(archive.open(f"{name}.npy"))
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise BadInputError(f"{label}: cannot open the archive member: {e}") from e
            out[column] = (label, *_npy_rows(member, label, mmap=False))
        return out


class _Rows:
    """Rows of one array, `take(n)` at a time: (up to n complete rows, why fewer came)."""

    def __init__(self, take: Callable[[int], tuple[np.ndarray, str]], header_bytes: int,
                 row_bytes: int):
        self.take = take
        self.complete = bool(getattr(take, "complete", False))  # local, every row there
        self.header_bytes = header_bytes
        self.row_bytes = row_bytes

    def skip(self, n: int) -> None:
        """Pass over `n` rows (a split's start) without reading them where the reader can."""
        jump = getattr(self.take, "skip", None)
        if jump is None:
            self.take(n)
        else:
            jump(n)

    def byte(self, row: int) -> int:
        """Byte offset of `row` in the (uncompressed) .npy data."""
        return self.header_bytes + row * self.row_bytes


# NumPy parses a header with ast.literal_eval, and CPython 3.11's AST constructor keeps its
# recursion depth in interpreter-wide state: two threads parsing at once can fail with
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905; seen in CI
# with two workers reading .npy splits at once). Headers are parsed one at a time.
_ONE_HEADER_AT_A_TIME = threading.Lock()


def _npy_header(fh: BinaryIO, name: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, header bytes) of a .npy stream at its start."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        with _ONE_HEADER_AT_A_TIME:
            shape, fortran, dtype = read_header(fh)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise BadInputError(f"{name}: not a .npy array (bad header in its first bytes): {e}") from e
    if dtype.hasobject:
        raise BadInputError(f"{name}: object arrays are not supported (they need pickle)")
    if len(shape) < 1:
        raise BadInputError(f"{name}: a 0-d array holds no records")
    header_bytes = {(1, 0): 10, (2, 0): 12, (3, 0): 12}.get(version, 12)
    try:
        header_bytes = fh.tell()
    except (OSError, AttributeError, ValueError):
        pass  # not seekable (an archive member): offsets count from the magic's length
    return tuple(shape), fortran, dtype, header_bytes


def _npy_rows(fh: BinaryIO, name: str, mmap: bool) -> tuple[tuple[int, ...], _Rows]:
    """Shape and a row reader of a .npy stream: read at offsets (local C-order files), memory-
    mapped (local column-major files, which are read whole otherwise) or streamed."""
    shape, fortran, dtype, header_bytes = _npy_header(fh, name)
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    if fortran and len(shape) > 1:  # column-major: rows are not contiguous, read it whole
        size = shape[0] * row_bytes
        if mmap and fh.seek(0, 2) == header_bytes + size:
            array = np.memmap(name, dtype, "r", offset=header_bytes, shape=shape, order="F")
            return shape, _Rows(_slicer(array), header_bytes, row_bytes)
        fh.seek(header_bytes) if mmap else None
        data = fh.read(size)
        if len(data) < size:
            raise BadInputError(f"{name}: .npy data (Fortran order) is truncated at byte "
                                f"{header_bytes + len(data)} of {header_bytes + size}; no row "
                                f"is whole in column-major order")
        array = np.frombuffer(data, dtype).reshape(shape[::-1]).T
        return shape, _Rows(_slicer(array), header_bytes, row_bytes)
    if mmap:
        size = fh.seek(0, 2)
        whole = (size - header_bytes) // row_bytes if row_bytes else shape[0]
        rows = min(shape[0], whole)
        why = "" if rows == shape[0] else "the data ends early (truncated file)"
        return shape, _Rows(_positioned(fh, name, shape, dtype, header_bytes, rows, why),
                            header_bytes, row_bytes)

    def take(n: int) -> tuple[np.ndarray, str]:
        try:
            data = fh.read(n * row_bytes)
        except (OSError, EOFError, zipfile.BadZipFile) as e:
            return np.zeros((0, *shape[1:]), dtype), f"cannot read the data ({e})"
        got = len(data) // row_bytes if row_bytes else n
        why = "" if got == n else "the data ends early (truncated file)"
        return np.frombuffer(data[: got * row_bytes], dtype).reshape((got, *shape[1:])), why

    return shape, _Rows(take, header_bytes, row_bytes)


def _positioned(fh: BinaryIO, name: str, shape: tuple[int, ...], dtype: np.dtype,
                header_bytes: int, rows: int, why: str) -> Callable[[int], tuple[np.ndarray, str]]:
    """Rows of a local C-order .npy read at their offsets, not memory-mapped: a file
    truncated while a run reads it is then a short read named in a dead letter, never a
    SIGBUS that kills the worker. A split starts anywhere (`complete`: every row is there)."""
    per_row = int(np.prod(shape[1:], dtype=np.int64))
    row_bytes = per_row * dtype.itemsize
    at = 0

    def take(n: int) -> tuple[np.ndarray, str]:
        nonlocal at
        n = min(n, rows - at)
        want = n * row_bytes
        try:
            fh.seek(header_bytes + at * row_bytes)
            data = fh.read(want) if want else b""
        except OSError as e:
            return np.zeros((0, *shape[1:]), dtype), f"cannot read the data ({e})"
        got = len(data) // row_bytes if row_bytes else n
        at += got
        block = np.frombuffer(data, dtype, count=got * per_row)
        if got < n:
            return block.reshape((got, *shape[1:])), "the file was truncated while it was read"
        return block.reshape((n, *shape[1:])), (why if at >= rows and why else "")

    def skip(n: int) -> None:
        nonlocal at
        at = min(rows, at + n)

    take.complete = not why  # type: ignore[attr-defined]
    take.skip = skip  # type: ignore[attr-defined]
    return take


def _slicer(array: np.ndarray, why: str = "") -> Callable[[int], tuple[np.ndarray, str]]:
    at = 0

    def take(n: int) -> tuple[np.ndarray, str]:
        nonlocal at
        block = array[at : at + n]
        at += len(block)
        return block, (why if len(block) < n else "")

    take.complete = not why and isinstance(array, np.memmap)  # type: ignore[attr-defined]
    return take
