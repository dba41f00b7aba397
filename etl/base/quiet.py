"""TensorFlow's start-up lines off the console: what a newcomer should not have to read.

Importing TensorFlow and running its first op print absl/oneDNN/CUDA lines ("All log messages
before absl::InitializeLog() ...", "oneDNN custom operations are on", "failed call to
cuInit") from C++ straight to file descriptor 2, before and regardless of
TF_CPP_MIN_LOG_LEVEL (level 3 hides only the cuInit error). So while TensorFlow starts, fd 2
points at /dev/null; the command line's own messages go through a duplicate of the real
stderr taken before (run_pipeline.py), and exceptions are raised, not printed, inside.
`--verbose` turns this off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def native_stderr_quiet(enabled: bool = True) -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block (C++ libraries write there directly)."""
    if not enabled:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with stderr_fd_to(devnull):
            yield
    finally:
        os.close(devnull)


@contextmanager
def stderr_fd_to(fd: int, keep: Callable[[BaseException], bool] | None = None,
                 ) -> Iterator[None]:
    """File descriptor 2 is a copy of `fd` for the block, then the original again (threads,
    C++ code and child processes write there, not through sys.stderr). Python's own buffer is
    flushed on both sides, so nothing written before lands after, or the other way round.
    A block that raises an error `keep` accepts leaves fd 2 on `fd` for good, with no moment
    on the original in between (threads still unwinding write there)."""
    _flush_stderr()
    saved = os.dup(2)
    restore = True
    try:
        os.dup2(fd, 2)
        yield
    except BaseException as e:
        restore = keep is None or not keep(e)
        raise
    finally:
        _flush_stderr()
        if restore:
            os.dup2(saved, 2)
        os.close(saved)


def _flush_stderr() -> None:
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
