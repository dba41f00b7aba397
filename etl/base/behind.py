"""Work done in order by a thread of its own while the caller goes on: the shard writer's
sha256 and index lines, and a shard file's O_DIRECT writes (etl.storage.direct_file).

Hashing a shard and formatting its index lines (Arrow's CSV writer) took a third of the
shard-writing thread's time; both release the GIL, so a second thread does them for the
pieces already written while the first gathers the next (benchmarks/README.md, "Session of
2026-11-27"). The items are immutable (bytes, Arrow buffers, NumPy arrays nobody writes to
again) and at most `depth` wait, so memory grows by `depth` pieces at most. An error in the
thread is raised in the caller at its next `put`, or at `wait`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class Behind:
    """`put(item)` hands `item` to `fn`, called in order on one thread; `wait()` returns once
    every item is done (or raises the first error); `close()` stops the thread either way."""

    def __init__(self, fn: Callable[[Any], None], name: str, depth: int = 2) -> None:
        self._fn = fn
        self._name = name
        self._items: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def put(self, item: Any) -> None:
        self._raise()
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name=self._name, daemon=True)
            self._thread.start()
        self._items.put(item)

    def _drain(self) -> None:
        while (item := self._items.get()) is not _STOP:
            if self._error is None:
                try:
                    self._fn(item)
                except BaseException as e:  # noqa: BLE001 - raised again in the caller
                    self._error = e

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def wait(self) -> None:
        self.close()
        self._raise()

    def close(self) -> None:
        if self._thread is not None:
            self._items.put(_STOP)
            self._thread.join()
            self._thread = None
