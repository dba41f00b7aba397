"""User-style generator functions for the `python` source tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def ids_and_pairs(n: int, shard_index: int = 0, num_shards: int = 1) -> Iterator[dict[str, Any]]:
    for i in range(shard_index, n, num_shards):
        yield {"id": i, "a": i * 0.5, "b": -float(i)}


def ids_and_a_thread_that_never_ends(n: int = 10):
    """Records 0..n-1, after starting a non-daemon thread that blocks for good (what a thread
    left stuck by a stopped pipeline does to the interpreter's exit)."""
    import threading  # noqa: PLC0415 - test-only generator
    threading.Thread(target=threading.Event().wait, name="stuck", daemon=False).start()
    for i in range(n):
        yield {"id": i, "a": i * 0.5, "b": -i}
