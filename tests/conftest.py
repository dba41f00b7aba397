"""Shared test set-up: quiet TensorFlow, a helper writing TFRecord files with our framing, and
the GCS emulator (one per session, a fresh bucket per test) and a PostgreSQL server (one per
session, tests/postgres_server.py)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from collections.abc import Callable, Iterable, Iterator  # noqa: E402

import pytest  # noqa: E402

from etl.formats.tfrecord import COMPRESSIONS, Compressor, frame_all  # noqa: E402
from tests.gcs_emulator import GcsEmulator  # noqa: E402
from tests.postgres_server import postgres  # noqa: E402, F401 - the session's PostgreSQL server

# Tests using these fixtures start a server (gcp-storage-emulator, PostgreSQL): marked slow
# here, whatever module they sit in (`make test-fast` runs `pytest -m "not slow"`).
_SERVER_FIXTURES = frozenset({"gcs_emulator", "gcs_bucket", "postgres"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def write_records(path: str | os.PathLike[str], records: Iterable[bytes],
                  compression: str = "none") -> str:
    """Frame `records` into one TFRecord file (whole-file gzip/zlib when asked)."""
    comp = Compressor(compression)
    data = comp.compress(frame_all(records)) + comp.flush()
    with open(path, "wb") as fh:
        fh.write(data)
    return os.fspath(path)


@pytest.fixture
def write_tfrecord() -> Callable[..., str]:
    return write_records


@pytest.fixture(params=list(COMPRESSIONS))
def compression(request: pytest.FixtureRequest) -> str:
    return request.param


_EMULATOR_VARS = ("STORAGE_EMULATOR_HOST", "NO_GCE_CHECK", "GOOGLE_APPLICATION_CREDENTIALS")


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    """One gcp-storage-emulator for the session; its variables are in os.environ while it
    runs (so in-process gs:// access and CLI subprocesses given os.environ reach it), and
    the previous values come back afterwards."""
    saved = {k: os.environ.get(k) for k in _EMULATOR_VARS}
    emulator = GcsEmulator()
    try:
        os.environ.update(emulator.env(base={}))
        os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
        yield emulator
    finally:
        emulator.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def gcs_bucket(gcs_emulator: GcsEmulator) -> str:
    """A fresh, empty bucket for this test: "gs://name"."""
    return gcs_emulator.make_bucket()
