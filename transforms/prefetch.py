"""Read ahead and encode in parallel: threads for a block pipeline.

Parsing (pyarrow's CSV reader, zlib for gzipped IDX, Parquet) releases the GIL, and so do
the column conversion, the C++ join and the spill writes that follow it; running the reader
one or two blocks ahead therefore keeps a second core busy with a single input file.
Memory stays bounded: at most `depth` blocks wait in the queue.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
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


def ordered_map(fn: Callable[[T], R], items: Iterator[T], workers: int | None = None) -> Iterator[R]:
    """fn(item) for every item, computed by `workers` threads, yielded in input order.

    At most `workers + 1` items are in flight, so memory stays at a few blocks. Encoding a
    block (Arrow compute, NumPy, the C++ join, file writes) mostly runs without the GIL, so
    two blocks encode at once on two cores.
    """
    workers = workers or max(os.cpu_count() or 1, 1)
    if workers <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="etl-encode") as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
