"""Keep freed heap memory in the process (glibc's malloc), so big buffers are reused, not
re-faulted; and give big all-zero masks pages of their own (`lazy_zeros`), since a zeroed
allocation from that kept heap is written in full.

The data path allocates and frees tens of MB per block, over and over: NumPy's arrays of a
262,144-record block (keys, offsets, the framed run) are 2-52 MB each. glibc hands any
allocation above its mmap threshold (at most 32 MB by default) a fresh mapping and unmaps it
on free, and trims the top of the heap above its trim threshold, so the next block's buffers
are new pages the kernel must map, zero and unmap again: on the 10M-row benchmark CSV, `perf`
showed page zeroing and the fault path at ~10% of the run's CPU. Raising both thresholds keeps
freed memory in the heap for the next block (figures: benchmarks/README.md, "CSV 10M toward 1M
records/s"): about 2 CPU-s less system time at 10M rows (of ~23) for ~30 MB more peak RSS,
since the heap never grows beyond the largest working set anyway. (Huge pages that Arrow's own
allocator touches first are still zeroed: that part is not glibc's.)

Set with `mallopt` at run time (what GLIBC_TUNABLES would set before the process starts, which
a worker cannot do for itself). Elsewhere (musl, macOS, Windows) this does nothing. The setting
is the process's: a run on the local runner in the caller's own process (a notebook) leaves it
set, so freed memory up to TRIM_THRESHOLD stays with that process for its next allocations
(counted in its RSS) instead of going back to the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import platform
import threading

import numpy as np

MMAP_THRESHOLD = 512 << 20  # allocations above this get a mapping of their own
TRIM_THRESHOLD = 1 << 30  # free memory at the heap's top kept up to this
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3

LAZY_ZEROS_BYTES = 1 << 20  # below this a zeroed heap allocation is as cheap

_lock = threading.Lock()
_done: list[bool] = []  # [True] once set (or found impossible) in this process


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process, once; True when they are set
    (False where the C library is not glibc or refuses)."""
    with _lock:
        if _done:
            return _done[0]
        _done.append(_set())
        return _done[0]


def _set() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def lazy_zeros(n: int, dtype: np.dtype | type = bool) -> np.ndarray:
    """`n` zeros, writable, in pages of their own that read as the kernel's zero page until
    written. With freed memory kept in the heap (keep_freed_memory), a big `np.zeros` is a
    calloc from the heap, and glibc writes every byte of a reused chunk: the all-False mask of
    a block of 64k MNIST-shaped images (51M pixel values, none of which can be bad) cost a
    51 MB write and its page faults, per block (benchmarks/README.md, "The pixels' mask")."""
    dtype = np.dtype(dtype)
    size = n * dtype.itemsize
    if size < LAZY_ZEROS_BYTES or not hasattr(mmap, "MAP_PRIVATE"):  # Windows: no such flags
        return np.zeros(n, dtype)
    pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):  # read through the huge zero page: 25 faults, not 12,500
        try:
            pages.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages: 4 KiB zero pages
            pass
    return np.frombuffer(pages, dtype, n)
