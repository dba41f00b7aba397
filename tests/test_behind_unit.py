"""etl.base.behind: items handed to a thread of its own are done in order, all of them before
`wait` returns; an error there reaches the caller at its next `put` or at `wait`, and no item
after it is done; `close` leaves no thread behind, whatever happened."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from etl.base.behind import Behind


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_items_are_done_in_order_before_wait_returns() -> None:
    pieces = [os.urandom(n) for n in (0, 10, 1 << 16, 3 << 20, 5, 1 << 20, 70_000, 1)]
    sha = hashlib.sha256()
    behind = Behind(sha.update, "test-behind")
    for piece in pieces:
        behind.put(piece)
    behind.wait()
    assert sha.hexdigest() == hashlib.sha256(b"".join(pieces)).hexdigest()
    assert not _threads("test-behind")


def test_an_error_reaches_the_caller_and_stops_the_work() -> None:
    done: list[int] = []

    def work(item: int) -> None:
        if item == 3:
            raise OSError(28, "No space left on device")
        done.append(item)

    behind = Behind(work, "test-behind", depth=1)
    with pytest.raises(OSError, match="No space left"):
        for item in range(100):
            behind.put(item)
        behind.wait()
    behind.close()
    assert done == [0, 1, 2]  # nothing after the failed item
    assert not _threads("test-behind")


def test_close_without_wait_stops_the_thread() -> None:
    behind = Behind(lambda item: None, "test-behind")
    for item in range(5):
        behind.put(item)
    behind.close()
    behind.close()  # twice: nothing left to stop
    assert not _threads("test-behind")
