"""Failures inside Beam workers, back to the user as one line with the right exit code.

A runner wraps what a DoFn raises: the local FnApiRunner (multi-threaded or multi-process)
and Dataflow raise a RuntimeError whose text is the worker's whole traceback, ending in
`etl.errors.StorageError: <message> [while running 'Convert/...']`. Two halves:

- in workers, `worker_errors(where)` (a context manager) or `@wire_errors` (a decorator for
  DoFn.process / FlatMap functions, generators included) turns an OSError into a
  StorageError naming the path, and any other unexpected exception into an EtlError naming
  `where` (the input file, the shard); EtlErrors pass through unchanged.
- on the driver, `original_error(exc)` finds our error again: in the exception chain
  (in-process runners keep the object) or in the traceback text, by the qualified class
  name `etl.errors.<Class>` that every traceback prints, and rebuilds it.
"""

from __future__ import annotations

import errno
import functools
import inspect
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from etl import errors
from etl.errors import EtlError, StorageError

F = TypeVar("F", bound=Callable[..., Any])

_ADVICE = {
    errno.ENOSPC: "no space left on the device; free some space or choose another location",
    errno.EDQUOT: "disk quota exceeded; free some space or choose another location",
    errno.EACCES: "permission denied; check the permissions or choose another location",
    errno.EPERM: "operation not permitted; check the permissions or choose another location",
    errno.EROFS: "read-only file system; choose a writable location",
    errno.EIO: "input/output error; check the disk",
    errno.EFBIG: "file too large for the file system; use more shards (shards: N)",
}
_WHILE_RUNNING = re.compile(r"\s*\[while running '[^']*'\]\s*$")
_ETL_LINE = re.compile(r"^etl\.errors\.(\w+): (.+)$", re.M)
_ERRNO_LINE = re.compile(r"^(?:[\w.]+\.)?\w*Error: \[Errno (\d+)\] ([^\n:]+)(?:: '([^'\n]*)')?",
                         re.M)
_ANY_LINE = re.compile(r"^((?:[\w.]+\.)?\w+(?:Error|Exception|Exit)): (.+)$", re.M)


def storage_error(e: OSError, path: str | None = None, action: str = "writing") -> StorageError:
    """A StorageError saying what failed where and what to do."""
    where = e.filename or path or "(unknown path)"
    advice = _ADVICE.get(e.errno or 0, e.strerror or str(e))
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
    for e in reversed(chain):
        if isinstance(e, OSError) and e.errno in _ADVICE:
            return storage_error(e)
    for e in chain:
        m = _ERRNO_LINE.search(str(e))
        if m and int(m.group(1)) in _ADVICE:
            code = int(m.group(1))
            return storage_error(OSError(code, os.strerror(code), m.group(3) or None))
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
