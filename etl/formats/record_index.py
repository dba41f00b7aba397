"""Index files beside TFRecord shards: where each record's frame starts and how long it is.

The de-facto text format of NVIDIA DALI's `tfrecord2idx` and the PyPI `tfrecord` package's
`create_index`: one line per record, `"{offset} {length}\\n"`, the byte offset of the record's
frame in the (uncompressed) shard and the length of the whole frame (12-byte header, payload,
4-byte footer). Readers that want random access (DALI, `tfrecord` with `index_path`,
etl.read.random_access) seek to `offset` and read `length` bytes.

Only an uncompressed shard can be indexed: offsets into a GZIP/ZLIB stream would need the
whole stream decompressed up to them, which is no random access at all.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from etl.base.errors import VerifyError
from etl.formats import compiled_index
from etl.formats.jit import COMPILED_FROM

INDEX_SUFFIX = ".index"
FRAME_OVERHEAD = 16  # uint64 length + uint32 crc before the payload, uint32 crc after
# index lines as Arrow's CSV writer lays them out: "OFFSET LENGTH\n", unquoted
_LINES = pa_csv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none",
                             batch_size=1 << 20)


class IndexFileError(VerifyError):
    """An index file that does not describe its shard; the message names the 1-based line."""


def index_name(shard_name: str) -> str:
    return shard_name + INDEX_SUFFIX


def index_lines(payload_sizes: np.ndarray, start: int = 0) -> tuple[bytes, int]:
    """The index lines of consecutive records with these payload sizes whose first frame
    starts at byte `start`; returns (lines, the offset after the last frame), so a shard
    written piece by piece is indexed piece by piece."""
    payloads = np.asarray(payload_sizes, np.int64)
    frames = payloads + FRAME_OVERHEAD
    if not len(frames):
        return b"", start
    ends = np.cumsum(frames) + start
    if len(frames) >= COMPILED_FROM and (payloads >= 0).all() and start >= 0:
        lines = compiled_index.index_lines(payloads, start)
        if lines is not None:
            return lines, int(ends[-1])
    # Arrow's CSV writer formats and lays out the lines in C++ with no Python object per
    # record: space-delimited, unquoted, "\n" after each row, exactly "OFFSET LENGTH\n"
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(pa.table({"offset": ends - frames, "length": frames}), sink, _LINES)
    return sink.getvalue().to_pybytes(), int(ends[-1])



def parse_index(data: bytes, name: str = "index") -> tuple[np.ndarray, np.ndarray]:
    """(offsets, frame lengths) as int64 arrays; IndexFileError names the first bad line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    try:
        table = np.array([line.split(b" ") for line in lines], dtype=np.int64).reshape(-1, 2)
    except (ValueError, OverflowError):  # the error path only: which line
        for number, line in enumerate(lines, 1):
            parts = line.split(b" ")
            if len(parts) != 2 or not all(p.isdigit() and int(p) < 2**63 for p in parts):
                raise IndexFileError(f"{name}: line {number}: expected 'OFFSET LENGTH', got "
                                     f"{line[:60]!r}") from None
        raise IndexFileError(f"{name}: not an index file (lines of 'OFFSET LENGTH')") from None
    return table[:, 0].copy(), table[:, 1].copy()


def check_index(offsets: np.ndarray, lengths: np.ndarray, shard_bytes: int,
                name: str = "index") -> None:
    """The entries tile the shard: the first at 0, each where the previous ended, the last
    ending at the shard's end, every frame at least FRAME_OVERHEAD long. (That each offset
    holds a frame whose header CRC matches is checked by whoever reads the shard.)"""
    if not len(offsets):
        if shard_bytes:
            raise IndexFileError(f"{name}: no entries for a shard of {shard_bytes} bytes")
        return
    expected = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    bad = np.flatnonzero((offsets != expected) | (lengths < FRAME_OVERHEAD))
    if len(bad):
        i = int(bad[0])
        raise IndexFileError(f"{name}: line {i + 1}: offset {int(offsets[i])} length "
                          f"{int(lengths[i])} is not where record {i + 1}'s frame is "
                          f"(expected offset {int(expected[i])})")
    end = int(offsets[-1] + lengths[-1])
    if end != shard_bytes:
        raise IndexFileError(f"{name}: line {len(offsets)}: the last frame ends at byte {end}, "
                          f"the shard has {shard_bytes}")
