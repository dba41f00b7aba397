"""A sorted run's framing alone: the compiled loop (etl.formats.compiled_framing) against
fastcrc's per-record CRC after Arrow's `take`, the two ways etl.formats.tfrecord.frame_records
frames a column.

    python -m benchmarks.framing_bench [--rows 1000000] [--block 65536] [--rounds 5]

The records are the benchmark CSV's Examples (benchmarks.wire_bench.stored_blocks, ~182 bytes
each), each block framed in a random order as a run is; the two ways alternate block by block
in one process, one thread. Prints ns a record per round, the medians, and checks that both
give the same bytes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks.wire_bench import stored_blocks
from etl.formats import compiled_framing, proto_wire
from etl.formats.tfrecord import frame_records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--block", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    t = time.perf_counter()
    if compiled_framing.framer() is None:
        print("no compiled framing on this machine (see etl/formats/compiled_framing.py)")
        return 1
    print(f"compiled in {time.perf_counter() - t:.3f} s (with llvmlite's import)")
    records = [proto_wire.serialize_examples(b) for b in stored_blocks(args.rows, args.block)]
    rng = np.random.default_rng(3)
    orders = [rng.permutation(len(r)) for r in records]
    for r, o in zip(records, orders, strict=True):
        if not frame_records(r, o).equals(frame_records(r, o, compiled=False)):
            print("MISMATCH: the two framings differ", file=sys.stderr)
            return 1
    seconds: dict[str, list[float]] = {"fastcrc": [], "compiled": []}
    for _ in range(args.rounds):
        spent = dict.fromkeys(seconds, 0.0)
        for r, o in zip(records, orders, strict=True):
            t0 = time.perf_counter()
            frame_records(r, o, compiled=False)
            t1 = time.perf_counter()
            frame_records(r, o)
            spent["fastcrc"] += t1 - t0
            spent["compiled"] += time.perf_counter() - t1
        for name, s in spent.items():
            seconds[name].append(s)
        print("  ".join(f"{name} {s / args.rows * 1e9:5.0f} ns/record" for name, s in spent.items()))
    medians = {name: statistics.median(s) / args.rows * 1e9 for name, s in seconds.items()}
    print(f"medians: fastcrc after take {medians['fastcrc']:.0f} ns/record, compiled "
          f"{medians['compiled']:.0f}; {medians['fastcrc'] / medians['compiled']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
