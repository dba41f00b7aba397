"""cli.lean_imports: Beam imported by a run without the MongoDB client (issue 29, goal 3), and
that client still importable afterwards, for a user's generator that reads MongoDB."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # a subprocess importing Beam (make test-fast skips it)

# a fresh interpreter: the test process may have imported Beam, and with it pymongo, already
_SCRIPT = """
import sys
from cli.lean_imports import without_unused_extras
with without_unused_extras():
    import apache_beam
import apache_beam.io.mongodbio as mongo
print("beam's mongo io:", mongo.MongoClient, "pymongo" in sys.modules, "bson" in sys.modules)
import pymongo
print("then imported:", pymongo.MongoClient.__name__)
with without_unused_extras():
    import pymongo as again
    print("an imported module is kept:", again is pymongo)
"""


def test_beam_imports_without_pymongo_which_loads_normally_afterwards() -> None:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "beam's mongo io: None False False",  # as where pymongo is not installed
        "then imported: MongoClient",
        "an imported module is kept: True",
    ]
    assert proc.stderr == ""  # not Beam's "Could not find a compatible bson package."
