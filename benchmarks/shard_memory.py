"""Peak memory of the engine's shard-writing step, by shard size: the grouped chunks stream
through `etl.shuffle.engine.write_engine_shard` (read once, merged in bounded memory) vs the
baseline a plain GroupByKey consumer does: `list(values)`, then one sort of the whole shard.

Each measurement runs in a fresh process: chunks of --chunk-mb are generated one at a time
(as a runner's lazy group iterable hands them over), so the input itself is never all in
memory; peak RSS above the process's RSS just before the call is the step's own memory.

    python -m benchmarks.shard_memory [--sizes-mb 64 256 1024] [--chunk-mb 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import numpy as np

RECORD = 1000  # bytes per record (framing included: the writer copies bytes, it does not parse)


def chunks(total_bytes: int, chunk_bytes: int, shards_of_run: int = 1) -> Iterator:
    """Sorted chunks (one per run) whose keys interleave, as a shuffled shard's do."""
    from etl.shuffle.engine import Chunk  # noqa: PLC0415

    per_chunk = max(1, chunk_bytes // RECORD)
    n_chunks = max(1, total_bytes // (per_chunk * RECORD))
    for c in range(n_chunks):
        rng = np.random.default_rng(c)
        keys = np.sort(rng.integers(0, 1 << 63, per_chunk, dtype=np.uint64))
        ids = (np.uint64(c) << np.uint64(32)) + np.arange(per_chunk, dtype=np.uint64)
        offsets = np.arange(per_chunk + 1, dtype=np.int64) * RECORD
        yield Chunk.of(keys, ids, offsets, np.full(per_chunk * RECORD, c % 251, np.uint8).data)


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(size_mb: int, chunk_mb: int, way: str) -> dict:
    """In this (fresh) process: write one shard of `size_mb` the `way` given."""
    from etl.formats.shards import ShardFormat  # noqa: PLC0415
    from etl.shuffle import engine  # noqa: PLC0415
    from etl.shuffle.planning import ShardPlan  # noqa: PLC0415
    from etl.shuffle.runs import MemorySlice  # noqa: PLC0415
    from etl.shuffle.shard_writer import write_shard  # noqa: PLC0415

    total = size_mb << 20
    n = (total // ((chunk_mb << 20) // RECORD * RECORD)) * ((chunk_mb << 20) // RECORD)
    plan = ShardPlan("train", 0, 1, 0, 1 << 64, 0, n)
    before = _rss_mb()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shard-memory-") as staging:
        if way == "stream":
            result = engine.write_engine_shard(plan, chunks(total, chunk_mb << 20), staging,
                                               ShardFormat())
        else:  # the baseline: the group materialised as one list, the shard sorted at once
            held = list(chunks(total, chunk_mb << 20))
            result = write_shard(plan, [MemorySlice(*c.unpack("a chunk")) for c in held],
                                 staging, ShardFormat())
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert result.num_records == n
    return {"size_mb": size_mb, "way": way, "records": n, "seconds": round(seconds, 2),
            "peak_above_start_mb": round(peak - before), "start_rss_mb": round(before)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--chunk-mb", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ways", nargs="+", default=["stream", "list"])
    parser.add_argument("--one", nargs=2, metavar=("SIZE_MB", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(int(args.one[0]), args.chunk_mb, args.one[1])))
        return 0
    print(f"{'shard':>8} {'way':>7} {'records':>9} {'peak above start (MB)':>22} {'s':>6}")
    for size in args.sizes_mb:
        for way in args.ways:
            runs = [json.loads(subprocess.run(
                [sys.executable, "-m", "benchmarks.shard_memory", "--chunk-mb",
                 str(args.chunk_mb), "--one", str(size), way],
                check=True, capture_output=True, text=True).stdout) for _ in range(args.repeat)]
            peak = statistics.median(r["peak_above_start_mb"] for r in runs)
            secs = statistics.median(r["seconds"] for r in runs)
            print(f"{size:>6}MB {way:>7} {runs[0]['records']:>9,} {peak:>22,.0f} {secs:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
