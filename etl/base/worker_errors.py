"""Failures inside Beam workers, back to the user as one line with the right exit code.

A runner wraps what a DoFn raises: the local FnApiRunner (multi-threaded or multi-process)
and Dataflow raise a RuntimeError whose text is the worker's whole traceback, ending in
`etl.base.errors.StorageError: <message> [while running 'Convert/...']`. Two halves:

- in workers, `worker_errors(where)` (a context manager) or `@wire_errors` (a decorator for
  DoFn.process / FlatMap functions, generators included) turns an OSError into a
  StorageError naming the path, and any other unexpected exception into an EtlError naming
  `where` (the input file, the shard); EtlErrors pass through unchanged.
- on the driver, `original_error(exc)` finds our error again: in the exception chain
  (in-process runners keep the object) or in the traceback text, by the qualified class
  name `etl.base.errors.<Class>` that every traceback prints, and rebuilds it.

Running out of file descriptors (`ulimit -n`) is a storage error (exit 5) naming the limit,
wherever it shows: EMFILE from a file we open, gRPC's "Too many open files" (Beam's own
data channels), or only in the run's log behind Beam's "Channel closed prematurely"
(`too_many_open_files`, `fds_ran_out`). `check_open_files` refuses, before any work, a
limit below what the smallest run needs (MIN_OPEN_FILES).
"""

from __future__ import annotations

import errno
import functools
import inspect
import os
import re
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from etl.base import errors
from etl.base.errors import EtlError, StorageError

F = TypeVar("F", bound=Callable[..., Any])

_ADVICE = {
    errno.ENOSPC: "no space left on the device; free some space or choose another location",
    errno.EDQUOT: "disk quota exceeded; free some space or choose another location",
    errno.EACCES: "permission denied; check the permissions or choose another location",
    errno.EPERM: "operation not permitted; check the permissions or choose another location",
    errno.EROFS: "read-only file system; choose a writable location",
    errno.EIO: "input/output error; check the disk",
    errno.EFBIG: "file too large for the file system; use more shards (shards: N)",
    errno.ENFILE: "too many open files on this machine (all processes together); close other "
                  "programs or raise the system's limit (fs.file-max)",
}
_FD_LIMIT = errno.EMFILE  # its advice names the limit in force: `fd_advice()`
# The file descriptors a run must be allowed at the least (`ulimit -n`). Measured here
# (peak of /proc/PID/fd, sampled every 2 ms): the bundled demo peaks at 24-26 open
# descriptors with 1 to 16 worker threads, a 300,000-row CSV into 16 shards at 34 with 2
# workers and 70 with 8; under `ulimit -n` 12 to 26 the demo failed every way there is
# (an abort with no message at 12, EMFILE at 16 and 24-26, a gRPC timeout after 60 s at 18,
# "Channel closed prematurely" at 20 and 22), at 27 and above it passed. 64 leaves the
# smallest run room; a bigger one that still runs out is told so by the runtime checks.
MIN_OPEN_FILES = 64
_GRPC_FDS = ("Too many open files", "File descriptor limit reached")


def fd_limit() -> int:
    """The soft limit on open files of this process (what `ulimit -n` shows)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fd_advice() -> str:
    """`too many open files: the limit is N (ulimit -n); raise it ...`: what to do."""
    limit = fd_limit()
    return (f"too many open files: the limit is {limit} (ulimit -n); raise it (e.g. ulimit -n "
            f"{max(4096, 2 * limit)}) and run again")


def too_many_open_files() -> StorageError:
    """The run ran out of file descriptors where no file of ours was named (gRPC's sockets)."""
    return StorageError(fd_advice())


def check_open_files(minimum: int = MIN_OPEN_FILES) -> None:
    """Refuse (exit 5) a limit on open files below what a run needs, before any work: under
    it Beam's gRPC channels fail with "Channel closed prematurely", time out after a minute,
    or abort the process without a word."""
    limit = fd_limit()
    if limit != resource.RLIM_INFINITY and limit < minimum:
        raise StorageError(f"too many open files: the limit is {limit} (ulimit -n), below the "
                           f"{minimum} a run needs; raise it (e.g. ulimit -n "
                           f"{max(4096, 2 * limit)}) and run again")


def fds_ran_out(log_file: str | None) -> bool:
    """Whether the run's log shows gRPC running out of file descriptors: Beam then reports
    only "Channel closed prematurely" (or a timeout); the cause is in what gRPC printed."""
    if not log_file:
        return False
    marks = [m.encode() for m in _GRPC_FDS]
    tail = b""
    try:
        with open(log_file, "rb") as fh:
            while chunk := fh.read(1 << 20):
                window = tail + chunk
                if any(m in window for m in marks):
                    return True
                tail = window[-64:]
    except OSError:
        return False
    return False


def naming_log(err: EtlError, log_file: str | None) -> EtlError:
    """`err` with `(full log: PATH)` when that log holds something: not when it was never
    written (no descriptor or no space to open it, an unwritable temp folder) or was removed
    since (pruned by a run with a later id), where naming it would send the user nowhere."""
    try:
        present = bool(log_file) and os.path.getsize(log_file or "") > 0
    except OSError:
        present = False
    if not present:
        return err
    try:
        return type(err)(f"{err} (full log: {log_file})")
    except TypeError:
        return EtlError(f"{err} (full log: {log_file})")
_WHILE_RUNNING = re.compile(r"\s*\[while running '[^']*'\]\s*$")
_ETL_LINE = re.compile(r"^etl\.base\.errors\.(\w+): (.+)$", re.M)
_ERRNO_LINE = re.compile(r"^(?:[\w.]+\.)?\w*Error: \[Errno (\d+)\] ([^\n:]+)(?:: '([^'\n]*)')?",
                         re.M)
_ANY_LINE = re.compile(r"^((?:[\w.]+\.)?\w+(?:Error|Exception|Exit)): (.+)$", re.M)


def storage_error(e: OSError, path: str | None = None, action: str = "writing") -> StorageError:
    """A StorageError saying what failed where and what to do."""
    where = e.filename or path or "(unknown path)"
    advice = (fd_advice() if e.errno == _FD_LIMIT
              else _ADVICE.get(e.errno or 0, e.strerror or str(e)))
    return StorageError(f"{where}: {action} failed: {advice} [errno {_errno_name(e.errno)}]")


def _errno_name(code: int | None) -> str:
    return errno.errorcode.get(code or 0, str(code))


@contextmanager
def worker_errors(where: str) -> Iterator[None]:
    """Wrap a worker's body: our errors pass, OSError -> StorageError, the rest -> EtlError
    naming `where` (so a bug still says which file it met)."""
    try:
        yield
    except EtlError:
        raise
    except OSError as e:
        if e.errno is None:
            raise EtlError(f"{where}: {type(e).__name__}: {e}") from e
        raise storage_error(e, where, "reading or writing") from e
    except Exception as e:
        raise EtlError(f"{where}: unexpected {type(e).__name__}: {_one_line(str(e))}") from e


def wire_errors(fn: F) -> F:
    """`worker_errors` around a DoFn.process / FlatMap function, named by its first element
    (a ReadTask's path, a ShardPlan's split and index)."""

    def where(args: tuple[Any, ...]) -> str:
        element = args[1] if len(args) > 1 and not _is_plain(args[1]) else args[0] if args else ""
        for attr in ("path", "name"):
            if hasattr(element, attr):
                return str(getattr(element, attr))
        if hasattr(element, "split") and hasattr(element, "index"):
            return f"split {element.split} shard {element.index}"
        return getattr(fn, "__qualname__", "worker")

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Any:
            with worker_errors(where(args)):
                yield from fn(*args, **kwargs)
        return gen  # type: ignore[return-value]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with worker_errors(where(args)):
            return fn(*args, **kwargs)
    return call  # type: ignore[return-value]


def _is_plain(x: Any) -> bool:
    return isinstance(x, (list, dict, str, int, float)) or x is None


def original_error(exc: BaseException) -> EtlError | None:
    """Our error inside what a runner raised, rebuilt with a clean message; None if none."""
    seen: set[int] = set()
    chain = []
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        chain.append(node)
        node = node.__cause__ or node.__context__
    for e in chain:  # the outermost of ours is the most specific; runners only add a suffix
        if isinstance(e, EtlError):
            return _clean(type(e), str(e))
    for e in chain:
        text = str(e)
        m = _ETL_LINE.search(text)
        if m:
            cls = getattr(errors, m.group(1), None)
            if isinstance(cls, type) and issubclass(cls, EtlError):
                return _clean(cls, m.group(2))
    known = {*_ADVICE, _FD_LIMIT}
    for e in reversed(chain):
        if isinstance(e, OSError) and e.errno in known:
            return storage_error(e)
    for e in chain:
        m = _ERRNO_LINE.search(str(e))
        if m and int(m.group(1)) in known:
            code = int(m.group(1))
            return storage_error(OSError(code, os.strerror(code), m.group(3) or None))
    if any(mark in str(e) for e in chain for mark in _GRPC_FDS):
        return too_many_open_files()  # gRPC's own wording: a socket it could not open
    return None


def describe_unexpected(exc: BaseException) -> str:
    """One line for an error that is none of ours: the original exception's last line."""
    text = str(exc)
    found = _ANY_LINE.findall(text)
    if found:
        name, message = found[0]
        return f"{name.rsplit('.', 1)[-1]}: {_one_line(_WHILE_RUNNING.sub('', message))}"
    return f"{type(exc).__name__}: {_one_line(text)}"


def _clean(cls: type[EtlError], message: str) -> EtlError:
    try:
        return cls(_WHILE_RUNNING.sub("", message.splitlines()[0] if message else message))
    except TypeError:  # a subclass with another constructor
        return EtlError(message)


def _one_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."
