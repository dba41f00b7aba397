"""What memory a process has not touched yet costs on this machine: the first write to new
anonymous pages (4 KiB and transparent huge pages) and to new page-cache pages (a file written
8 MiB a call, and in etl.storage.fs.WRITE_SLICE pieces as every local write now is), each
right after the same amount was freed and again after `--idle` seconds without it.

    python -m benchmarks.fresh_memory [--mib 512] [--idle 10] [--dir DIR]

Each figure comes from a fresh child process (nothing reused inside one process), so it is
what a run's spills and buffers pay. On a virtual machine whose host takes freed guest memory
back (free page reporting, a balloon), "after idle" is what every run pays for memory it did
not free and reuse within the last seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

from etl.storage.fs import WRITE_SLICE

CHILD = r"""
import mmap, os, sys, time
kind, size, folder, piece = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
data = os.urandom(8 << 20)
if kind.startswith("file"):
    path = os.path.join(folder, "fresh_memory.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    view = memoryview(data)
    t = time.perf_counter()
    for _ in range(size >> 23):
        for at in range(0, len(data), piece):
            os.write(fd, view[at : at + piece])
    took = time.perf_counter() - t
    os.close(fd)
    os.unlink(path)
else:
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE if kind == "huge" else mmap.MADV_NOHUGEPAGE)
    t = time.perf_counter()
    for at in range(0, size, 8 << 20):
        m[at : at + (8 << 20)] = data
    took = time.perf_counter() - t
print(took)
"""

KINDS = {"small": "anonymous, 4 KiB pages", "huge": "anonymous, transparent huge pages",
         "file": "page cache, 8 MiB a write", "file-sliced": "page cache, WRITE_SLICE a write"}


def first_write(kind: str, size: int, folder: str) -> float:
    piece = WRITE_SLICE if kind == "file-sliced" else 8 << 20
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(size), folder, str(piece)],
                         check=True, capture_output=True, text=True).stdout
    return size / float(out) / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fresh_memory",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=512)
    p.add_argument("--idle", type=float, default=10.0)
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where the file is written")
    args = p.parse_args(argv)
    size = args.mib << 20
    print(f"first write of {args.mib} MiB, GB/s ({args.idle:g} s idle before the second column)")
    for kind, what in KINDS.items():
        first_write(kind, size, args.dir)  # the same amount just freed: warm
        warm = first_write(kind, size, args.dir)
        time.sleep(args.idle)
        cold = first_write(kind, size, args.dir)
        print(f"  {what:36s} just freed {warm:6.2f}   after idle {cold:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
