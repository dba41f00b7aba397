"""etl.formats.compiled_index: index lines formatted by the compiled loop are byte for byte
Arrow's CSV writer's (what record_index wrote before, and what DALI and the PyPI `tfrecord`
package read) at every decimal width of an offset and a length, from any start, and
record_index takes that path for a big piece."""

from __future__ import annotations

import platform

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from etl.formats import compiled_index, record_index
from etl.formats.jit import COMPILED_FROM

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the compiled loops need x86-64 (etl.formats.jit)")


def _arrow_lines(sizes: np.ndarray, start: int) -> bytes:
    frames = sizes + record_index.FRAME_OVERHEAD
    ends = np.cumsum(frames) + start
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(pa.table({"offset": ends - frames, "length": frames}), sink,
                     record_index._LINES)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("start", [0, 7, 9_999_999_999, 10**18, 2**63 - 2**40])
def test_every_decimal_width(start: int) -> None:
    widths = [10**k - 17 for k in range(2, 12)] + [10**k - 16 for k in range(2, 12)]
    sizes = np.array([0, 1, 83, 84, *[w for w in widths if w >= 0]] * 3, np.int64)
    lines = compiled_index.index_lines(sizes, start)
    assert lines == _arrow_lines(sizes, start)
    offsets, lengths = record_index.parse_index(lines)
    assert offsets[0] == start and (lengths == sizes + 16).all()


def test_record_index_takes_the_loop_for_a_big_piece(monkeypatch) -> None:
    sizes = np.random.default_rng(3).integers(0, 5000, COMPILED_FROM)
    calls = []
    loop = compiled_index.index_lines
    monkeypatch.setattr(compiled_index, "index_lines",
                        lambda s, start: calls.append(len(s)) or loop(s, start))
    lines, end = record_index.index_lines(sizes, 12345)
    assert calls == [COMPILED_FROM]
    assert lines == _arrow_lines(sizes, 12345) and end == 12345 + int((sizes + 16).sum())
    small, _ = record_index.index_lines(sizes[:10], 5)  # a short piece: Arrow's writer
    assert calls == [COMPILED_FROM] and small == _arrow_lines(sizes[:10], 5)
