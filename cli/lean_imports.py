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

pandas, which Beam imports the same way, is not on the list: pyarrow imports it anyway at the
first conversion to NumPy (`Array.to_numpy` asks whether pandas is there), so it would only
move to the first block.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from etl.base.runners import is_local

UNUSED_BY_RUNS = ("pymongo", "bson")
UNUSED_BY_LOCAL_RUNS = (*UNUSED_BY_RUNS, "google.cloud.bigquery",
                        "google.cloud.bigquery_storage_v1", "google.cloud.pubsub",
                        "google.cloud.pubsub_v1", "google.pubsub_v1", "google.cloud.dataflow",
                        "google.cloud.dataflow_v1beta3")
# Beam's MongoDB IO logs a warning when it cannot import them: not news to a run
_MONGO_LOGGER = "apache_beam.io.mongodbio"


def unused_by(runner: str | None) -> tuple[str, ...]:
    """What a run on `runner` (the `--runner` argument; None: Beam's default) never uses."""
    return UNUSED_BY_LOCAL_RUNS if is_local(runner) else UNUSED_BY_RUNS


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
