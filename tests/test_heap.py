"""etl.base.heap: the malloc thresholds are set once per process, and only on glibc; big
zeroed masks come from pages of their own that are not written until used."""

from __future__ import annotations

import mmap
import platform

import numpy as np
import pytest

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


def test_lazy_zeros_are_zeros_and_writable() -> None:
    for n, dtype in ((10, bool), (heap.LAZY_ZEROS_BYTES, bool), (heap.LAZY_ZEROS_BYTES, np.int64)):
        a = heap.lazy_zeros(n, dtype)
        assert (a.shape, a.dtype, int(np.count_nonzero(a))) == ((n,), np.dtype(dtype), 0)
        a[n - 1] = 1
        a[0] |= True
        assert int(np.count_nonzero(a)) == 2 and bool(a[n - 1]) and bool(a[0])
    assert heap.lazy_zeros(10).base is None  # small: NumPy's zeros, its own memory
    big = heap.lazy_zeros(heap.LAZY_ZEROS_BYTES).base
    assert isinstance(big, memoryview) and isinstance(big.obj, mmap.mmap)


def test_a_big_lazy_mask_is_read_without_becoming_resident() -> None:
    """Reading a 64 MB mask maps the kernel's zero page: the process does not grow by it,
    where np.zeros from a heap that keeps freed memory writes every byte."""
    psutil = pytest.importorskip("psutil")
    me = psutil.Process()
    size = 64 << 20
    mask = heap.lazy_zeros(size)
    before = me.memory_info().rss
    assert not mask.any()
    assert me.memory_info().rss - before < 8 << 20
