"""Work a run's clean-up must wait for before it removes the run's files.

Stopped by a signal, the local runner does not wait for its bundles: its SDK harness runs
them on Beam's shared thread pool, whose `shutdown()` does nothing (apache_beam
utils/thread_pool_executor.py). A shard upload still under way when the launcher's clean-up
removed the run's gs:// temp prefix landed afterwards and stayed there, named by no marker
(tests/test_signals.py, gs:// write phase). The DoFns that write hold this
for as long as they write; the launcher waits for it to be idle first. Those DoFns stop at
their next batch once the run is cancelled, so the wait is short.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class InFlight:
    """How many writers of one run are busy in this process."""

    def __init__(self) -> None:
        self._busy = 0
        self._idle = threading.Condition()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for every writer to end; how many are still busy."""
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, timeout)
            return self._busy
