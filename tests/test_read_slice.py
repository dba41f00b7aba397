"""A shard finds its key range in a spill run by reading the keys around where uniform keys
put it: the range must be exactly the one all the keys give, for runs whose keys are spread
as the shuffle spreads them and for runs whose keys are not (then it reads them all)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etl.shuffle import runs
from etl.shuffle.keys import shuffle_keys


def _run(tmp_path: Path, keys: np.ndarray, base_junk: int = 0) -> tuple[str, int]:
    keys = np.sort(keys.astype(np.uint64))
    path = tmp_path / "spill"
    with open(path, "wb") as fh:
        fh.write(b"x" * base_junk)  # a section at a byte offset, as in a shard's scratch file
        runs.write_section(fh, keys, np.arange(len(keys), dtype=np.uint64),
                           np.arange(len(keys) + 1, dtype=np.uint64), b"p" * len(keys))
    return str(path), base_junk


def _bounds(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    edges = sorted(int(x) for x in rng.integers(0, 1 << 64, 30, dtype=np.uint64))
    out = [(0, 1 << 64), (0, edges[0]), (edges[-1], 1 << 64)]
    out += [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
    return out


@pytest.mark.parametrize("n", [1, 7, 4095, 65536, 300000])
def test_slices_of_a_shuffled_run_equal_the_full_search(tmp_path: Path, n: int) -> None:
    keys = shuffle_keys(42, "data.csv", np.arange(n, dtype=np.int64))
    path, base = _run(tmp_path, keys, base_junk=13)
    rng = np.random.default_rng(n)
    ordered = np.sort(keys)
    for lo, hi in _bounds(n, rng) + [(int(k), int(k) + 1) for k in ordered[:: max(1, n // 9)]]:
        got = runs.read_slice(path, lo, hi, base)
        assert (got.a, got.b) == runs.key_range(ordered, lo, hi)


def test_slices_of_a_clustered_run_fall_back_to_every_key(tmp_path: Path) -> None:
    """Keys all in a narrow band (never the shuffle's, but the answer must not depend on it)."""
    rng = np.random.default_rng(3)
    keys = rng.integers(1 << 62, (1 << 62) + (1 << 40), 100000, dtype=np.uint64)
    keys = np.unique(keys)
    path, base = _run(tmp_path, keys)
    for lo, hi in _bounds(len(keys), rng) + [(1 << 62, (1 << 62) + (1 << 39))]:
        got = runs.read_slice(path, lo, hi, base)
        assert (got.a, got.b) == runs.key_range(keys, lo, hi)


def test_a_truncated_run_is_refused(tmp_path: Path) -> None:
    keys = shuffle_keys(1, "f", np.arange(5000, dtype=np.int64))
    path, _ = _run(tmp_path, keys)
    with open(path, "r+b") as fh:
        fh.truncate(runs.HEADER.size + 8 * 100)
    with pytest.raises(OSError, match="truncated"):
        runs.read_slice(path, 1 << 63, 1 << 64)
