"""Shared test set-up: quiet TensorFlow, and a helper writing TFRecord files with our framing."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from collections.abc import Callable, Iterable  # noqa: E402

import pytest  # noqa: E402

from etl.tfrecord import COMPRESSIONS, Compressor, frame_all  # noqa: E402


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
