"""User-style generator functions for the `python` source tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def ids_and_pairs(n: int, shard_index: int = 0, num_shards: int = 1) -> Iterator[dict[str, Any]]:
    for i in range(shard_index, n, num_shards):
        yield {"id": i, "a": i * 0.5, "b": -float(i)}
