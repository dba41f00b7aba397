"""An exit no thread can hold: the outcome of a process is decided and said, and only a
thread nobody will ever end could keep it alive."""

from __future__ import annotations

import os
import sys
import threading

EXIT_GRACE_SECONDS = 10.0


def bounded_exit(code: int) -> None:
    """Python's exit joins every non-daemon thread and runs atexit hooks (concurrent.futures
    joins its pools' workers): a thread left blocked when a signal stopped a pipeline held an
    interrupted run that had said its line for good (test_signals' Ctrl-C test, about one CI
    run in ten), and so would a user's generator that starts a thread. The outcome is decided
    and said by now: past EXIT_GRACE_SECONDS a daemon timer ends the process with its code.
    The command line arms it once its outcome is told (cli.launch); a range's worker process
    as it leaves its loop (cli.ranges), since its parent waits for it."""
    def hard_exit() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)

    timer = threading.Timer(EXIT_GRACE_SECONDS, hard_exit)
    timer.daemon = True
    timer.start()
