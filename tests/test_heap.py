"""etl.base.heap: the malloc thresholds are set once per process, and only on glibc."""

from __future__ import annotations

import platform

import numpy as np

from etl.base import heap


def test_set_once_and_idempotent() -> None:
    first = heap.keep_freed_memory()
    assert heap.keep_freed_memory() is first
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert first  # glibc takes both thresholds
    # big buffers still allocate, fill and free as before
    for _ in range(3):
        a = np.ones(40 << 20, np.uint8)
        assert int(a[-1]) == 1
        del a
