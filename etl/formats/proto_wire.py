"""Deterministic, vectorised protobuf serialisation of tf.train.Example / SequenceExample.

Why hand-written: tfx_bsl's C++ `RecordBatchToExamplesEncoder` serialises the feature map
in an order that changes from process to process (measured: the same batch gave different
bytes in two processes), which would break "same inputs, same seed -> same shard bytes";
it also has no SequenceExample encoder. This module writes features in schema order with
canonical varints, so bytes are reproducible.

It works on whole columns and never makes a Python object per record: every piece of a
record (a map-entry header, a packed payload, a varint) is one Arrow `LargeBinary` column
built from NumPy buffers without copying, headers that depend only on a length are built
once per distinct length and gathered with Arrow `take` (a header every record shares, as a
fixed-shape feature's, is never laid out n times: `Repeated`), a group of consecutive elements
(the values of one record, the steps of one sequence) is a zero-copy re-offsetting, and a
record is the element-wise concatenation of its pieces (`binary_join_element_wise`, C++,
GIL released). `python -m benchmarks.wire_bench` (schemas/bench_csv.yaml: 11 scalar
features, ~182-byte Examples, 1M records, one core, same stored columns): 1.0 s here vs
2.1 s for tfx_bsl's encoder.

Field numbers (tensorflow/core/example/{feature,example}.proto): Example.features=1;
Features.feature=1 (map entry: key=1, value=2); Feature oneof bytes_list=1, float_list=2,
int64_list=3; *List.value=1 (packed for float/int64); SequenceExample.context=1,
feature_lists=2; FeatureLists.feature_list=1 (map); FeatureList.feature=1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.formats.kinds import STORAGE_KINDS

BINARY = pa.large_binary()


@dataclass(frozen=True)
class Repeated:
    """The same bytes in each of `n` records (a header that depends only on a length every
    record shares, as every fixed-shape feature's does): a piece of a `join` that is never
    laid out as a column of n copies; the join writes it once per record where it goes."""

    value: bytes
    n: int

    def __len__(self) -> int:
        return self.n


@dataclass(frozen=True)
class Fixed:
    """A column whose elements are all `width` bytes, back to back in `data` (a float's four
    bytes): its sizes are never computed, and its Arrow column (offsets 0, width, 2 x width,
    ...) is only made when it is joined as a column of its own, not when it is laid into a
    block beside other fixed-width pieces (`_side_by_side`), as a scalar feature's values are."""

    data: np.ndarray
    width: int
    n: int

    def __len__(self) -> int:
        return self.n

    @property
    def array(self) -> pa.LargeBinaryArray:
        return binary(self.data, np.arange(self.n + 1, dtype=np.int64) * self.width)


Piece = pa.LargeBinaryArray | Repeated | Fixed  # what `join` concatenates


def fixed(data: np.ndarray, width: int, n: int) -> Fixed:
    """`n` elements of `width` bytes each, back to back in `data` (no copy)."""
    return Fixed(data, width, n)


def varint(value: int) -> bytes:
    """One unsigned varint (negative int64 values are written as their two's complement)."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_lengths(v: np.ndarray) -> np.ndarray:
    """Bytes each uint64 takes as a varint."""
    v = v.astype(np.uint64, copy=False)
    n = np.ones(len(v), np.int64)
    top = int(v.max()) if len(v) else 0
    for shift in range(7, 64, 7):
        if top < 1 << shift:  # no value needs another byte (one pass for the maximum)
            break
        n += v >= np.uint64(1 << shift)
    return n


def varints(values: np.ndarray) -> pa.LargeBinaryArray:
    """Varint-encode a whole int64 column at once: element i is value i's varint."""
    (column,) = varint_pieces(values)
    return column  # type: ignore[return-value]


def varint_pieces(values: np.ndarray,
                  prefix: Callable[[int], bytes] | None = None) -> list[Piece]:
    """Each value's varint, after `prefix(its length)` when given (a scalar feature's
    headers), as pieces to join.

    A column whose values span a range smaller than a quarter of its length (a small integer
    feature, a label, a year) has each distinct value's varint made once, for the range, and
    gathered in C++ (`take`): a negative value is a 10-byte varint, and on the benchmark's
    `i1` in [-1000, 1000) the matrix below cost 55 CPU-ns a value, the gather 11. The
    prefix is then part of each table entry: one piece, gathered once. Otherwise it is a
    piece of its own (laying it into the matrix cost more than joining it).
    """
    v = np.asarray(values).astype(np.int64, copy=False)
    if len(v) >= 1024:
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < len(v) // 4:
            table = _varint_matrix(np.arange(lo, hi + 1, dtype=np.int64))
            if prefix is not None:
                table = join([per_length(lengths(table), prefix), table])
            return [table.take(pa.array(v - np.int64(lo)))]
    plain = _varint_matrix(v)
    return [plain] if prefix is None else [per_length(lengths(plain), prefix), plain]


def _varint_matrix(values: np.ndarray) -> pa.LargeBinaryArray:
    """All ten possible 7-bit groups of each value as an (n, 10) matrix; a boolean mask of the
    groups each value needs, read row by row, is the concatenation of the varints."""
    v = values.astype(np.int64, copy=False).view(np.uint64)
    nbytes = varint_lengths(v)
    width = int(nbytes.max()) if len(v) else 0
    groups = np.arange(width, dtype=np.uint64) * np.uint64(7)
    table = ((v[:, None] >> groups) & np.uint64(0x7F)).astype(np.uint8)
    used = np.arange(width) < nbytes[:, None]
    table[:, :-1] |= used[:, 1:].astype(np.uint8) << 7  # continuation bit: another group follows
    offsets = np.zeros(len(v) + 1, np.int64)
    np.cumsum(nbytes, out=offsets[1:])
    return binary(table[used], offsets)


def binary(data: np.ndarray | bytes | pa.Buffer, offsets: np.ndarray) -> pa.LargeBinaryArray:
    """A LargeBinary column over `data` (no copy): element i is data[offsets[i]:offsets[i+1]]."""
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    offsets = np.ascontiguousarray(offsets, np.int64)
    return pa.LargeBinaryArray.from_buffers(BINARY, len(offsets) - 1,
                                            [None, pa.py_buffer(offsets), buf])


def lengths(arr: pa.LargeBinaryArray) -> np.ndarray:
    """Byte length of every element."""
    return np.diff(offsets_of(arr))


def offsets_of(arr: pa.LargeBinaryArray) -> np.ndarray:
    """The element offsets into the data buffer (len(arr) + 1 values)."""
    return np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]


def data_of(arr: pa.LargeBinaryArray) -> pa.Buffer:
    """The bytes of all elements, back to back (a slice of the data buffer, no copy)."""
    offsets = offsets_of(arr)
    start, end = int(offsets[0]), int(offsets[-1])
    return arr.buffers()[2].slice(start, end - start) if end > start else pa.py_buffer(b"")


def regroup(arr: pa.LargeBinaryArray, groups: np.ndarray) -> pa.LargeBinaryArray:
    """Element i = the concatenation of arr[groups[i]:groups[i+1]], without copying: the
    elements of a column are already back to back in its data buffer."""
    return binary(arr.buffers()[2] or b"", offsets_of(arr)[groups])


def join(pieces: Sequence[Piece]) -> pa.LargeBinaryArray:
    """Element-wise concatenation of equally long pieces (one C++ pass).

    Runs of pieces whose elements all have one width (fixed-shape features, constant
    headers) are first laid side by side in one (n, width) NumPy block: on the benchmark
    schema that turns 23 pieces into 8 and halves the time of the join. `Repeated` pieces
    (every fixed-shape feature's headers) are written straight into such a block.
    """
    merged: list[Piece] = []
    run: list[tuple[Piece, int]] = []
    for piece in pieces:
        width = _fixed_width(piece)
        if width is not None:
            run.append((piece, width))
            continue
        merged += _side_by_side(run)
        run = []
        merged.append(piece)
    merged += _side_by_side(run)
    columns = [column(m) for m in merged]  # a Repeated piece with no fixed-width neighbour
    if len(columns) == 1:
        return columns[0]
    # the separator is made here: a pa.scalar at import would load pandas (pyarrow's shim)
    return pc.binary_join_element_wise(*columns, pa.scalar(b"", BINARY))


def column(piece: Piece) -> pa.LargeBinaryArray:
    """A piece as an Arrow column (a `Repeated` one laid out: n copies of its bytes)."""
    if isinstance(piece, Repeated):
        width = len(piece.value)
        return binary(piece.value * piece.n, np.arange(piece.n + 1, dtype=np.int64) * width)
    return piece.array if isinstance(piece, Fixed) else piece


def sizes_of(piece: Piece) -> np.ndarray | int:
    """Byte length of each element of a piece (one int for a `Repeated` or `Fixed` one: it
    broadcasts)."""
    if isinstance(piece, Repeated):
        return len(piece.value)
    return piece.width if isinstance(piece, Fixed) else lengths(piece)


def _fixed_width(piece: Piece) -> int | None:
    """The one width of every element, or None when they differ."""
    if isinstance(piece, Repeated):
        return len(piece.value)
    if isinstance(piece, Fixed):
        return piece.width
    sizes = lengths(piece)
    width = int(sizes[0]) if len(sizes) else 0
    return width if len(sizes) and bool((sizes == width).all()) else None


def _side_by_side(run: list[tuple[Piece, int]]) -> list[Piece]:
    """Fixed-width pieces -> one piece, built as columns of a 2-D byte block: the `Repeated`
    ones (adjacent ones joined) written to every record, as one template row when they are
    most of it, else column by column; the others copied in as columns. A run of `Repeated`
    pieces only stays one."""
    pieces: list[tuple[Piece, int]] = []
    for piece, width in run:
        last = pieces[-1][0] if pieces else None
        if isinstance(piece, Repeated) and isinstance(last, Repeated):
            pieces[-1] = (Repeated(last.value + piece.value, piece.n), width + pieces[-1][1])
        else:
            pieces.append((piece, width))
    if len(pieces) < 2:
        return [piece for piece, _ in pieces]
    n = len(pieces[0][0])
    total = sum(width for _, width in pieces)
    block = np.empty((n, total), np.uint8)
    # (destination, source) copies; a source of one item (a header) goes to every record
    copies: list[tuple[np.ndarray, np.ndarray | np.void]] = []
    repeated = sum(width for piece, width in pieces if isinstance(piece, Repeated))
    if repeated * 2 >= total > 0:
        # mostly headers (scalar features): one template row written to every record, then
        # the columns over it (figures: benchmarks/README.md, "Headers written once")
        row = np.zeros(total, np.uint8)
        at = 0
        for piece, width in pieces:
            if isinstance(piece, Repeated):
                row[at : at + width] = np.frombuffer(piece.value, np.uint8)
            at += width
        whole = np.dtype((np.void, total))
        copies.append((block.view(whole)[:, 0], row.view(whole)[0]))
    else:  # mostly values (an image): each header into its own columns, the rest once
        at = 0
        for piece, width in pieces:
            if width and isinstance(piece, Repeated):
                item = np.dtype((np.void, width))
                copies.append((block[:, at : at + width].view(item)[:, 0],
                               np.frombuffer(piece.value, item)[0]))
            at += width
    at = 0
    for piece, width in pieces:
        if width and not isinstance(piece, Repeated):
            # whole `width`-byte items (void dtype) copy far faster than byte columns
            item = np.dtype((np.void, width))
            if isinstance(piece, Fixed):
                data = np.frombuffer(piece.data, item, n)
            else:
                data = np.frombuffer(piece.buffers()[2], item, n, int(offsets_of(piece)[0]))
            copies.append((block[:, at : at + width].view(item)[:, 0], data))
        at += width
    # filled a cache-sized band of rows at a time: every copy writes across each row, and
    # a band stays in L2 between them where the whole block (a pass per copy) did not
    # (benchmarks/README.md, "Two fast-path defects, the side-by-side block in bands")
    step = max(1, SIDE_BY_SIDE_BAND // max(total, 1))
    for lo in range(0, n, step):
        hi = lo + step
        for dst, src in copies:
            dst[lo:hi] = src if src.ndim == 0 else src[lo:hi]
    return [binary(block, np.arange(n + 1, dtype=np.int64) * total)]


SIDE_BY_SIDE_BAND = 512 << 10  # bytes of the block filled at a time


def per_length(sizes: np.ndarray | int, make: Callable[[int], bytes], n: int = 0) -> Piece:
    """Element i = make(sizes[i]), for bytes that depend only on a length: built once per
    distinct length and gathered in C++ (one `Repeated` piece when every size is the same, or
    `sizes` is one int for all `n` records). Lengths of one column span a small range, so a
    dense table indexed by (length - min) replaces a sort."""
    if isinstance(sizes, int):
        return Repeated(make(sizes), n)
    n = len(sizes)
    if not n:
        return binary(b"", np.zeros(1, np.int64))
    lo, hi = int(sizes.min()), int(sizes.max())
    if lo == hi:
        return Repeated(make(lo), n)
    if hi - lo > 1 << 16:
        uniq, index = np.unique(sizes, return_inverse=True)
    else:
        present = np.bincount(sizes - lo, minlength=hi - lo + 1)
        uniq = np.flatnonzero(present) + lo
        dense = np.zeros(hi - lo + 1, np.int64)
        dense[uniq - lo] = np.arange(len(uniq))
        index = dense[sizes - lo]
    table = pa.array([make(int(x)) for x in uniq], BINARY)
    return table.take(pa.array(index))


def _value_bytes(storage: str, values: pa.Array) -> list[Piece]:
    """Each value's wire bytes inside its (packed or repeated) list, one element per value,
    as pieces to concatenate element-wise (bytes: each value's header, then the value), so
    a caller that needs no regrouping joins them once with the rest of the record."""
    if storage == "int64":
        return [varints(_int64s(values))]
    if storage == "float":
        return [fixed(_float32s(values), 4, len(values))]
    blobs = _blobs(values)
    return [per_length(_blob_lengths(blobs), _blob_head), blobs]


def _float32s(values: pa.Array) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), np.float32).astype("<f4", copy=False)


def _int64s(values: pa.Array) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), np.int64)


def _blobs(values: pa.Array) -> pa.LargeBinaryArray:
    return values.cast(BINARY) if values.type != BINARY else values


def _blob_head(length: int) -> bytes:
    """A bytes value's own header in its BytesList: field 1, then its length."""
    return b"\x0a" + varint(length)


def _blob_lengths(blobs: pa.LargeBinaryArray) -> np.ndarray:
    return np.asarray(pc.binary_length(blobs).to_numpy(zero_copy_only=False), np.int64)


def _feature_header(storage: str, payload: int) -> bytes:
    """Feature bytes before the list payload: oneof tag, length, packed-field header."""
    if storage != "bytes" and payload:
        inner = b"\x0a" + varint(payload)
        return bytes([STORAGE_KINDS[storage].wire_tag]) + varint(len(inner) + payload) + inner
    return bytes([STORAGE_KINDS[storage].wire_tag]) + varint(payload)


def _entry_header(name: bytes, value_len: int) -> bytes:
    """Map entry (key=name, value=message of value_len bytes) up to the value's bytes."""
    body = b"\x0a" + varint(len(name)) + name + b"\x12" + varint(value_len)
    return b"\x0a" + varint(len(body) + value_len) + body


def _features(
    storage: str, values: pa.Array, groups: np.ndarray, wrap: Callable[[bytes, int], bytes]
) -> list[Piece]:
    """A Feature for each group of values (a record, or a step), with `wrap(header,
    feature_len)` prepended to its header -> [headers, *payload pieces]. When every group is
    one value (a scalar or one blob per record) the value pieces are the payload as they
    are: joining them here would copy every value once more (a 784-byte image per record)."""
    def head(p: int) -> bytes:
        feature_head = _feature_header(storage, p)
        return wrap(feature_head, len(feature_head) + p)

    one_each = _one_each(groups, len(values))
    if one_each and storage == "int64":  # headers in the varints' table when there is one
        return varint_pieces(_int64s(values), prefix=head)
    if one_each and storage == "bytes":  # every header depends on the blob's length alone
        blobs = _blobs(values)

        def heads(length: int) -> bytes:
            value_head = _blob_head(length)
            return head(len(value_head) + length) + value_head

        return [per_length(_blob_lengths(blobs), heads), blobs]
    pieces = _value_bytes(storage, values)
    if not one_each:
        pieces = [regroup(join(pieces), groups)]
    return [per_length(_total_size(pieces), head, len(groups) - 1), *pieces]


def _total_size(pieces: Sequence[Piece]) -> np.ndarray | int:
    """Each element's size summed over `pieces`: one int when every piece has one size
    (a scalar feature's), so no column of n equal sizes is made and summed."""
    total: np.ndarray | int = 0
    for piece in pieces:
        total = total + sizes_of(piece)
    return total


def _one_each(groups: np.ndarray, n: int) -> bool:
    """Whether group i is exactly value i (offsets 0, 1, ..., n)."""
    return len(groups) == n + 1 and bool((np.diff(groups) == 1).all()) and (n == 0 or groups[0] == 0)


def _list_parts(col: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(child values, offsets into them) of a LargeList column, slicing accounted for."""
    offsets = np.asarray(col.offsets.to_numpy(), np.int64)
    start = int(offsets[0])
    return (col.values.slice(start, int(offsets[-1]) - start),
            offsets - start if start else offsets)


def _context(columns: Sequence[tuple[str, str, pa.Array]]) -> list[Piece]:
    """Map entries of the given context features, two pieces (header, payload) each."""
    parts: list[Piece] = []
    for name, storage, col in columns:
        values, offsets = _list_parts(col)
        key = name.encode()
        parts += _features(storage, values, offsets,
                           lambda h, v, key=key: _entry_header(key, v) + h)
    return parts


def _message(tag: int, parts: list[Piece], n: int) -> list[Piece]:
    """`parts` as one length-delimited field `tag`: the field header, then the parts."""
    return [per_length(_total_size(parts), lambda f: bytes([tag]) + varint(f), n), *parts]


def serialize_examples(columns: Sequence[tuple[str, str, pa.Array]]) -> pa.LargeBinaryArray:
    """(name, storage, LargeList column) per feature -> serialized tf.train.Example column."""
    n = len(columns[0][2])
    return join(_message(0x0A, _context(columns), n))


def serialize_sequence_examples(
    context: Sequence[tuple[str, str, pa.Array]], sequence: Sequence[tuple[str, str, pa.Array]],
    n: int,
) -> pa.LargeBinaryArray:
    """Context features (LargeList per record) and sequence features (LargeList of steps of
    LargeList of values) -> serialized tf.train.SequenceExample column."""
    lists: list[Piece] = []
    for name, storage, col in sequence:
        steps, record_steps = _list_parts(col)
        values, step_values = _list_parts(steps)
        # FeatureList.feature entries: 0x0a len Feature, one per step, then grouped per record
        per_step = _features(storage, values, step_values, lambda h, v: b"\x0a" + varint(v) + h)
        per_record = regroup(join(per_step), record_steps)
        key = name.encode()
        lists += [per_length(lengths(per_record), lambda v, key=key: _entry_header(key, v)),
                  per_record]
    return join([*_message(0x0A, _context(context), n), *_message(0x12, lists, n)])


def binary_column(values: pa.Array | pa.ChunkedArray | Sequence[bytes]) -> pa.LargeBinaryArray:
    """Already-serialized records (any Arrow binary column or a list of bytes) as one column."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        values = pa.array(list(values), BINARY)
    return values if values.type == BINARY else values.cast(BINARY)
