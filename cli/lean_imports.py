"""Beam's import for a run, without the clients no run of ours uses: MongoDB's always, and on
a runner on this machine also Google's BigQuery, Pub/Sub and Dataflow API clients.

`import apache_beam` imports pymongo and its bson (for Beam's MongoDB IO) whenever they are
installed, inside `try: ... except ImportError`. A conversion's pipeline holds only our own
transforms, yet pymongo was about a tenth of Beam's import: start-up every run pays before its
first record (figures: benchmarks/README.md, "Beam's import without pymongo").

A `None` entry in `sys.modules` makes an import of that name raise ModuleNotFoundError (the
import system's documented way to block one), which Beam takes as "not installed". The
entries go again once Beam is in, so a later `import pymongo` (a user's generator reading
MongoDB) loads it as usual. A module already imported is left as it is.

Beam imports the BigQuery, BigQuery Storage, Pub/Sub and Dataflow API client libraries the
same way when `apache-beam[gcp]` installed them: 267 modules, 0.15-0.2 s of its import
(benchmarks/README.md, "Beam's import without its Google API clients"). Every Beam module
still loads (its references to those clients are None, as without the extra); a local run's
pipeline is our transforms only, and writes to `gs://` through google-cloud-storage, which is
not blocked. A Dataflow run needs its client (Beam's DataflowRunner keeps what its import found
and reads job states and messages through it), so they are blocked only when the runner runs
here (etl.base.runners.is_local).

Beam's own Google Cloud IO (its BigQuery, Pub/Sub and GCS modules) and apitools, the HTTP
client library they and Beam's retry helper load, were another third of Beam's import on a
local runner (figures: benchmarks/README.md, "Beam's import without its cloud IO"). They are
left out only where nothing can miss them later: a local run in a process of its own (the
CLI's, `cli.main.entry`) with no source that runs a user's code and whose job and Beam
arguments name no store (no path with a scheme; a gs:// input is read through Beam's GCS file
system). A module that found them missing keeps that for the process's life
(`beam.io.ReadFromBigQuery` absent, Beam's retry filter without Google's HTTP errors), which a
notebook or a test process must not inherit.

pandas, which Beam imports the same way (0.2 s, a quarter of Beam's import), is not on the
list: pyarrow imports it anyway at its first `pa.array` or `to_numpy`, only to ask whether the
value is a pandas object, so the import only moves to the first block. A run whose every
source is a file format (no `format: python`, whose generator may hand pyarrow pandas objects)
has no pandas object to ask about, so a process that is the CLI's own (`cli.main.entry`) runs
it with pandas left out throughout (`without_pandas`). Not in a process that goes on after the
run (tests, a scheduler's in-process task): pyarrow remembers for the process's life that
pandas was missing, and a later `to_pandas()` there would fail.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from etl.base.runners import is_local

if TYPE_CHECKING:
    from etl.job.config import JobConfig

UNUSED_BY_RUNS = ("pymongo", "bson")
UNUSED_BY_LOCAL_RUNS = (*UNUSED_BY_RUNS, "google.cloud.bigquery",
                        "google.cloud.bigquery_storage_v1", "google.cloud.pubsub",
                        "google.cloud.pubsub_v1", "google.pubsub_v1", "google.cloud.dataflow",
                        "google.cloud.dataflow_v1beta3")
BEAM_CLOUD_IO = ("apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.pubsub",
                 "apache_beam.io.gcp.gcsio", "apache_beam.io.gcp.gcsfilesystem", "apitools")
# Beam's MongoDB IO logs a warning when it cannot import them: not news to a run
_MONGO_LOGGER = "apache_beam.io.mongodbio"


def unused_by(runner: str | None, *, cloud_io: bool = True) -> tuple[str, ...]:
    """What a run on `runner` (the `--runner` argument; None: Beam's default) never uses;
    `cloud_io=False`: nor Beam's cloud IO, on a local runner (see `cloud_io_needed`)."""
    if not is_local(runner):
        return UNUSED_BY_RUNS
    return UNUSED_BY_LOCAL_RUNS if cloud_io else (*UNUSED_BY_LOCAL_RUNS, *BEAM_CLOUD_IO)


def cloud_io_needed(owns_process: bool, jobs: Iterable[JobConfig],
                    beam_args: Sequence[str]) -> bool:
    """Whether Beam's cloud IO must be imported with Beam for these jobs: unless the process
    ends after the run (`owns_process`), no source runs a user's code (a generator may use
    Beam's IO) and nothing in a job's sources, output, schema or temp location, nor in the
    Beam arguments, names a store (module docstring)."""
    if not owns_process:
        return True
    for job in jobs:
        if _runs_user_code(job.sources.values()) or _names_a_store(
                (job.sources, job.output, job.schema_path, job.temp_location)):
            return True
    return _names_a_store(beam_args)


def _names_a_store(value: Any) -> bool:
    if isinstance(value, str):  # a URL anywhere in it: `--temp_location=gs://...` too
        return "://" in value
    if isinstance(value, Mapping):
        return any(_names_a_store(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_names_a_store(v) for v in value)
    return False


def _runs_user_code(sources: Iterable[Mapping[str, Any]]) -> bool:
    """A source (a job file entry) that runs a user's code, which may import anything."""
    return any(str(source.get("format")) in RUNS_USER_CODE for source in sources)


@contextmanager
def without_unused_extras(names: tuple[str, ...] = UNUSED_BY_RUNS) -> Iterator[None]:
    """Imports of `names` (not imported yet) fail inside the block, as if not installed."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    mongo = logging.getLogger(_MONGO_LOGGER)
    was_disabled = mongo.disabled
    mongo.disabled = True
    try:
        yield
    finally:
        mongo.disabled = was_disabled
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


# source formats that run a user's code, which may hand pyarrow pandas objects
RUNS_USER_CODE = frozenset({"python"})


def pandas_unused(sources: Iterable[Mapping[str, Any]], runner: str | None) -> bool:
    """Whether a run reading only these sources (job file entries), on `runner`, can leave
    pandas out: a runner on this machine (a remote one's workers import what they import)
    and no source that runs a user's code."""
    return is_local(runner) and not _runs_user_code(sources)


@contextmanager
def without_pandas(leave_out: bool) -> Iterator[None]:
    """pandas not importable inside the block when `leave_out` (and not imported yet): Beam's
    and pyarrow's imports of it fail as if it were not installed, which both handle. Only for
    a process that ends after the block (see the module's docstring). A finder, not a None in
    `sys.modules`: pyarrow's Cython `import pandas` takes such an entry for the module."""
    if not leave_out or "pandas" in sys.modules:
        yield
        return
    finder = _NotInstalled("pandas")
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class _NotInstalled(importlib.abc.MetaPathFinder):
    """Finds `name` and its submodules as missing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None
