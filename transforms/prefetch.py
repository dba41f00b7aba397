"""Read ahead and encode in parallel: threads for a block pipeline.

Parsing (pyarrow's CSV reader, zlib for gzipped IDX, Parquet) releases the GIL, and so do
the column conversion, the C++ join and the spill writes that follow it; running the reader
one or two blocks ahead therefore keeps a second core busy with a single input file.
Memory stays bounded: at most `depth` blocks wait in the queue.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from etl.sources.base import Block, Source, Split
from etl.storage import fs

T = TypeVar("T")
R = TypeVar("R")


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Yield what `items` yields, produced up to `depth` items ahead in another thread.

    An exception in the producer is re-raised in the consumer at the same point; closing the
    generator early (an error downstream) stops the producer after its current item.
    """
    yield from ReadAhead(items, depth).consume()


class ReadAhead(Generic[T]):
    """`items` produced in a thread of its own, from when this is made: at most `depth` items
    wait for the consumer, or more while those waiting hold under `budget` bytes (`size_of`
    each). A launcher starts one with a budget before its consumer exists (transforms/
    early_read.py), then `limit`s it to `depth` when the consumer takes it over.

    An exception in the producer is re-raised by `consume` at the same point; `close` stops
    the producer after its current item and drops what waits."""

    def __init__(self, items: Iterator[T], depth: int = 2, budget: int = 0,
                 size_of: Callable[[T], int] | None = None, name: str = "etl-prefetch") -> None:
        self._items = items
        self._depth = depth
        self._budget = budget
        self._size_of = size_of
        self._waiting: deque[tuple[T, int]] = deque()
        self._held = 0  # bytes of the items waiting
        self._changed = threading.Condition()
        self._stopped = False
        self._done = False
        self._error: BaseException | None = None
        self._worker = threading.Thread(target=self._produce, name=name, daemon=True)
        self._worker.start()

    def _room(self) -> bool:
        return len(self._waiting) < self._depth or self._held < self._budget

    def _produce(self) -> None:
        try:
            for item in self._items:
                size = self._size_of(item) if self._size_of is not None else 0
                with self._changed:
                    while not self._stopped and not self._room():
                        self._changed.wait()
                    if self._stopped:
                        return
                    self._waiting.append((item, size))
                    self._held += size
                    self._changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            with self._changed:
                self._error = exc
        finally:
            with self._changed:
                self._done = True
                self._changed.notify_all()
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def limit(self, depth: int, budget: int = 0) -> None:
        """From now on at most `depth` items (or `budget` bytes) wait."""
        with self._changed:
            self._depth, self._budget = depth, budget
            self._changed.notify_all()

    def consume(self) -> Iterator[T]:
        """The items in order; closing this generator stops the producer."""
        try:
            while True:
                with self._changed:
                    while not self._waiting and not self._done and not self._stopped:
                        self._changed.wait()
                    if self._stopped:
                        raise RuntimeError("read-ahead consumed after it was closed")
                    if not self._waiting:
                        if self._error is not None:
                            raise self._error
                        return
                    item, size = self._waiting.popleft()
                    self._held -= size
                    self._changed.notify_all()
                yield item
        finally:
            self.close()

    def close(self, wait: bool = True) -> None:
        """Stop the producer after its current item and drop what waits; `wait`: until the
        producer has stopped (else it ends on its own, its thread a daemon)."""
        with self._changed:
            self._stopped = True
            self._waiting.clear()
            self._held = 0
            self._changed.notify_all()
        if wait and self._worker is not threading.current_thread():
            self._worker.join()


def read_in_streams(reader: Source, split: Split, streams: int, depth: int = 2) -> Iterator[Block]:
    """A whole unit's blocks, read as `streams` of its splits at once (a thread and a parse
    each), handed out in turn, one block of each: where one parse stream is the slowest step
    of a worker with one file (Arrow's CSV reader), two streams take two cores. Anything else
    (one stream, a split already cut, a format that does not read in streams, a unit under
    MIN_STREAM_BYTES a stream) is `read_split(split)` itself.

    Every block keeps its records' positions, lines and bad rows (a unit's splits give exactly
    its records: etl.sources.base.Split), so the runs and shards are the same; only the order
    the blocks arrive in differs. A block's `end_offset` becomes the bytes read so far over
    all streams (from the unit's start), so progress still rises with each block."""
    if streams < 2 or not split.whole or not reader.READS_IN_STREAMS:
        return reader.read_split(split)
    size = split.size if split.size is not None else fs.size(split.path)
    if size < streams * MIN_STREAM_BYTES:
        return reader.read_split(split)
    parts = reader.splits(split.path, -(-size // streams))
    if len(parts) < 2:
        return reader.read_split(split)
    return _in_turn(reader, parts, size, depth)


MIN_STREAM_BYTES = 32 << 20  # a smaller unit is read as one stream (its cut costs a scan)


def _in_turn(reader: Source, parts: list[Split], size: int, depth: int) -> Iterator[Block]:
    aheads = [ReadAhead(reader.read_split(part), depth, name=f"etl-read-{i}")
              for i, part in enumerate(parts)]
    done = [0] * len(parts)  # bytes of each part read so far
    live = [(i, ahead.consume()) for i, ahead in enumerate(aheads)]
    try:
        while live:
            for i, blocks in list(live):
                block = next(blocks, None)
                if block is None:
                    live.remove((i, blocks))
                    continue
                if block.end_offset is not None:
                    part = parts[i]
                    stop = size if part.stop is None else part.stop
                    done[i] = max(done[i], min(block.end_offset, stop) - part.start)
                    block = dataclasses.replace(block, end_offset=sum(done))
                yield block
    finally:
        for ahead in aheads:
            ahead.close()


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
