"""SIGINT and SIGTERM as part of the contract: one clean way out, publishing never torn.

Airflow and systemd stop a task with SIGTERM, an operator with Ctrl-C (SIGINT). Python's
default turns SIGINT into a KeyboardInterrupt wherever the main thread happens to be (inside
a rollback, inside the `_SUCCESS` write) and lets SIGTERM kill the process outright (no
history entry, the lock and the staged data left behind). `handled()` installs one handler
for both:

- the first signal raises `Interrupted` in the main thread (a KeyboardInterrupt, so every
  clean-up that runs for Ctrl-C runs for SIGTERM too) and marks the process as cancelled:
  our DoFns and pause points in worker threads see `cancelled()` and stop at the next batch;
- further signals are counted, not raised: a clean-up in progress (rollback, lock release,
  staging removal) is never cut short by a second Ctrl-C;
- inside `critical()` (publishing) the first signal is only recorded; the section checks
  `pending()` at its safe points (before the step that makes the new output current) and
  rolls back, or completes and raises when it ends. Either the publish completes or the
  old output stays.

Python runs a signal's handler only when the main thread executes bytecode. A main thread
blocked in a lock wait (the local runner waits on a bundle's future with no timeout) does not
wake when the kernel hands the signal to another thread, so the handler, and with it the
cancel flag the blocked bundle's worker waits for, would never run: the run hung until killed
(tests/test_signals.py, test_a_signal_taken_by_a_worker_thread_stops_the_run). So `handled()` also watches the
signal wake-up fd (`signal.set_wakeup_fd`: written by the C-level handler in whatever thread
took the signal) from a thread of its own, which marks the process as cancelled at once; the
workers stop, the bundle fails, the main thread wakes and raises as above.

Signal handlers are per process by nature, so this module keeps the one piece of
process-wide state the project has; `handled()` restores the previous handlers on exit.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)
# what an interrupted run's one line says happened to the output
UNCHANGED = "before publishing: nothing was published, the previous output is unchanged"
PUBLISHED = "after publishing (the new output is in place)"


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal; exit code 128 + the signal's number (130, 143)."""

    def __init__(self, signum: int, when: str = "") -> None:
        super().__init__(signum)
        self.signum = signum
        self.when = when  # e.g. "after publishing"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    def __str__(self) -> str:
        return f"interrupted by {self.name}" + (f" {self.when}" if self.when else "")


class Cancelled(Exception):
    """Raised in a worker thread of a run this process was told to stop: the bundle ends at
    its next batch instead of writing on after the launcher has cleaned up."""


@dataclass
class _State:
    received: int | None = None  # the first signal, as the main thread's handler saw it
    noticed: int | None = None  # the first signal, as the wake-up fd watcher saw it
    raised: bool = False  # Interrupted was raised for it
    depth: int = 0  # critical sections entered
    extra: int = 0  # signals after the first


_state = _State()
_lock = threading.RLock()  # re-entrant: the handler runs in the main thread, maybe inside


def _handler(signum: int, frame: object) -> None:
    with _lock:
        if _state.received is not None:
            _state.extra += 1
            return
        _state.received = signum
        if _state.depth:
            return  # publishing: honoured at the section's safe point or end
        _state.raised = True
    raise Interrupted(signum)


@contextmanager
def handled(then_ignore: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM handled as above while the block runs (main thread only: Python
    delivers signals there; elsewhere this does nothing). Afterwards the previous handlers
    come back, or with `then_ignore` (a process about to exit, its outcome already told)
    the signals are ignored: one landing during the interpreter's teardown would otherwise
    kill it with Python's default handler (exit -2, no line) after the run had finished."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in HANDLED}
    unraisable = sys.unraisablehook
    for s in HANDLED:
        signal.signal(s, _handler)
    sys.unraisablehook = _swallowed(unraisable)
    try:
        with _watched():
            yield
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if then_ignore else h)
        sys.unraisablehook = unraisable


def _swallowed(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    """An Interrupted raised where Python cannot pass it on (a weakref callback such as
    importlib's module-lock clean-up, a __del__) is printed as "Exception ignored in ..." with
    a traceback and lost (tests/stress_signals.py met it once in 120 runs). Not printed, and
    pending again: the next safe point raises it (raise_pending), as worker threads already
    see `cancelled()`."""
    def hook(unraisable: Any) -> object:
        if not isinstance(unraisable.exc_value, Interrupted):
            return previous(unraisable)
        with _lock:
            _state.raised = False
        return None

    return hook


@contextmanager
def _watched() -> Iterator[None]:
    """The wake-up fd watcher of the module docstring, for the block."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C handler must never block on it
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(read_end,), daemon=True,
                               name="etl-signal-watch")
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write_end)  # ends the watcher's read
        watcher.join(timeout=5)
        os.close(read_end)


def _watch(fd: int) -> None:
    """Note the first handled signal the moment it arrives (not when the main thread runs)."""
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum in HANDLED and _state.noticed is None:
                _state.noticed = signum


def reset() -> None:
    """Forget a signal (a long-lived process, e.g. a test, that goes on after one)."""
    with _lock:
        _state.received, _state.raised, _state.depth, _state.extra = None, False, 0, 0
        _state.noticed = None


def received() -> int | None:
    """The first signal this process got (seen by the handler or the watcher), or None."""
    return _state.received if _state.received is not None else _state.noticed


def cancelled() -> bool:
    return received() is not None


def check_cancelled(where: str = "") -> None:
    """In worker threads: stop (Cancelled) once the process got a signal."""
    signum = received()
    if signum is not None:
        raise Cancelled(f"stopped by {signal.Signals(signum).name}"
                        + (f" while {where}" if where else ""))


def pending() -> int | None:
    """A signal received inside a critical section and not yet raised."""
    with _lock:
        return _state.received if _state.received is not None and not _state.raised else None


def raise_pending(when: str = "") -> None:
    """Raise Interrupted for a pending signal (the critical section's safe point)."""
    with _lock:
        signum = _state.received if not _state.raised else None
        if signum is None:
            return
        _state.raised = True
    raise Interrupted(signum, when)


def as_interrupted(e: BaseException, when: str) -> Interrupted:
    """`e` as the Interrupted of the signal this process got (a KeyboardInterrupt before
    the handler was installed: the signal it carries, as run_pipeline.py's early handler
    raises it (cli.launch), else SIGINT; any other error is what the signal left of the run), saying
    `when` unless it says already."""
    if not isinstance(e, Interrupted):
        carried = e.args[0] if isinstance(e, KeyboardInterrupt) and e.args else None
        early = carried if isinstance(carried, int) and carried in HANDLED else None
        e = Interrupted(received() or early or signal.SIGINT)
    if not e.when:
        e.when = when
    return e


@contextmanager
def blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in the calling thread for the block: a process it starts
    meanwhile inherits the mask (through exec too), so it cannot die of one before it has
    set up its own handling (cli.fork_server). The process itself still gets a signal sent
    meanwhile: another thread takes it, or this one once the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def deferred() -> Iterator[None]:
    """Signals inside are recorded, not raised, and stay pending after it: for work that must
    not be cut in the middle (making and removing the run's directory, releasing its lock),
    whose caller raises the pending signal once it is safe (raise_pending)."""
    with _lock:
        _state.depth += 1
    try:
        yield
    finally:
        with _lock:
            _state.depth -= 1


@contextmanager
def interruptible(when: str = UNCHANGED) -> Iterator[None]:
    """Inside a deferred region, the long work a signal must stop at once (the pipeline): a
    signal recorded before raises on entry, one inside raises where it lands. The region's
    own `critical()` sections still hold theirs."""
    with _lock:
        saved, _state.depth = _state.depth, 0
    try:
        raise_pending(when)
        yield
    finally:
        with _lock:
            _state.depth = saved


@contextmanager
def critical() -> Iterator[None]:
    """Signals inside are recorded, not raised; a pending one is raised when the outermost
    section ends (after it completed), unless the section raised it itself."""
    with deferred():
        yield
    # reached only when the section completed: a failure inside it stands as it is (the
    # signal is still recorded, so a range starts no further span)
    if _state.depth == 0:
        raise_pending(PUBLISHED)
