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


# `make test` runs pytest-xdist workers with `--dist loadgroup`: a test without an xdist_group
# goes to whichever worker is free. These tests time themselves (a wall-clock bound, a CPU-time
# ratio, a signal sent after a measured delay, a run that must end before its first progress
# line): one group, so they run one after another, never two at once. The other worker still
# runs beside them, as other programs do on a shared machine.
TIMED_GROUP = "timed"
TIMED = (
    "tests/test_growth.py::",
    "tests/test_backfill.py::test_three_day_backfill_oldest_first_then_skipped_then_reverse",
    "tests/test_cli_errors.py::test_error_inside_a_worker_is_one_line_with_its_exit_code",
    "tests/test_signals.py::test_ctrl_c_timed_anywhere_near_the_end_leaves_the_old_or_the_new_output",
    "tests/test_signals.py::test_a_thread_that_never_ends_does_not_hold_the_process_at_exit",
    "tests/test_idempotence.py::test_rerun_skipped_fast_force_rebuilds_same_shards",
    "tests/test_idempotence.py::test_gcs_fingerprints_from_metadata_skip_and_history",
    "tests/test_gcs_paths.py::test_raw_files_in_a_bucket_give_the_same_shards_as_local_files",
    "tests/test_gcs_publish.py::test_503s_are_retried_and_a_dead_store_fails_in_bounded_time",
    "tests/test_fs.py::test_remote_gs_access_in_a_fresh_process_takes_seconds",
    "tests/test_config_files.py::test_billion_laughs_job_is_one_line_in_bounded_memory",
    "tests/test_config_files.py::test_a_10000_feature_schema_is_well_within_the_bound",
)
_SHARED_SCOPES = frozenset({"module", "class", "package"})


def _xdist_group(item: pytest.Item) -> str | None:
    """The timed group; else the test's file when it uses a module- or class-scoped fixture
    (built once per worker: the file's tests stay together); else none (any worker)."""
    if item.nodeid.startswith(TIMED):
        return TIMED_GROUP
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d.scope in _SHARED_SCOPES for chain in defs for d in chain):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


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
