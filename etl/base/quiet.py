"""TensorFlow's start-up lines off the console: what a newcomer should not have to read.

Importing TensorFlow and running its first op print absl/oneDNN/CUDA lines ("All log messages
before absl::InitializeLog() ...", "oneDNN custom operations are on", "failed call to
cuInit") from C++ straight to file descriptor 2, before and regardless of
TF_CPP_MIN_LOG_LEVEL (level 3 hides only the cuInit error). So while TensorFlow starts, fd 2
points at /dev/null; the command line's own messages go through a duplicate of the real
stderr taken before (run_pipeline.py), and exceptions are raised, not printed, inside.
`--verbose` turns this off.

Library code (`etl.make_dataset`, `etl.read.dataset`) imports TensorFlow through
`quiet_tensorflow`: the user's process is theirs, so it changes nothing TensorFlow does not
read at import. If TensorFlow is already imported, it is returned as it is. Otherwise
TF_CPP_MIN_LOG_LEVEL is set to 2 when the user set none (hides INFO lines such as TFRecord's
"default buffer size"; it stays in os.environ, so child processes inherit it), and fd 2 goes
to /dev/null only while TensorFlow imports, then back; make_dataset's first call mutes it
again while TensorFlow starts its devices (start_devices_quietly: the cuInit error). A user
who sets TF_CPP_MIN_LOG_LEVEL=0 sees every line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any


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


def quiet_tensorflow() -> ModuleType:
    """`import tensorflow`, without its start-up lines on a newcomer's console (see the
    module docstring for what it changes and how to see them)."""
    if "tensorflow" in sys.modules:
        import tensorflow as tf  # noqa: PLC0415 - already loaded: no start-up left to hide

        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with native_stderr_quiet(os.environ["TF_CPP_MIN_LOG_LEVEL"] != "0"):
        import tensorflow as tf  # noqa: PLC0415 - heavy: the reading side only
    return tf


_devices_started = False


def start_devices_quietly(tf: Any) -> None:
    """TensorFlow looks for GPUs (and prints "failed call to cuInit" without one) when its
    first op runs: make_dataset calls this before its first op, so that happens with fd 2
    muted. Not at import: the user may still configure devices (memory growth, visible
    devices) between importing us and reading, which an initialised runtime refuses."""
    global _devices_started
    if _devices_started:
        return
    _devices_started = True
    with native_stderr_quiet(os.environ.get("TF_CPP_MIN_LOG_LEVEL") != "0"):
        try:
            tf.config.list_logical_devices()
        except Exception:  # noqa: BLE001 - a device problem shows again on the first op
            pass
