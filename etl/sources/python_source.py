"""A user's Python generator as a source: `function: "package.module:function"`.

The function yields one dict per record (feature source name -> value); `args`/`kwargs` are
passed to it. With `num_shards: k`, `files()` lists k pseudo-files
`python:package.module:function#i-of-k` and each is read by calling the function with
`shard_index=i, num_shards=k` as well, so Beam can run the shards in parallel. Records are
gathered into blocks of Python lists per column (NumPy values stay arrays); a record that is
not a dict is a `wrong_type` BadRecord (its 0-based record index), and an exception inside
the generator stops the shard with a RecordError (exit 3) naming the function and the record
index: the generator cannot go on, and how many records it would still have given is unknown.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from etl.base.errors import BadRecord, ConfigError, RecordError, quote
from etl.sources.base import Block, Source, options
from etl.sources.file_source import block_rows, excerpt, int_option

_SHARD = re.compile(r"#(\d+)-of-(\d+)$")


class PythonReader(Source):
    """`format: python`; options: function, args, kwargs, num_shards, block_rows."""

    OPTIONS = {"function", "args", "kwargs", "num_shards", "block_rows"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        opts = options(config, self.OPTIONS, where)
        if "paths" in config:
            raise ConfigError(f"{where}: a python source takes 'function', not 'paths'")
        self.where = where
        self.function = opts.get("function")
        if not isinstance(self.function, str) or not re.fullmatch(r"[\w.]+:[\w.]+", self.function):
            raise ConfigError(f"{where}: 'function' must look like 'package.module:function', "
                              f"got {self.function!r}")
        self.args = opts.get("args", [])
        if not isinstance(self.args, list):
            raise ConfigError(f"{where}: 'args' must be a list, got {self.args!r}")
        self.kwargs = opts.get("kwargs", {})
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise ConfigError(f"{where}: 'kwargs' must be a mapping, got {self.kwargs!r}")
        self.num_shards = opts.get("num_shards")
        if self.num_shards is not None:
            self.num_shards = int_option(opts, "num_shards", 1, where, minimum=1)
        self.block_rows = block_rows(opts, where)
        self._resolve()  # a typo in the function name fails at launch, not on a worker

    def _resolve(self) -> Callable[..., Any]:
        module_name, _, attr = self.function.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"{self.where}: cannot load function {self.function!r}: {e}") from e
        if not callable(obj):
            raise ConfigError(f"{self.where}: {self.function!r} is not callable")
        return obj

    def files(self) -> list[str]:
        name = f"python:{self.function}"
        if self.num_shards is None:
            return [name]
        return [f"{name}#{i}-of-{self.num_shards}" for i in range(self.num_shards)]

    def inputs(self) -> list[str]:
        return self.files()

    def read(self, path: str) -> Iterator[Block]:
        kwargs = dict(self.kwargs)
        shard = _SHARD.search(path)
        if shard:
            kwargs.update(shard_index=int(shard.group(1)), num_shards=int(shard.group(2)))
        records = _guarded(self._resolve()(*self.args, **kwargs), self.function, path)
        rows: list[Mapping[str, Any]] = []
        positions: list[int] = []
        bad: list[BadRecord] = []
        for index, record in records:
            if isinstance(record, Mapping):
                rows.append(record)
                positions.append(index)
            else:
                bad.append(BadRecord(path, "wrong_type", f"expected a dict of feature values, "
                                                         f"got {type(record).__name__}",
                                     record=index, raw=excerpt(quote(record, 120))))
            if len(rows) == self.block_rows:
                yield _block(rows, positions, bad, path)
                rows, positions, bad = [], [], []
        if rows or bad:
            yield _block(rows, positions, bad, path)


def _guarded(records: Any, function: str, path: str) -> Iterator[tuple[int, Any]]:
    """(index, record) pairs; the generator's own exceptions become RecordErrors with context."""
    index = 0
    try:
        iterator = iter(records)
    except TypeError as e:
        raise RecordError(f"{path}: {function} must return an iterable of dicts, "
                          f"got {type(records).__name__}") from e
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return
        except Exception as e:  # the user's code: any exception, reported with where it happened
            raise RecordError(f"{path}: {function} raised {type(e).__name__} at record {index}: "
                              f"{quote(str(e), 500, plain=True)}") from e
        yield index, record
        index += 1


def _block(rows: list[Mapping[str, Any]], positions: list[int], bad: list[BadRecord],
           path: str) -> Block:
    """Rows -> columns of Python lists, keys in first-seen order (missing keys are None)."""
    names = list(dict.fromkeys(k for row in rows for k in row))
    columns = {name: [row.get(name) for row in rows] for name in names}
    return Block(columns, np.array(positions, np.int64), source=path, bad=bad)
