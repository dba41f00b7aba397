"""A run's log file: what a user opens when the one-line error is not enough.

Holds the run's settings, every warning and error logged while it runs, the workers' stderr
(Beam prints each failing bundle's traceback there) and the full traceback of a failure.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from etl.base import signals
from etl.base.quiet import stderr_fd_to
from etl.storage import fs


def _signalled(failure: BaseException) -> bool:
    """After a signal (etl.base.signals), whether it ends the block as the interrupt or as the
    failure of a bundle that saw the cancel flag first, worker threads still unwinding print
    their bundle's traceback to stderr: fd 2 stays in the log for the rest of the process,
    and the command line prints its one line on its own copy of the terminal's stderr."""
    return isinstance(failure, KeyboardInterrupt) or signals.received() is not None


class RunLog(logging.Handler):
    """The run's log file: a header, every warning and error logged during the run (Beam's
    worker tracebacks included) and the full traceback of a failure. Never fails the run:
    a log that cannot be written (a full disk) is skipped."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        try:
            self._fh: Any = fs.open_local_log(path)
        except OSError:
            self._fh = None

    def __enter__(self) -> RunLog:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
        self.close()

    def emit(self, record: logging.LogRecord) -> None:
        self._write(self.format(record))

    def note(self, text: str) -> None:
        self._write(f"{dt.datetime.now().isoformat(sep=' ', timespec='milliseconds')} {text}")

    def failure(self, exc: BaseException) -> None:
        self.note("FAILED:\n" + "".join(traceback.format_exception(exc)))

    @contextmanager
    def stderr_captured(self, enabled: bool = True) -> Iterator[None]:
        """File descriptor 2 into this log for the block (threads and child processes too).

        Through a pipe drained by a thread, never straight into the file: Beam's worker
        prints a failing bundle's traceback to stderr before it reports the failure, and a
        print that fails (the log on a full disk) would leave the runner waiting forever."""
        if not enabled or self._fh is None:
            yield
            return
        read_end, write_end = os.pipe()
        drain = threading.Thread(target=self._drain, args=(read_end,), daemon=True,
                                 name="etl-stderr-to-log")
        drain.start()
        failure: BaseException | None = None
        try:
            with stderr_fd_to(write_end, keep=_signalled):
                os.close(write_end)  # fd 2 holds the last copy: restoring it ends the drain
                yield
        except BaseException as e:
            failure = e
            raise
        finally:
            if failure is None or not _signalled(failure):  # else fd 2 is still the pipe
                drain.join(timeout=2)  # worker processes still holding it: do not wait

    def _drain(self, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return
                self._write(chunk.decode("utf-8", "replace").rstrip("\n"))
        finally:
            os.close(fd)

    def _write(self, text: str) -> None:
        with self.lock:  # log records, notes and the stderr drain come from several threads
            if self._fh is None:
                return
            try:
                self._fh.write(text + "\n")
                self._fh.flush()
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        with self.lock:
            if self._fh is not None:
                try:
                    self._fh.close()
                except OSError:
                    pass
                self._fh = None
        super().close()
