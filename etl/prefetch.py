"""Read ahead: run a block iterator in a background thread while the caller works.

Parsing (pyarrow's CSV reader, zlib for gzipped IDX, Parquet) releases the GIL, and so do
the column conversion, the C++ join and the spill writes that follow it; running the reader
one or two blocks ahead therefore keeps a second core busy with a single input file.
Memory stays bounded: at most `depth` blocks wait in the queue.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Yield what `items` yields, produced up to `depth` items ahead in another thread.

    An exception in the producer is re-raised in the consumer at the same point; closing the
    generator early (an error downstream) stops the producer after its current item.
    """
    waiting: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                waiting.put((item, None))
            waiting.put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            waiting.put((_DONE, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="etl-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, error = waiting.get()
            if item is _DONE:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                waiting.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()
