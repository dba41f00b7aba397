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
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def native_stderr_quiet(enabled: bool = True) -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block (C++ libraries write there directly)."""
    if not enabled:
        yield
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
