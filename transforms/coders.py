"""Beam coders for what crosses a shuffle: sorted runs and per-shard chunks (the engine),
read tasks and shard tasks (Reshuffles).

Declared (registered and named by `with_output_types` in transforms/convert.py) instead of
left to Beam's fallback, which pickles: a pickle is not a declared wire format, is not
guaranteed deterministic, and copies NumPy arrays through the pickler's own framing. These
write each array's bytes once, little-endian, behind a fixed header, and decode to arrays
over the received bytes (immutable, owned by the decoded value). Both are deterministic:
the same value always encodes to the same bytes.

    Chunk:     n:u64 | keys:u64[n] | ids:u64[n] | offsets:i64[n+1] | payload
    SortedRun: len(split):u32 | split utf-8 | the same as a Chunk
"""

from __future__ import annotations

import struct

import apache_beam as beam
import numpy as np

from etl.job.read_plan import ReadTask
from etl.shuffle.engine import Chunk
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import SortedRun

_N = struct.Struct("<Q")
_SPLIT = struct.Struct("<I")


def _encode_arrays(keys: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
                   payload: bytes | memoryview) -> list[bytes | memoryview]:
    return [_N.pack(len(keys)), np.asarray(keys, "<u8").tobytes(),
            np.asarray(ids, "<u8").tobytes(), np.asarray(offsets, "<i8").tobytes(),
            memoryview(payload)]


def _decode_arrays(data: bytes, at: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bytes]:
    (n,) = _N.unpack_from(data, at)
    at += _N.size
    keys = np.frombuffer(data, "<u8", n, at)
    ids = np.frombuffer(data, "<u8", n, at + 8 * n)
    offsets = np.frombuffer(data, "<i8", n + 1, at + 16 * n)
    start = at + 24 * n + 8
    payload = data[start : start + int(offsets[-1])]
    if len(payload) != int(offsets[-1]):
        raise ValueError(f"truncated chunk: {len(payload)} of {int(offsets[-1])} payload bytes")
    return keys, ids, offsets, payload


class ChunkCoder(beam.coders.Coder):
    """etl.shuffle.engine.Chunk <-> bytes (see the module docstring)."""

    def encode(self, value: Chunk) -> bytes:
        return b"".join(_encode_arrays(value.keys, value.ids, value.offsets, value.payload))

    def decode(self, encoded: bytes) -> Chunk:
        return Chunk(*_decode_arrays(encoded, 0))

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return Chunk


class SortedRunCoder(beam.coders.Coder):
    """etl.shuffle.runs.SortedRun <-> bytes (see the module docstring)."""

    def encode(self, value: SortedRun) -> bytes:
        split = value.split.encode()
        return b"".join([_SPLIT.pack(len(split)), split,
                         *_encode_arrays(value.keys, value.ids, value.offsets,
                                         memoryview(value.payload))])

    def decode(self, encoded: bytes) -> SortedRun:
        (n,) = _SPLIT.unpack_from(encoded, 0)
        split = encoded[_SPLIT.size : _SPLIT.size + n].decode()
        keys, ids, offsets, payload = _decode_arrays(encoded, _SPLIT.size + n)
        return SortedRun(split, keys, ids, offsets, payload)

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return SortedRun


class PlainDataclassCoder(beam.coders.Coder):
    """Frozen dataclasses of plain fields (read tasks, shard plans), field by field: Beam's
    deterministic encoding of FastPrimitivesCoder, which refuses what it cannot order."""

    def __init__(self) -> None:
        self._coder = beam.coders.FastPrimitivesCoder().as_deterministic_coder("tfrecord-etl")

    def encode(self, value: object) -> bytes:
        return self._coder.encode(value)

    def decode(self, encoded: bytes) -> object:
        return self._coder.decode(encoded)

    def is_deterministic(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


beam.coders.registry.register_coder(Chunk, ChunkCoder)
beam.coders.registry.register_coder(SortedRun, SortedRunCoder)
for _plain in (ReadTask, ShardPlan):
    beam.coders.registry.register_coder(_plain, PlainDataclassCoder)
