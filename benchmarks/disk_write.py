"""How fast the disk under DIR takes a shard stage's writes: O_DIRECT writes of 4 MiB buffers,
as etl.storage.direct_file writes every local shard, from 1, 2 and 4 writers at once (a file
each, fsynced), `--mib` in all per line.

    python -m benchmarks.disk_write [--mib 1024] [--dir DIR]

The shard stage cannot finish before its output is on the disk: at this rate a run's output
bytes take at least output / rate seconds there, whatever the CPU does (benchmarks/README.md).
A file system that refuses O_DIRECT (tmpfs) is reported as such.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import tempfile
import threading
import time

BUFFER = 4 << 20


def _write(path: str, size: int, errors: list[BaseException]) -> None:
    try:
        pages = mmap.mmap(-1, BUFFER)  # page-aligned, as O_DIRECT needs
        pages.write(os.urandom(BUFFER))
        buf = memoryview(pages)  # slices of it stay in those pages (an mmap's slice is a copy)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
        try:
            done = 0
            while done < size:
                done += os.write(fd, buf[: min(BUFFER, size - done)])
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(path)
    except BaseException as e:  # noqa: BLE001 - reported by the caller
        errors.append(e)


def rate(folder: str, total: int, writers: int) -> float:
    """GB/s of `writers` files written at once, `total` bytes in all."""
    each = max(BUFFER, total // writers // BUFFER * BUFFER)
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_write, args=(os.path.join(folder, f"disk_write{i}.bin"),
                                                     each, errors)) for i in range(writers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return each * writers / (time.perf_counter() - start) / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.disk_write",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--dir", default=None, help="a folder on the disk to measure (default: temp)")
    args = p.parse_args(argv)
    if not hasattr(os, "O_DIRECT"):
        print("O_DIRECT is not available on this system")
        return 1
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        print(f"O_DIRECT writes of {BUFFER >> 20} MiB buffers, {args.mib} MiB per line, fsynced")
        for writers in (1, 2, 4):
            try:
                gbs = rate(folder, args.mib << 20, writers)
            except OSError as e:
                print(f"{writers} writer(s): refused ({e.strerror})")
                return 1
            print(f"{writers} writer(s): {gbs:.2f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
