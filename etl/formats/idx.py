"""IDX, the MNIST / Fashion-MNIST file format: a big-endian header, then one flat array.

Header: two zero bytes, a dtype code, the number of dimensions, then each dimension as a
big-endian uint32; the first dimension counts the records. Files are often gzipped; we
recognise gzip by the `.gz` extension or by its magic bytes, so a renamed file still reads.
Readers stream records in blocks (a 47 MB MNIST image file never has to be held whole). A
malformed header, or a plain file longer than its dims describe, raises BadInputError naming the
file and byte offset. Data that ends early (a truncated file or gzip stream) is not an error
here: `read_block` returns the complete records and says why it stopped, so a source can count
the missing ones (the header says how many there were).
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from etl.base.errors import BadInputError
from etl.storage import fs

try:  # ISA-L's inflate: 470 MB of MNIST-shaped images in 0.7 s vs 2.0 s for gzip.GzipFile
    from isal.isal_zlib import _GzipReader as _IsalReader  # isal.igzip.IGzipFile's own reader
    from isal.isal_zlib import error as _IsalError
except ImportError:  # pragma: no cover - platforms without an isal wheel
    _IsalReader = None
    _IsalError = zlib.error
_BROKEN = (OSError, EOFError, zlib.error, _IsalError)  # a truncated or corrupt gzip stream

DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
CODES: dict[np.dtype, int] = {dtype: code for code, dtype in DTYPES.items()}
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class IdxHeader:
    """What the header promises: element type (big-endian) and shape (records first)."""

    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def count(self) -> int:
        return self.shape[0]

    @property
    def record_shape(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def record_bytes(self) -> int:
        return int(np.prod(self.record_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def header_bytes(self) -> int:
        return 4 + 4 * len(self.shape)


def read_idx_header(fh: BinaryIO, name: str = "<stream>") -> IdxHeader:
    """Parse the header at the start of `fh` (already decompressed)."""
    magic = fh.read(4)
    if len(magic) < 4 or magic[:2] != b"\x00\x00" or magic[2] not in DTYPES or magic[3] == 0:
        raise BadInputError(
            f"{name}: not an IDX file (magic bytes {magic.hex(' ') or 'missing'} at byte 0; "
            f"expected 00 00 <dtype code, one of {', '.join(f'{c:02x}' for c in DTYPES)}> "
            f"<ndims >= 1>)"
        )
    ndims = magic[3]
    raw = fh.read(4 * ndims)
    if len(raw) < 4 * ndims:
        raise BadInputError(f"{name}: IDX header is truncated at byte {4 + len(raw)} (expected "
                            f"{ndims} dimensions, {4 + 4 * ndims} header bytes)")
    return IdxHeader(DTYPES[magic[2]], struct.unpack(f">{ndims}I", raw))


@contextmanager
def open_idx(path: str) -> Iterator[tuple[IdxHeader, BinaryIO]]:
    """(header, stream positioned at the first record) of a plain or gzipped IDX file."""
    with ExitStack() as stack:
        fh = stack.enter_context(fs.open_read(path))
        gzipped = path.endswith(".gz")
        if not gzipped:  # the magic bytes, then back to the start (one open, one request)
            gzipped = fh.read(2) == _GZIP_MAGIC
            try:
                fh.seek(0)
            except (OSError, AttributeError):  # not seekable: open it again
                fh = stack.enter_context(fs.open_read(path))
        stream: Any = _gunzip(fh) if gzipped else fh
        try:
            header = read_idx_header(stream, path)
        except _BROKEN as e:  # gzip.BadGzipFile is an OSError
            raise BadInputError(f"{path}: cannot read the IDX header: {e}") from e
        if not gzipped:
            _check_size(fh, header, path)
        yield header, stream


class GzipStream(io.BufferedReader):
    """A gzip file's data, inflated by ISA-L's reader in C (the one isal's IGzipFile wraps),
    reading the file READ_SIZE bytes at a time. `readinto` of a block goes straight into the
    block's array: IGzipFile's `read` made a new bytes object per block, and its 512 KiB reads
    of the file each took the GIL back from the encode threads (figures: benchmarks/README.md,
    "The IDX reader and the GIL"). `fileobj`: the compressed file (its position: progress)."""

    READ_SIZE = 4 << 20

    def __init__(self, fileobj: Any) -> None:
        super().__init__(_IsalReader(fileobj, self.READ_SIZE))
        self.fileobj = fileobj


def _gunzip(fh: Any) -> Any:
    return GzipStream(fh) if _IsalReader is not None else gzip.GzipFile(fileobj=fh)


def is_gzip(stream: Any) -> bool:
    """Whether `stream` (from open_idx) decompresses its file."""
    return isinstance(stream, (GzipStream, gzip.GzipFile))


def _check_size(fh: Any, header: IdxHeader, path: str) -> None:
    """An uncompressed file must not be longer than its dims describe (then the dims, and so
    every record, are wrong); checked before any record is read. A shorter file is a
    truncated one: its complete records are read and the rest counted as lost."""
    try:
        size = fh.seek(0, 2)
        fh.seek(header.header_bytes)
    except (OSError, AttributeError):
        return  # not seekable: the streaming read still catches a long file
    expected = header.header_bytes + header.count * header.record_bytes
    if size > expected:
        raise BadInputError(f"{path}: IDX dims {list(header.shape)} of {header.dtype.str[1:]} "
                            f"describe {expected} bytes, the file has {size}: the dims do not "
                            f"match the data")


def iter_blocks(
    stream: BinaryIO, header: IdxHeader, rows: int, path: str
) -> Iterator[np.ndarray]:
    """Records in blocks of up to `rows`, native byte order; a short or long file raises."""
    done = 0
    while done < header.count:
        n = min(rows, header.count - done)
        block, why = read_block(stream, header, n, path)
        if len(block) < n:
            raise BadInputError(f"{path}: IDX data ends after record {done + len(block)}, but "
                                f"its dims {list(header.shape)} promise {header.count} records "
                                f"({why})")
        yield block
        done += n
    check_end(stream, header, path)


def check_end(stream: BinaryIO, header: IdxHeader, path: str) -> None:
    """After the last record: more data means the dims are wrong."""
    try:
        extra = stream.read(1)
    except _BROKEN as e:
        raise BadInputError(f"{path}: cannot read IDX data after the last record: {e}") from e
    if extra:
        end = header.header_bytes + header.count * header.record_bytes
        raise BadInputError(f"{path}: IDX file holds more data than its dims "
                            f"{list(header.shape)} describe (from byte {end} on)")


def read_block(stream: BinaryIO, header: IdxHeader, rows: int, path: str) -> tuple[np.ndarray, str]:
    """Up to `rows` complete records (native byte order), and why fewer came ("" if none
    are missing): the data ends early, or a gzip stream breaks."""
    size = header.record_bytes
    data = np.empty(rows * size, np.uint8)  # read into: no bytes object per block
    got, why = _read_into(stream, data)
    n = got // size if size else rows
    if n < rows and not why:
        why = "the data ends early (truncated file)"
    block = data[: n * size].view(header.dtype).reshape((n, *header.record_shape))
    return (block if header.dtype.itemsize == 1 else block.astype(header.dtype.newbyteorder("="))), why


def _read_into(stream: BinaryIO, out: np.ndarray) -> tuple[int, str]:
    """Fill `out` from `stream` (a file handle without readinto: read, then copy); the bytes
    read, and why it stopped early ("" at the end of the data)."""
    view = memoryview(out).cast("B")
    readinto = getattr(stream, "readinto", None)
    got = 0
    try:
        while got < len(view):
            if readinto is not None:
                step = readinto(view[got:]) or 0
            else:
                part = stream.read(len(view) - got)
                step = len(part)
                view[got : got + step] = part
            if not step:
                break
            got += step
    except _BROKEN as e:
        return got, f"the gzip stream breaks ({type(e).__name__}: {e})"
    return got, ""


def read_idx(path: str) -> np.ndarray:
    """A whole IDX file as one array (native byte order)."""
    with open_idx(path) as (header, stream):
        blocks = list(iter_blocks(stream, header, max(header.count, 1), path))
    if not blocks:
        return np.zeros(header.shape, header.dtype.newbyteorder("="))
    return blocks[0]


def write_idx(path: str, array: np.ndarray) -> None:
    """Write `array` as IDX (gzip if `path` ends in .gz); same array, same bytes (gzip mtime 0)."""
    array = np.asarray(array)
    big = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    if array.ndim < 1 or big not in CODES:
        raise ValueError(f"{path}: IDX holds arrays of >= 1 dimension of "
                         f"{sorted(str(d) for d in CODES)}, got {array.dtype}{list(array.shape)}")
    if any(d >= 1 << 32 for d in array.shape):
        raise ValueError(f"{path}: IDX dimensions must fit in uint32, got {list(array.shape)}")
    header = bytes([0, 0, CODES[big], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + np.ascontiguousarray(array, dtype=big).tobytes()
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    fs.write_bytes(path, data)
