"""TFRecord framing: pure byte logic, no Beam, no TensorFlow.

Each record is: uint64 length, uint32 masked crc32c(length), data, uint32 masked crc32c(data),
little-endian; mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (TF record_writer.cc).

A big column is framed by a loop compiled at run time with the CPU's crc32 instruction
(etl.formats.compiled_framing). Otherwise the CRC32C is fastcrc's (Rust, hardware-accelerated,
the same values as google-crc32c): one call per record, made with the GIL held, and on short
records the call costs more than the checksum: google-crc32c's parses an argument tuple,
fastcrc's takes its argument directly (figures: benchmarks/README.md, "The data CRC's call").
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import pyarrow as pa
from fastcrc.crc32 import iscsi as crc32c

from etl.base.errors import VerifyError
from etl.formats import compiled_framing
from etl.formats.jit import COMPILED_FROM
from etl.formats.proto_wire import binary, fixed, join, lengths, offsets_of
from etl.storage import fs

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
HEADER = 12  # uint64 length + uint32 masked CRC of it, before the data
FOOTER = 4  # uint32 masked CRC of the data, after it
COMPRESSIONS = {"none": "", "gzip": ".gz", "zlib": ".zz"}


def masked_crc(data: bytes | memoryview) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    header = _U64.pack(len(record))
    return header + _U32.pack(masked_crc(header)) + record + _U32.pack(masked_crc(record))


def unframe(framed: bytes) -> bytes | None:
    """The data of one whole frame (`framed`: its header, data and footer, nothing more);
    None when its length header does not match its size or either CRC does not match."""
    length, header_crc = _U64.unpack_from(framed)[0], _U32.unpack_from(framed, 8)[0]
    data = framed[HEADER:-FOOTER]
    if (length != len(framed) - HEADER - FOOTER or masked_crc(framed[:8]) != header_crc
            or masked_crc(data) != _U32.unpack_from(framed, len(framed) - FOOTER)[0]):
        return None
    return data


def frame_all(records: Iterable[bytes]) -> bytes:
    """Frame many records; header CRCs are cached per length (fixed-size records share one)."""
    header_cache: dict[int, bytes] = {}
    parts: list[bytes] = []
    append = parts.append
    pack32 = _U32.pack
    for record in records:
        n = len(record)
        head = header_cache.get(n)
        if head is None:
            h = _U64.pack(n)
            head = header_cache[n] = h + pack32(masked_crc(h))
        append(head)
        append(record)
        append(pack32(masked_crc(record)))
    return b"".join(parts)


def frame_records(records: pa.LargeBinaryArray, order: np.ndarray | None = None,
                  compiled: bool = True) -> pa.LargeBinaryArray:
    """Frame a whole column of serialized records: element i becomes the framing of record i,
    or of record order[i] when an order is given (the framing copies each record once, in
    that order: no `take` before it).

    A column of COMPILED_FROM records or more is framed by one compiled loop where the CPU
    allows (etl.formats.compiled_framing; `compiled=False` never uses it). Otherwise headers
    are built once per distinct length and placed with NumPy, the data CRCs are a C-level
    `map` over slices of the records (the only per-record step, see _data_crcs), and the
    framed column is one element-wise concatenation in C++. Both give the same bytes.
    """
    if records.null_count:
        raise ValueError(f"frame_records: {records.null_count} null records (a record is bytes)")
    if order is not None:
        order = np.ascontiguousarray(order, np.int64)
        if len(order) and (int(order.min()) < 0 or int(order.max()) >= len(records)):
            raise IndexError(f"frame_records: an order index outside 0..{len(records) - 1}")
    count = len(records) if order is None else len(order)
    framer = compiled_framing.framer() if compiled and count >= COMPILED_FROM else None
    if framer is not None:
        return _frame_compiled(framer, records, order)
    if order is not None:
        records = records.take(pa.array(order))
    n = len(records)
    sizes = lengths(records)
    crcs = _data_crcs(records)
    heads = np.empty((n, 12), np.uint8)
    heads[:, :8] = sizes.astype("<u8").view(np.uint8).reshape(n, 8)
    heads[:, 8:] = _length_crcs(sizes).view(np.uint8).reshape(n, 4)
    tails = _mask(crcs).astype("<u4")
    return join([fixed(heads, 12, n), records, fixed(tails, 4, n)])


def _frame_compiled(framer: compiled_framing.Framer, records: pa.LargeBinaryArray,
                    order: np.ndarray | None) -> pa.LargeBinaryArray:
    offsets = offsets_of(records)
    if order is None:
        order = np.arange(len(records), dtype=np.int64)
    framed = np.diff(offsets)[order] + (HEADER + FOOTER)
    out_offsets = np.zeros(len(order) + 1, np.int64)
    np.cumsum(framed, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), np.uint8)  # glibc's heap, kept (etl.base.heap)
    data = records.buffers()[2]
    framer(0 if data is None else data.address, offsets, order, out)
    return binary(out, out_offsets)


def _data_crcs(records: pa.LargeBinaryArray) -> np.ndarray:
    """The CRC32C of every record, in slices of CRC_SLICE records. The loop runs in C and
    holds the GIL throughout: one call per 64k-record block held it ~15 ms at a time while
    the other encode thread and the reader's Python waited. Slices let them in between, and
    a slice's bytes objects are freed into memory the next slice reuses while still in the
    CPU's cache (benchmarks/README.md, "Session of 2026-11-27")."""
    n = len(records)
    crcs = np.empty(n, np.uint32)
    for at in range(0, n, CRC_SLICE):
        part = records.slice(at, CRC_SLICE).to_pylist()
        crcs[at : at + len(part)] = np.fromiter(map(crc32c, part), np.uint32, len(part))
    return crcs


CRC_SLICE = 4096


def _length_crcs(sizes: np.ndarray) -> np.ndarray:
    """Masked CRC of each record's 8-byte length header, computed once per distinct length."""
    if not len(sizes):
        return np.zeros(0, "<u4")
    lo = int(sizes.min())
    span = np.bincount(sizes - lo)
    table = np.zeros(len(span), "<u4")
    for k in np.flatnonzero(span).tolist():
        table[k] = masked_crc(_U64.pack(k + lo))
    return table[sizes - lo]


def _mask(crcs: np.ndarray) -> np.ndarray:
    c = crcs.astype(np.uint32)
    with np.errstate(over="ignore"):
        return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)


class Compressor:
    """Whole-file GZIP/ZLIB as TFRecordDataset(compression_type=...) expects; mtime 0 in the
    gzip header, so the same records give the same bytes on every run."""

    def __init__(self, compression: str, level: int = 6):
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
        wbits = {"gzip": 31, "zlib": 15}.get(compression)
        self._z = zlib.compressobj(level, zlib.DEFLATED, wbits) if wbits else None

    def compress(self, data: bytes) -> bytes:
        return self._z.compress(data) if self._z else data

    def flush(self) -> bytes:
        return self._z.flush() if self._z else b""


def decompressing_reader(fh: BinaryIO, compression: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """Yield decompressed chunks of a whole file."""
    wbits = {"gzip": 31, "zlib": 15}.get(compression)
    z = zlib.decompressobj(wbits) if wbits else None
    while True:
        data = fh.read(chunk)
        if not data:
            break
        yield z.decompress(data) if z else data
    if z:
        tail = z.flush()
        if tail:
            yield tail
        if not z.eof:
            raise VerifyError("compressed stream is truncated")


def iter_records(
    chunks: Iterable[bytes], name: str = "<stream>", check_crc: bool = True
) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, data) for each record; raise VerifyError naming file and offset."""
    buf = bytearray()
    offset = 0  # offset (in the uncompressed stream) of buf[0]
    pos = 0
    it = iter(chunks)
    exhausted = False

    def need(k: int) -> bool:
        nonlocal exhausted, buf, pos, offset
        while len(buf) - pos < k and not exhausted:
            try:
                nxt = next(it)
            except StopIteration:
                exhausted = True
                break
            if pos > (1 << 22):
                del buf[:pos]
                offset += pos
                pos = 0
            buf += nxt
        return len(buf) - pos >= k

    while True:
        if not need(1):
            return
        start = offset + pos
        if not need(12):
            raise VerifyError(f"{name}: truncated record header at offset {start}")
        (length,) = _U64.unpack_from(buf, pos)
        (hcrc,) = _U32.unpack_from(buf, pos + 8)
        if check_crc and masked_crc(bytes(buf[pos : pos + 8])) != hcrc:
            raise VerifyError(f"{name}: corrupted record header (length CRC mismatch) at offset {start}")
        if not need(12 + length + 4):
            raise VerifyError(f"{name}: truncated record at offset {start} "
                              f"(needs {length} data bytes)")
        data = bytes(buf[pos + 12 : pos + 12 + length])
        (dcrc,) = _U32.unpack_from(buf, pos + 12 + length)
        if check_crc and masked_crc(data) != dcrc:
            raise VerifyError(f"{name}: corrupted record data (CRC mismatch) at offset {start}")
        pos += 12 + length + 4
        yield start, data


def read_file(path: str, compression: str = "none", check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """All records of one TFRecord file (local or any FileSystems path)."""
    with fs.open_read(path) as fh:
        yield from iter_records(decompressing_reader(fh, compression), path, check_crc)


def compression_of(path: str) -> str:
    if path.endswith(".gz"):
        return "gzip"
    if path.endswith(".zz") or path.endswith(".zlib"):
        return "zlib"
    return "none"


# ---- tolerant scanning of source files --------------------------------------------------------
# The strict `iter_records` above stops at the first broken frame (right for `verify` and our
# own shards). A *source* file is someone else's data: one bad frame must cost one record, and
# the records after it must keep their indexes. `scan_records` does that.


def _make_crc32c_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> np.uint32(1)) ^ np.uint32(0x82F63B78),
                         table >> np.uint32(1)).astype(np.uint32)
    return table


_CRC32C_TABLE = _make_crc32c_table()  # a constant: CRC32C (Castagnoli, reflected) byte table


def header_crc_matches(window: np.ndarray) -> np.ndarray:
    """For every offset p with 12 bytes left in `window` (uint8): does bytes p..p+8 have the
    masked CRC stored at p+8..p+12? Vectorised CRC32C over all 8-byte windows at once (eight
    table steps over the whole array), so resynchronising after a broken length header costs
    a few NumPy passes per MiB instead of a Python call per byte."""
    n = len(window) - 11
    if n <= 0:
        return np.zeros(0, bool)
    table = _CRC32C_TABLE
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    for k in range(8):
        crc = table[(crc ^ window[k : k + n]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(0xFFFFFFFF)
    stored = (window[8 : 8 + n].astype(np.uint32) | (window[9 : 9 + n].astype(np.uint32) << 8)
              | (window[10 : 10 + n].astype(np.uint32) << 16)
              | (window[11 : 11 + n].astype(np.uint32) << 24))
    return _mask(crc) == stored


class BrokenStreamError(Exception):
    """A compressed stream that cannot be decompressed past `offset` (uncompressed bytes)."""

    def __init__(self, offset: int, why: str):
        super().__init__(why)
        self.offset = offset
        self.why = why


class _Stream:
    """Uncompressed bytes of a file with absolute offsets: a buffer that can grow to hold one
    frame, and skipping that seeks (plain files) or decompresses and drops (gzip/zlib) in
    chunks, so an oversized or corrupt region is never held whole."""

    CHUNK = 1 << 20

    def __init__(self, fh: BinaryIO, compression: str):
        wbits = {"gzip": 31, "zlib": 15}.get(compression)
        self.fh = fh
        self.z = zlib.decompressobj(wbits) if wbits else None
        self.buf = bytearray()
        self.base = 0  # absolute offset of buf[0]
        self.eof = False
        self.broken: BrokenStreamError | None = None  # raised once the good bytes are used

    @property
    def end(self) -> int:
        """Absolute offset just past the buffered bytes."""
        return self.base + len(self.buf)

    def _more(self) -> bytes:
        if self.broken is not None:
            raise self.broken
        if self.z is None:
            data = self.fh.read(self.CHUNK)
            if not data:
                self.eof = True
            return data
        while True:
            raw = self.z.unconsumed_tail or self.fh.read(self.CHUNK)
            if not raw:
                if not self.z.eof:
                    self.broken = BrokenStreamError(self.end, "the compressed stream ends early "
                                                              "(truncated file)")
                    raise self.broken
                self.eof = True
                return self.z.flush()
            saved = self.z.copy()
            try:
                out = self.z.decompress(raw, 4 * self.CHUNK)
            except zlib.error as e:
                return self._salvage(saved, raw, e)
            if out or self.z.eof:
                if self.z.eof and not self.z.unconsumed_tail:
                    self.eof = True
                return out

    def _salvage(self, z: Any, raw: bytes, error: zlib.error) -> bytes:
        """The bytes a corrupt chunk still gives before the error (fed in small pieces to a
        copy of the decompressor), so the error names the exact uncompressed offset and the
        records before it are read; the error is raised on the next read."""
        out = bytearray()
        try:
            for i in range(0, len(raw), 512):
                out += z.decompress(raw[i : i + 512])
        except zlib.error:
            pass
        self.broken = BrokenStreamError(self.end + len(out),
                                        f"the compressed stream is corrupt ({error})")
        return bytes(out)

    def ensure(self, upto: int, keep_from: int) -> bool:
        """Buffer bytes up to absolute `upto` (bytes before `keep_from` may be dropped);
        False when the stream ends first."""
        while self.end < upto and not self.eof:
            drop = keep_from - self.base
            if drop > (4 << 20):
                del self.buf[:drop]
                self.base = keep_from
            self.buf += self._more()
        return self.end >= upto

    def skip_to(self, target: int) -> int:
        """Drop everything before absolute `target`; returns where the stream really is
        (less than `target` when it ends first)."""
        if target <= self.end:
            del self.buf[: target - self.base]
            self.base = target
            return target
        self.base, self.buf = self.end, bytearray()
        if self.z is None and not self.eof:
            try:  # a plain file: seek over the bytes (self.end is the file position)
                size = self.fh.seek(0, 2)
                self.base = min(target, size)
                self.fh.seek(self.base)
                self.eof = self.base < target
                return self.base
            except (OSError, AttributeError, ValueError):
                pass  # not seekable: read and drop below
        while self.base < target and not self.eof:
            data = self._more()
            take = min(len(data), target - self.base)
            self.base += take
            self.buf = bytearray(data[take:])
        return self.base

    def view(self, start: int, stop: int) -> memoryview:
        """Buffered bytes [start, stop) by absolute offset; release it before the buffer
        changes (a live view pins the bytearray's size)."""
        return memoryview(self.buf)[start - self.base : stop - self.base]


class Scanned(NamedTuple):
    """One frame of a source file: a good record (`data`) or a rejected one (`code`, `reason`).
    `index` counts every frame, bad ones too, so indexes after a bad frame stay put."""

    index: int
    offset: int
    data: bytes | None = None
    code: str = ""
    reason: str = ""


def scan_records(fh: BinaryIO, compression: str = "none", check_crc: bool = True,
                 max_record_bytes: int = 64 * 2**20) -> Iterator[Scanned]:
    """Every frame of a TFRecord stream, good or bad, with its index and (uncompressed) offset.

    - data CRC wrong (the length header is valid, so the next frame is known): one
      `corrupt_record`, reading goes on;
    - length header CRC wrong: the next frame is unknown, so the bytes are scanned for the next
      offset whose length header has a valid CRC and whose data (at most `max_record_bytes`)
      has a valid CRC too; the skipped bytes are one `corrupt_record` (one index);
    - length over `max_record_bytes`: one `oversized_record`, its bytes are skipped unread;
    - the file ends inside a frame: one `corrupt_record`.
    A compressed stream that cannot be decompressed raises BrokenStreamError once the records
    before the break are out (how many records it held after that is unknown).
    """
    s = _Stream(fh, compression)
    index = pos = 0
    header_crcs: dict[bytes, int] = {}  # fixed-size records share one length header
    unpack64, unpack32 = _U64.unpack_from, _U32.unpack_from
    while True:
        if pos + 12 > s.end and not s.ensure(pos + 12, pos):
            if s.end - pos > 0:
                yield _header_cut(s, index, pos)
            return
        at = pos - s.base
        buf = s.buf
        head = bytes(buf[at : at + 8])
        (length,) = unpack64(head)
        if check_crc:
            want = header_crcs.get(head)
            if want is None:
                want = masked_crc(head)
                if len(header_crcs) < 4096:
                    header_crcs[head] = want
            if want != unpack32(buf, at + 8)[0]:
                bad, resume = _resync_after_bad_header(s, index, pos, max_record_bytes)
                yield bad
                if resume is None:
                    return
                index += 1
                pos = resume
                continue
        end = pos + 12 + length + 4
        if length > max_record_bytes or (end > s.end and not s.ensure(end, pos)):
            bad, resume = _unreadable_record(s, index, pos, length, max_record_bytes)
            yield bad
            if resume is None:
                return
            index += 1
            pos = resume
            continue
        at = pos - s.base
        buf = s.buf
        data = bytes(buf[at + 12 : at + 12 + length])
        if check_crc and masked_crc(data) != unpack32(buf, at + 12 + length)[0]:
            yield _data_crc_mismatch(index, pos, length)
        else:
            yield Scanned(index, pos, data)
        index += 1
        pos = end


def _data_crc_mismatch(index: int, pos: int, length: int) -> Scanned:
    return Scanned(index, pos, None, "corrupt_record",
                   f"data CRC mismatch in a record of {length} bytes (its length "
                   f"header is valid: reading goes on with the next record)")


def _header_cut(s: _Stream, index: int, pos: int) -> Scanned:
    """The file ends inside a record header: its bytes skipped, one `corrupt_record`."""
    left = s.end - pos
    s.skip_to(s.end)
    return Scanned(index, pos, None, "corrupt_record",
                   f"the file ends inside a record header ({left} of 12 bytes)")


def _resync_after_bad_header(s: _Stream, index: int, pos: int,
                             max_record_bytes: int) -> tuple[Scanned, int | None]:
    """A length header whose CRC is wrong: the bytes up to the next valid frame skipped as
    one `corrupt_record`; with where reading resumes (None: the end of the file)."""
    found = _resync(s, pos, max_record_bytes)
    stop = s.end if found is None else found
    where = "the end of the file" if found is None else f"byte {found}"
    return Scanned(index, pos, None, "corrupt_record",
                   f"length header CRC mismatch: bytes {pos}-{stop - 1} skipped "
                   f"(reading resumes at {where})"), found


def _unreadable_record(s: _Stream, index: int, pos: int, length: int,
                       max_record_bytes: int) -> tuple[Scanned, int | None]:
    """A record over `max_record_bytes` (skipped unread: `oversized_record`) or one the file
    ends inside (`corrupt_record`); with where reading resumes (None: stop)."""
    end = pos + 12 + length + 4
    if length > max_record_bytes:
        reached = s.skip_to(end)
        tail = "" if reached == end else "; the file ends inside it"
        return Scanned(index, pos, None, "oversized_record",
                       f"record of {length} bytes is over max_record_bytes "
                       f"({max_record_bytes}); skipped unread{tail}"), \
            None if reached < end else end
    have = s.end - pos - 12
    s.skip_to(s.end)
    return Scanned(index, pos, None, "corrupt_record",
                   f"the file ends inside a record: its header says {length} data "
                   f"bytes + 4 CRC bytes, {have} of them follow"), None

def _resync(s: _Stream, bad: int, max_record_bytes: int) -> int | None:
    """The first offset after `bad` where a whole valid frame starts (valid length CRC, length
    at most `max_record_bytes`, valid data CRC), or None when the stream ends first. Scans a
    window at a time with `header_crc_matches`; everything before the window is dropped, so
    memory stays at one window plus one candidate frame."""
    start = bad + 1
    window = _Stream.CHUNK
    while True:
        have_all = not s.ensure(start + window + 11, start)
        stop = min(s.end, start + window + 11)
        if stop - start < 12:
            s.skip_to(s.end)
            return None
        arr = np.frombuffer(s.view(start, stop), np.uint8)
        hits = np.flatnonzero(header_crc_matches(arr))
        del arr
        for h in hits.tolist():
            cand = start + h
            head = bytes(s.view(cand, cand + 12))
            (length,) = _U64.unpack_from(head)
            if length > max_record_bytes:
                continue
            end = cand + 12 + length + 4
            if not s.ensure(end, start):
                continue
            if masked_crc(bytes(s.view(cand + 12, end - 4))) == _U32.unpack_from(s.view(end - 4, end))[0]:
                s.skip_to(cand)
                return cand
        if have_all and stop >= s.end:
            s.skip_to(s.end)
            return None
        start = stop - 11
        s.skip_to(start)
