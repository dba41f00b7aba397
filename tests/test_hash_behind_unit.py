"""etl.base.hash_behind: the digest of pieces hashed by a thread of its own is hashlib's of
their concatenation, in order, large and small pieces mixed; a writer that fails leaves no
thread behind."""

from __future__ import annotations

import hashlib
import os
import threading

import pyarrow as pa

from etl.base.hash_behind import HashBehind


def test_the_digest_is_that_of_the_pieces_in_order() -> None:
    pieces = [os.urandom(n) for n in (0, 10, 1 << 16, 3 << 20, 5, 1 << 20, 70_000, 1)]
    pieces.append(pa.py_buffer(os.urandom(2 << 20)))  # an Arrow buffer, as the shard writer's
    behind = HashBehind()
    for piece in pieces:
        behind.update(piece)
    want = hashlib.sha256(b"".join(bytes(p) for p in pieces)).hexdigest()
    assert behind.hexdigest() == want
    assert behind.hexdigest() == want  # asked again: the same, no thread left
    assert not [t for t in threading.enumerate() if t.name == "etl-hash"]


def test_nothing_written_is_the_empty_digest() -> None:
    assert HashBehind().hexdigest() == hashlib.sha256().hexdigest()


def test_close_without_a_digest_stops_the_thread() -> None:
    behind = HashBehind()
    for _ in range(5):
        behind.update(os.urandom(1 << 20))
    behind.close()
    assert not [t for t in threading.enumerate() if t.name == "etl-hash"]
