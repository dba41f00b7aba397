"""Beam coders for what crosses a shuffle: sorted runs and per-shard chunks (the engine),
read tasks and shard tasks (Reshuffles).

Declared (registered and named by `with_output_types` in transforms/convert.py) instead of
left to Beam's fallback, which pickles: a pickle is not a declared wire format, is not
guaranteed deterministic, and copies NumPy arrays through the pickler's own framing. Runs and
chunks travel packed by etl.shuffle.chunk_codec (compressed, checksummed; the format is
documented there): a Chunk already is its packed bytes, so its coder only hands them over.
Both are deterministic: the same value always encodes to the same bytes.

    Chunk:     chunk_codec.pack(keys, ids, offsets, payload)
    SortedRun: len(split):u32 | split utf-8 | the same as a Chunk
"""

from __future__ import annotations

import struct

import apache_beam as beam

from etl.job.read_plan import ReadTask
from etl.shuffle import chunk_codec
from etl.shuffle.engine import Chunk, PackedRun
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import SortedRun

_SPLIT = struct.Struct("<I")


class ChunkCoder(beam.coders.Coder):
    """etl.shuffle.engine.Chunk <-> its packed bytes (unpacked and checked by the shard
    writer, which names the shard if they are damaged)."""

    def encode(self, value: Chunk) -> bytes:
        return value.data

    def decode(self, encoded: bytes) -> Chunk:
        return Chunk(encoded)

    def estimate_size(self, value: Chunk) -> int:
        return len(value.data)

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return Chunk


class SortedRunCoder(beam.coders.Coder):
    """etl.shuffle.runs.SortedRun <-> bytes (see the module docstring). Decodes to an
    etl.shuffle.engine.PackedRun: the index unpacked, the records left compressed for the
    partition step to pass on (a PackedRun encodes to the bytes it came from)."""

    def encode(self, value: SortedRun | PackedRun) -> bytes:
        split = value.split.encode()
        data = (value.data if isinstance(value, PackedRun)
                else chunk_codec.pack(value.keys, value.ids, value.offsets, value.payload))
        return b"".join([_SPLIT.pack(len(split)), split, data])

    def decode(self, encoded: bytes) -> PackedRun:
        (n,) = _SPLIT.unpack_from(encoded, 0)
        split = encoded[_SPLIT.size : _SPLIT.size + n].decode()
        data = memoryview(encoded)[_SPLIT.size + n :]  # no copy: the run keeps `encoded`
        return PackedRun(split, data,
                         chunk_codec.open_packed(data, f"a sorted run of split {split!r}"))

    def estimate_size(self, value: SortedRun | PackedRun) -> int:
        """The run's unpacked size, an upper bound: Beam sizes elements for its metrics and
        would otherwise compress every run once more per consumer just to measure it."""
        if isinstance(value, PackedRun):
            return len(value.data) + len(value.split) + _SPLIT.size
        return value.nbytes + len(value.split) + _SPLIT.size + chunk_codec.HEADER.size

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
