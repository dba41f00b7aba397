"""A SHA-256 computed by a thread of its own while the caller goes on.

The manifest needs every shard's sha256. Hashed in the shard-writing thread, it was a fifth of
that thread's time (1.85 GB/s); hashlib releases the GIL for large buffers, so a second thread
hashes the pieces already written while the first gathers the next. The pieces are immutable
(bytes, Arrow buffers) and at most DEPTH wait, so memory grows by DEPTH pieces at most.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from typing import Any


class HashBehind:
    """`update` hands a piece over; `hexdigest` waits for every piece and gives the digest."""

    DEPTH = 2

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._pieces: queue.Queue[Any] = queue.Queue(maxsize=self.DEPTH)
        self._thread: threading.Thread | None = None
        self._digest: str | None = None

    def update(self, data: Any) -> None:
        """Hash `data` (bytes-like, never changed afterwards) after the pieces before it."""
        if len(memoryview(data)) < 1 << 16:  # small: the hand-over would cost more
            self._wait()
            self._sha.update(data)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="etl-hash", daemon=True)
            self._thread.start()
        self._pieces.put(data)

    def _drain(self) -> None:
        while (data := self._pieces.get()) is not None:
            self._sha.update(data)

    def _wait(self) -> None:
        if self._thread is not None:
            self._pieces.put(None)
            self._thread.join()
            self._thread = None

    def hexdigest(self) -> str:
        if self._digest is None:
            self._wait()
            self._digest = self._sha.hexdigest()
        return self._digest

    def close(self) -> None:
        """Stop the thread without a digest (the writer failed)."""
        self._wait()
