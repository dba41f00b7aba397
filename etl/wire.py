"""Protobuf wire format for the tf.train list payloads, built from whole columns with NumPy.

tfx_bsl's C++ encoder covers `tf.train.Example`; it has no SequenceExample encoder, so the
`feature_lists` part of a SequenceExample is framed here. Field numbers follow
tensorflow/core/example/{feature,example}.proto.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

# Feature.kind oneof tags (field << 3 | wire type 2): bytes_list=1, float_list=2, int64_list=3.
_FEATURE_TAG = {"bytes": b"\x0a", "float": b"\x12", "int64": b"\x1a"}


def varint(value: int) -> bytes:
    """One unsigned varint (negative int64 values are written as their two's complement)."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Varint-encode a whole int64 column at once -> (buffer, byte offsets per value)."""
    v = values.astype(np.int64).view(np.uint64)
    n = len(v)
    nbytes = np.ones(n, np.int64)
    for shift in range(7, 64, 7):
        nbytes += v >= np.uint64(1 << shift)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(nbytes, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    for j in range(int(nbytes.max()) if n else 0):
        has = nbytes > j
        byte = ((v[has] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        more = (nbytes[has] > j + 1).astype(np.uint8) << 7
        out[offsets[:-1][has] + j] = byte | more
    return out.tobytes(), offsets


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


class ListPayloads:
    """Per-run access to the packed payload of each value run of a storage column."""

    def __init__(self, storage: str, values: pa.Array):
        self.storage = storage
        if storage == "int64":
            self.buffer, self.offsets = varints(np.asarray(values.to_numpy(), np.int64))
        elif storage == "float":
            self.buffer = np.asarray(values.to_numpy(), np.float32).astype("<f4").tobytes()
            self.offsets = np.arange(len(values) + 1, dtype=np.int64) * 4
        else:
            self.blobs = values.to_pylist()

    def feature(self, start: int, stop: int) -> bytes:
        """Serialized `tf.train.Feature` holding values[start:stop]."""
        if self.storage == "bytes":
            inner = b"".join(length_delimited(b"\x0a", b) for b in self.blobs[start:stop])
        else:
            packed = self.buffer[self.offsets[start] : self.offsets[stop]]
            inner = length_delimited(b"\x0a", packed) if packed else b""
        return length_delimited(_FEATURE_TAG[self.storage], inner)


def feature_lists(entries: list[tuple[bytes, list[bytes]]]) -> bytes:
    """`FeatureLists` message: name -> list of serialized step Features."""
    out = []
    for key, steps in entries:
        feature_list = b"".join(length_delimited(b"\x0a", s) for s in steps)
        entry = length_delimited(b"\x0a", key) + length_delimited(b"\x12", feature_list)
        out.append(length_delimited(b"\x0a", entry))
    return b"".join(out)
