"""Deterministic, vectorised protobuf serialisation of tf.train.Example / SequenceExample.

Why hand-written: tfx_bsl's C++ `RecordBatchToExamplesEncoder` serialises the feature map
in an order that changes from process to process (measured: the same batch gave different
bytes in two processes), which would break "same inputs, same seed -> same shard bytes";
it also has no SequenceExample encoder. This module writes features in schema order with
canonical varints, so bytes are reproducible, and it works on whole columns: varints and
lengths are computed with NumPy, every per-length header is built once per distinct
length, and records are assembled by one C-level `b"".join` per record. Measured on the
benchmark CSV schema (8 floats packed, 3 int64), 65k rows, same process: ≈0.5 µs/record
vs tfx_bsl's ≈0.8 µs/record (/tmp-style micro-benchmark; see benchmarks/README.md).

Field numbers (tensorflow/core/example/{feature,example}.proto): Example.features=1;
Features.feature=1 (map entry: key=1, value=2); Feature oneof bytes_list=1, float_list=2,
int64_list=3; *List.value=1 (packed for float/int64); SequenceExample.context=1,
feature_lists=2; FeatureLists.feature_list=1 (map); FeatureList.feature=1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_FEATURE_TAG = {"bytes": 0x0A, "float": 0x12, "int64": 0x1A}


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
    for shift in range(7, 64, 7):
        n += v >= np.uint64(1 << shift)
    return n


def varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Varint-encode a whole int64 column at once -> (buffer, byte offsets per value)."""
    v = values.astype(np.int64).view(np.uint64)
    nbytes = varint_lengths(v)
    offsets = np.zeros(len(v) + 1, np.int64)
    np.cumsum(nbytes, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    for j in range(int(nbytes.max()) if len(v) else 0):
        has = nbytes > j
        byte = ((v[has] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        more = (nbytes[has] > j + 1).astype(np.uint8) << 7
        out[offsets[:-1][has] + j] = byte | more
    return out.tobytes(), offsets


def per_length(lengths: np.ndarray, make: Callable[[int], bytes]) -> tuple[list[bytes], np.ndarray]:
    """Header bytes that depend only on a length: built once per distinct length.

    Lengths of one column span a small range, so a dense table indexed by (length - min)
    replaces a sort; a constant length (fixed-shape features) costs one list repeat.
    """
    n = len(lengths)
    if not n:
        return [], np.zeros(0, np.int64)
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo == hi:
        head = make(lo)
        return [head] * n, np.full(n, len(head), np.int64)
    if hi - lo > 1 << 16:
        uniq, index = np.unique(lengths, return_inverse=True)
    else:
        present = np.bincount(lengths - lo, minlength=hi - lo + 1)
        uniq = np.flatnonzero(present) + lo
        dense = np.zeros(hi - lo + 1, np.int64)
        dense[uniq - lo] = np.arange(len(uniq))
        index = dense[lengths - lo]
    table = [make(int(x)) for x in uniq]
    sizes = np.array([len(t) for t in table], np.int64)
    objects = np.empty(len(table), object)
    objects[:] = table
    return objects[index].tolist(), sizes[index]


def slices(buffer: bytes, offsets: np.ndarray) -> list[bytes]:
    """buffer[offsets[i]:offsets[i+1]] for every i, in one C loop (Arrow)."""
    n = len(offsets) - 1
    arr = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(buffer)]
    )
    return arr.to_pylist()


def _value_bytes(storage: str, values: pa.Array) -> tuple[bytes, np.ndarray]:
    """Each value's wire bytes inside its list -> (buffer, byte offsets per value)."""
    if storage == "int64":
        return varints(np.asarray(values.to_numpy(zero_copy_only=False), np.int64))
    if storage == "float":
        data = np.asarray(values.to_numpy(zero_copy_only=False), np.float32).astype("<f4")
        return data.tobytes(), np.arange(len(values) + 1, dtype=np.int64) * 4
    blobs = values.to_pylist()
    lengths = np.asarray(pc.binary_length(values).to_numpy(zero_copy_only=False), np.int64)
    heads, head_sizes = per_length(lengths, lambda n: b"\x0a" + varint(n))
    offsets = np.zeros(len(blobs) + 1, np.int64)
    np.cumsum(head_sizes + lengths, out=offsets[1:])
    return b"".join(chain.from_iterable(zip(heads, blobs, strict=True))), offsets


def _feature_header(storage: str, payload: int) -> bytes:
    """Feature bytes before the list payload: oneof tag, length, packed-field header."""
    if storage != "bytes" and payload:
        inner = b"\x0a" + varint(payload)
        return bytes([_FEATURE_TAG[storage]]) + varint(len(inner) + payload) + inner
    return bytes([_FEATURE_TAG[storage]]) + varint(payload)


def _entry_header(name: bytes, value_len: int) -> bytes:
    """Map entry (key=name, value=message of value_len bytes) up to the value's bytes."""
    body = b"\x0a" + varint(len(name)) + name + b"\x12" + varint(value_len)
    return b"\x0a" + varint(len(body) + value_len) + body


def _features(
    storage: str, values: pa.Array, groups: np.ndarray, wrap: Callable[[bytes, int], bytes]
) -> tuple[list[bytes], list[bytes], np.ndarray]:
    """A Feature for each group of values (a record, or a step), with `wrap(header,
    feature_len)` prepended to its header -> (headers, payloads, total lengths)."""
    buffer, value_offsets = _value_bytes(storage, values)
    group_offsets = value_offsets[groups]
    payload_sizes = np.diff(group_offsets)

    def head(p: int) -> bytes:
        feature_head = _feature_header(storage, p)
        return wrap(feature_head, len(feature_head) + p)

    heads, head_sizes = per_length(payload_sizes, head)
    return heads, slices(buffer, group_offsets), head_sizes + payload_sizes


def _list_parts(col: pa.Array) -> tuple[pa.Array, np.ndarray]:
    offsets = np.asarray(col.offsets.to_numpy(), np.int64)
    return col.values, offsets


def _context(columns: Sequence[tuple[str, str, pa.Array]], n: int) -> tuple[list[list[bytes]], np.ndarray]:
    """Map entries of the given context features per record, plus their total length."""
    parts: list[list[bytes]] = []
    total = np.zeros(n, np.int64)
    for name, storage, col in columns:
        values, offsets = _list_parts(col)
        key = name.encode()
        heads, payloads, sizes = _features(
            storage, values, offsets, lambda h, v, key=key: _entry_header(key, v) + h)
        parts += [heads, payloads]
        total += sizes
    return parts, total


def serialize_examples(columns: Sequence[tuple[str, str, pa.Array]]) -> list[bytes]:
    """(name, storage, LargeList column) per feature -> serialized tf.train.Example list."""
    n = len(columns[0][2])
    parts, total = _context(columns, n)
    prefix, _ = per_length(total, lambda f: b"\x0a" + varint(f))
    return list(map(b"".join, zip(prefix, *parts, strict=True)))


def serialize_sequence_examples(
    context: Sequence[tuple[str, str, pa.Array]], sequence: Sequence[tuple[str, str, pa.Array]],
    n: int,
) -> list[bytes]:
    """Context features (LargeList per record) and sequence features (LargeList of steps of
    LargeList of values) -> serialized tf.train.SequenceExample list."""
    ctx_parts, ctx_total = _context(context, n)
    ctx_prefix, _ = per_length(ctx_total, lambda f: b"\x0a" + varint(f))
    fl_parts: list[list[bytes]] = []
    fl_total = np.zeros(n, np.int64)
    for name, storage, col in sequence:
        steps, record_steps = _list_parts(col)
        values, step_values = _list_parts(steps)
        # FeatureList.feature entries: 0x0a len Feature, one per step, then grouped per record
        heads, payloads, sizes = _features(storage, values, step_values,
                                           lambda h, v: b"\x0a" + varint(v) + h)
        step_bytes = b"".join(chain.from_iterable(zip(heads, payloads, strict=True)))
        step_offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=step_offsets[1:])
        record_offsets = step_offsets[record_steps]
        lists = slices(step_bytes, record_offsets)
        list_len = np.diff(record_offsets)
        key = name.encode()
        eheads, esizes = per_length(list_len, lambda v, key=key: _entry_header(key, v))
        fl_parts += [eheads, lists]
        fl_total += esizes + list_len
    fl_prefix, _ = per_length(fl_total, lambda g: b"\x12" + varint(g))
    return list(map(b"".join, zip(ctx_prefix, *ctx_parts, fl_prefix, *fl_parts, strict=True)))

