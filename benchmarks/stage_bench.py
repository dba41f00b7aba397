"""The two stages of the `files` strategy alone, with their real threads, without Beam: wall
and CPU seconds, so a change to one stage is measured without the other's noise.

    python -m benchmarks.stage_bench stage1 [--rows 4000000] [--spill none|disk] [--workdir W]
    python -m benchmarks.stage_bench stage2 [--index] [--workdir W]

stage1: the benchmark CSV (benchmarks.data, `--rows` of it) read, encoded, keyed, sorted and
framed the way `_ReadEncodeFn` does (the reader's prefetch thread, `ordered_map` over the
cores), each run spilled to a file under W (`--spill disk`) or dropped (`none`).
stage2: the 8 shards of benchmarks.shard_writer_bench's 40 synthetic spills written by two
threads at once (the local runner's two workers), index files with `--index`; prints the
first shard's sha256, which no change to the writer may move.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import yaml

from benchmarks.data import ensure_csv
from benchmarks.same_shards import REPO
from benchmarks.shard_writer_bench import SHARDS, spills
from etl.base import heap
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.formats.shards import ShardFormat
from etl.shuffle import files, keys
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import read_slice, sorted_run
from etl.sources import make_reader
from transforms.prefetch import ordered_map, prefetch


def stage1(workdir: str, rows: int, spill: str) -> str:
    path = ensure_csv(workdir, rows)
    with open(os.path.join(REPO, "schemas", "bench_csv.yaml"), encoding="utf-8") as fh:
        schema = schema_from_dict(yaml.safe_load(fh))
    encoder = Encoder(schema)
    reader = make_reader({"format": "csv", "paths": [path]}, ".", "bench")
    reader.prepare(schema, 1 << 26)
    out = os.path.join(workdir, "stage1-spills")
    os.makedirs(out, exist_ok=True)

    def work(block) -> int:  # noqa: ANN001 - a reader's Block
        encoded = encoder.encode(block.columns, source=path, positions=block.positions,
                                 lines=block.lines, offsets=block.offsets)
        positions = np.asarray(block.positions)[encoded.rows]
        run = sorted_run("train", keys.shuffle_keys(42, path, positions),
                         keys.record_ids(0, positions), encoded.array)
        if spill == "disk":
            files.write_spill(os.path.join(out, f"{int(positions[0])}.spill"), run, True)
        return len(positions)

    try:
        wall, cpu = time.perf_counter(), time.process_time()
        n = sum(ordered_map(work, prefetch(reader.read(path))))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return (f"stage1 (spills: {spill}): {n} records {wall:.2f} s wall {cpu:.2f} CPU-s "
            f"({cpu / wall:.2f} cores), {n / wall / 1e6:.2f} M records/s")


def stage2(workdir: str, index: bool) -> str:
    paths = spills(os.path.join(workdir, "shard_writer"), 40, 262_144)
    out = os.path.join(workdir, "stage2-staging")
    shutil.rmtree(out, ignore_errors=True)  # a fresh folder, as a run's staging is
    os.makedirs(out)
    step = (1 << 64) // SHARDS
    fmt = ShardFormat.of("tfrecord", "none", index)

    def one(i: int) -> str:
        lo, hi = i * step, (i + 1) * step
        take = sum(len(read_slice(p, lo, hi)) for p in paths)
        return files.write_files_shard(ShardPlan("train", i, SHARDS, lo, hi, 0, take), paths,
                                       out, fmt).sha256

    try:
        wall, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(2) as pool:
            shas = list(pool.map(one, range(SHARDS)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return (f"stage2 ({SHARDS} shards, 2 threads, index {'on' if index else 'off'}): "
            f"{wall:.2f} s wall {cpu:.2f} CPU-s ({cpu / wall:.2f} cores), first sha256 "
            f"{shas[0][:16]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.stage_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("stage", choices=["stage1", "stage2"])
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--spill", choices=["none", "disk"], default="disk")
    p.add_argument("--index", action="store_true")
    p.add_argument("--workdir", default="bench_out")
    args = p.parse_args(argv)
    heap.keep_freed_memory()  # as the pipeline's DoFns do
    print(stage1(args.workdir, args.rows, args.spill) if args.stage == "stage1"
          else stage2(args.workdir, args.index))
    return 0


if __name__ == "__main__":
    sys.exit(main())
