"""The shard-writing step alone (stage 2 of the `files` strategy): two shards of eight merged
from RUNS synthetic spills of RECORDS sorted records each (150-250 bytes, the benchmark CSV's
record size; 40 x 262,144 is its block count and size at 10M rows), process CPU seconds and the
shards' sha256 (which must not change when the writer does).

    python -m benchmarks.shard_writer_bench [--runs 40] [--records 262144] [--workdir DIR]

The spills are generated once per shape under WORKDIR and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import pyarrow as pa

from etl.formats.shards import ShardFormat
from etl.shuffle import files
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import read_slice, sorted_run

SHARDS = 8


def spills(workdir: str, runs: int, records: int) -> tuple[str, ...]:
    """RUNS spill files of RECORDS framed, sorted records (seeded: the same bytes every time)."""
    folder = os.path.join(workdir, f"spills-{runs}-{records}")
    done = os.path.join(folder, "done")
    if not os.path.exists(done):
        os.makedirs(folder, exist_ok=True)
        rng = np.random.default_rng(7)
        for r in range(runs):
            sizes = rng.integers(150, 250, records)
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            data = rng.integers(0, 255, int(offsets[-1]), dtype=np.uint8).tobytes()
            column = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), records, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            keys = rng.integers(0, 2**63, records, dtype=np.uint64) * np.uint64(2)
            ids = (np.uint64(r) << np.uint64(40)) + np.arange(records, dtype=np.uint64)
            files.write_spill(os.path.join(folder, f"{r:04d}.spill"),
                              sorted_run("train", keys, ids, column), True)
        open(done, "w").close()  # noqa: SIM115 - an empty marker
    return tuple(sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".spill")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.shard_writer_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--records", type=int, default=262_144)
    p.add_argument("--workdir", default="bench_out/shard_writer")
    args = p.parse_args(argv)
    paths = spills(args.workdir, args.runs, args.records)
    out = os.path.join(args.workdir, "staging")
    os.makedirs(out, exist_ok=True)
    step = (1 << 64) // SHARDS
    fmt = ShardFormat.of("tfrecord", "none", True)
    shards = []
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(2):
        lo, hi = i * step, (i + 1) * step
        take = sum(len(read_slice(path, lo, hi)) for path in paths)
        result = files.write_files_shard(ShardPlan("train", i, SHARDS, lo, hi, 0, take), paths,
                                         out, fmt)
        shards.append([result.name, result.num_records, result.sha256,
                       result.index_file.sha256 if result.index_file else None])
    print(json.dumps({"cpu_seconds": round(time.process_time() - cpu, 3),
                      "wall_seconds": round(time.perf_counter() - wall, 3), "shards": shards}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
