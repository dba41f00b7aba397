"""NumPy arrays: `.npy` files paired by column, or the arrays inside `.npz` archives.

- `format: npy`, `paths: {x: x-*.npy, y: y-*.npy}`: each key is a column; files are paired in
  sorted order and the first column's file names the pair (`files()`, `Block.source`).
- `format: npz`, `paths: [data-*.npz]`: every array in an archive is a column, or the ones
  `columns:` picks (a list of array names, or a mapping array name -> column name).
Row i of every column is record i, so all columns of one record must share their first
dimension (else a RecordError naming the files/arrays). Blocks are NumPy slices: local .npy
files are memory-mapped, remote ones and archive members are streamed block by block, so an
array never has to fit in memory. Object (pickled) arrays are refused: loading them would run
arbitrary code.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any, BinaryIO

import numpy as np

from etl.errors import ConfigError, RecordError
from etl.sources.base import Block, open_file, options
from etl.sources.csv_source import PairedFiles, block_rows, expand_each, path_list

_Array = tuple[str, tuple[int, ...], Iterator[np.ndarray]]  # (what to call it, shape, blocks)


class NumpyReader:
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
        if self.npz:
            return expand_each(self.patterns, self.base_dir, self.where)
        return self.pairs.keys()

    def inputs(self) -> list[str]:
        return self.files() if self.npz else self.pairs.every_file()

    def read(self, path: str) -> Iterator[Block]:
        with ExitStack() as stack:
            arrays = self._open_npz(path, stack) if self.npz else self._open_npy(path, stack)
            counts = {label: shape[0] for label, shape, _ in arrays.values()}
            if len(set(counts.values())) > 1:
                listed = ", ".join(f"{label} has {c}" for label, c in counts.items())
                raise RecordError(f"{self.where}: arrays of one record set differ in length "
                                  f"(first dimension): {listed}")
            columns = {column: blocks for column, (_, _, blocks) in arrays.items()}
            start = 0
            for parts in zip(*columns.values(), strict=True):
                n = len(parts[0])
                yield Block(dict(zip(columns, parts, strict=True)),
                            np.arange(start, start + n, dtype=np.int64), source=path)
                start += n

    def _open_npy(self, path: str, stack: ExitStack) -> dict[str, _Array]:
        """column -> (file, shape, blocks) for the pair `path` names."""
        out = {}
        for name, f in self.pairs.partners(path).items():
            if "://" in f:
                fh = stack.enter_context(open_file(f))
                shape, blocks = stream_npy(fh, self.block_rows, f)
            else:
                shape, blocks = _mmap_npy(f, self.block_rows)
            out[name] = (f, shape, blocks)
        return out

    def _open_npz(self, path: str, stack: ExitStack) -> dict[str, _Array]:
        """column -> (archive[array], shape, blocks) of the selected arrays."""
        fh = stack.enter_context(open_file(path))
        try:
            archive = stack.enter_context(zipfile.ZipFile(fh))
        except (zipfile.BadZipFile, OSError) as e:
            raise RecordError(f"{path}: not a readable npz archive: {e}") from e
        present = [m[:-4] for m in archive.namelist() if m.endswith(".npy")]
        wanted = self.rename or {name: name for name in present}
        missing = sorted(set(wanted) - set(present))
        if missing:
            raise RecordError(f"{path}: npz archive has no array(s) {missing}; it holds {present}")
        out = {}
        for name, column in wanted.items():
            member = stack.enter_context(archive.open(f"{name}.npy"))
            shape, blocks = stream_npy(member, self.block_rows, f"{path}[{name}]")
            out[column] = (f"{path}[{name}]", shape, blocks)
        return out


def _mmap_npy(path: str, rows: int) -> tuple[tuple[int, ...], Iterator[np.ndarray]]:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:  # not .npy, truncated, or an object (pickled) array
        raise RecordError(f"{path}: cannot read .npy file: {e}") from e
    if array.ndim < 1:
        raise RecordError(f"{path}: a 0-d array holds no records")
    return array.shape, _split(array, rows)


def stream_npy(
    fh: BinaryIO, rows: int, name: str
) -> tuple[tuple[int, ...], Iterator[np.ndarray]]:
    """Shape and row blocks of a .npy stream, read sequentially (gs:// files, npz members)."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran, dtype = read_header(fh)
    except ValueError as e:
        raise RecordError(f"{name}: not a .npy array: {e}") from e
    if dtype.hasobject:
        raise RecordError(f"{name}: object arrays are not supported (they need pickle)")
    if len(shape) < 1:
        raise RecordError(f"{name}: a 0-d array holds no records")
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize

    def blocks() -> Iterator[np.ndarray]:
        if fortran and len(shape) > 1:  # column-major: rows are not contiguous, read it whole
            yield from _split(_exact(fh, shape[0] * row_bytes, name, dtype, shape[::-1]).T, rows)
            return
        for start in range(0, shape[0], rows):
            n = min(rows, shape[0] - start)
            yield _exact(fh, n * row_bytes, name, dtype, (n, *shape[1:]))

    return tuple(shape), blocks()


def _exact(fh: BinaryIO, size: int, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
    data = fh.read(size)
    if len(data) < size:
        raise RecordError(f"{name}: .npy data is truncated ({len(data)} of {size} bytes left)")
    return np.frombuffer(data, dtype).reshape(shape)


def _split(array: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    return (array[i : i + rows] for i in range(0, len(array), rows))
