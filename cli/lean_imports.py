"""Beam's import for a run, without the MongoDB client no run of ours uses.

`import apache_beam` imports pymongo and its bson (for Beam's MongoDB IO) whenever they are
installed, inside `try: ... except ImportError`. A conversion's pipeline holds only our own
transforms, yet pymongo was about a tenth of Beam's import: start-up every run pays before its
first record (figures: benchmarks/README.md, "Beam's import without pymongo").

A `None` entry in `sys.modules` makes an import of that name raise ModuleNotFoundError (the
import system's documented way to block one), which Beam takes as "not installed". The
entries go again once Beam is in, so a later `import pymongo` (a user's generator reading
MongoDB) loads it as usual. A module already imported is left as it is.

pandas, which Beam imports the same way, is not on the list: pyarrow imports it anyway at the
first conversion to NumPy (`Array.to_numpy` asks whether pandas is there), so it would only
move to the first block.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

UNUSED_BY_RUNS = ("pymongo", "bson")
# Beam's MongoDB IO logs a warning when it cannot import them: not news to a run
_MONGO_LOGGER = "apache_beam.io.mongodbio"


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
