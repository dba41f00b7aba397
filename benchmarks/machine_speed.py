"""How fast this machine is right now, on fixed work that the pipeline's own cost is made of,
so that figures taken at different hours (or on different hosts) can be compared.

    python -m benchmarks.machine_speed [--rows 100000] [--mib 32]

The machine is shared: the same code, with the same packages, has taken 10.6 s and 19 s for
the 10M-row CSV job a few hours apart. A records/s figure means little without the speed of
the machine it was taken on, so benchmarks.run records this before and after its runs. Each
figure is the best of a few tries (the least disturbed), on one thread unless it says so:

- python_ns: nanoseconds per iteration of a plain Python loop (the interpreter's speed);
- csv_mrows: millions of rows a second that Arrow's CSV reader parses on one thread, rows of
  the benchmark CSV (benchmarks.data) from memory;
- csv_mrows_two: the same parse on two threads at once, both threads' rows together: near
  twice csv_mrows where the two cores are whole cores, less where they share one (hyper-
  threads) or a neighbour keeps the other busy, as the pipeline's two busy threads find it;
- crc_call_ns: nanoseconds per call of the framing's CRC32C (etl.formats.tfrecord.crc32c,
  fastcrc's; google-crc32c's before 2026-11-28) on records of 190 bytes, the benchmark CSV's
  Example size: the framing's one call per record, mostly the cost of calling native code
  from Python;
- crc32c_gbs, sha256_gbs: GB/s of that CRC32C and of hashlib's sha256 over one buffer (the
  framing's and the manifest's checksums);
- copy_gbs: GB/s of a NumPy copy between two buffers already in memory.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import threading
import timeit
from collections.abc import Callable

import numpy as np
import pyarrow.csv as pa_csv

from benchmarks.data import CSV_HEADER, csv_chunk
from etl.formats import tfrecord

TRIES = 5
RECORD = 190  # bytes: a benchmark CSV row as an Example
CALLS = 50_000


def _best(work: Callable[[], object], tries: int = TRIES) -> float:
    """The shortest of `tries` timings of `work`, in seconds."""
    return min(timeit.repeat(work, number=1, repeat=tries))


def _python_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def parse_rows(text: bytes) -> int:
    """Rows Arrow's CSV reader parses out of `text`, on the calling thread only."""
    table = pa_csv.read_csv(io.BytesIO(text), read_options=pa_csv.ReadOptions(use_threads=False))
    return table.num_rows


def _on_two_threads(work: Callable[[], object]) -> None:
    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def measure(rows: int = 100_000, mib: int = 32) -> dict[str, float]:
    """The seven figures of the module's docstring, rounded for a table."""
    loop = 1_000_000
    text = (CSV_HEADER + "\n" + csv_chunk(0, rows)).encode("ascii")
    if parse_rows(text) != rows:
        raise RuntimeError(f"the reference CSV did not parse into {rows} rows")
    buf = os.urandom(mib << 20)
    src = np.frombuffer(buf, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # both buffers in memory before the copy is timed
    size = len(buf) / 1e9
    calls = os.urandom(CALLS * RECORD)  # whatever `mib` is
    records = [calls[i : i + RECORD] for i in range(0, len(calls), RECORD)]
    return {
        "python_ns": round(_best(lambda: _python_loop(loop)) / loop * 1e9, 1),
        "csv_mrows": round(rows / _best(lambda: parse_rows(text), 3) / 1e6, 3),
        "csv_mrows_two": round(2 * rows / _best(
            lambda: _on_two_threads(lambda: parse_rows(text)), 3) / 1e6, 3),
        "crc_call_ns": round(_best(lambda: list(map(tfrecord.crc32c, records)))
                             / CALLS * 1e9, 1),
        "crc32c_gbs": round(size / _best(lambda: tfrecord.crc32c(buf)), 2),
        "sha256_gbs": round(size / _best(lambda: hashlib.sha256(buf).digest()), 2),
        "copy_gbs": round(size / _best(lambda: np.copyto(dst, src)), 2),
    }


def describe(speed: dict[str, float]) -> str:
    return (f"Python loop {speed['python_ns']} ns/iteration, CSV parse {speed['csv_mrows']}M "
            f"rows/s on one thread and {speed['csv_mrows_two']}M on two, a crc32c call "
            f"{speed['crc_call_ns']} ns, crc32c {speed['crc32c_gbs']} GB/s, sha256 "
            f"{speed['sha256_gbs']} GB/s, copy {speed['copy_gbs']} GB/s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.machine_speed",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000, help="rows of the reference CSV")
    p.add_argument("--mib", type=int, default=32, help="MiB checksummed and copied")
    args = p.parse_args(argv)
    print(f"machine speed: {describe(measure(args.rows, args.mib))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
