"""How fast the disk under DIR takes a shard stage's writes: etl.storage.direct_file's own
writer (O_DIRECT from page-aligned 4 MiB buffers, a writer thread per file), as every local
shard is written, from 1, 2 and 4 files at once (each fsynced), `--mib` in all per line.

    python -m benchmarks.disk_write [--mib 1024] [--dir DIR]

The shard stage cannot finish before its output is on the disk: at this rate a run's output
bytes take at least output / rate seconds there, whatever the CPU does (benchmarks/README.md).
A file system that refuses O_DIRECT at open is reported as such (one that refuses it at the
first write gets buffered writes, as the shard writer does there).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

from etl.base.errors import StorageError
from etl.storage import fs
from etl.storage.direct_file import DirectFile

BUFFER = DirectFile.BUFFER


def _write(path: str, size: int, data: memoryview, errors: list[BaseException]) -> None:
    try:
        fh = DirectFile.open(path, fs.guarded)
        if fh is None:
            raise OSError(22, "O_DIRECT refused", path)
        try:
            with fh:
                done = 0
                while done < size:
                    done += fh.write(data[: size - done])
        finally:
            os.unlink(path)
    except BaseException as e:  # noqa: BLE001 - reported by the caller
        errors.append(e)


def rate(folder: str, total: int, writers: int) -> float:
    """GB/s of `writers` files written at once, `total` bytes in all."""
    each = max(BUFFER, total // writers // BUFFER * BUFFER)
    data = memoryview(os.urandom(BUFFER))
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_write, args=(os.path.join(folder, f"disk_write{i}.bin"),
                                                     each, data, errors))
               for i in range(writers)]
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
            except (OSError, StorageError) as e:
                print(f"{writers} writer(s): refused ({e})")
                return 1
            print(f"{writers} writer(s): {gbs:.2f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
