"""The two stages of the `files` strategy alone, with their real threads, without Beam: wall
and CPU seconds, so a change to one stage is measured without the other's noise.

    python -m benchmarks.stage_bench stage1 [--rows 4000000] [--spill none|disk] [--workdir W]
    python -m benchmarks.stage_bench stage2 [--index] [--workdir W]
    python -m benchmarks.stage_bench read-idx [--images 600000] [--busy] [--workdir W]
    python -m benchmarks.stage_bench merge [--runs 40] [--records 262144] [--workdir W]

stage1: the benchmark CSV (benchmarks.data, `--rows` of it) read and put through
`transforms.convert.encode_block` as `_ReadEncodeFn` does (the reader's prefetch thread,
`ordered_map` over the cores), each run spilled to a file under W (`--spill disk`) or dropped (`none`).
stage2: the 8 shards of benchmarks.shard_writer_bench's 40 synthetic spills written by two
threads at once (the local runner's two workers), index files with `--index`; prints the
first shard's sha256, which no change to the writer may move.
read-idx: the benchmark's gzipped IDX images (benchmarks.data) read alone through the IDX
source's blocks; `--busy` adds a thread that takes the GIL as an encode thread does (a
Python loop, then NumPy work without it), since reading gzip is where the GIL costs most.
merge: stage2's merge order alone (etl.shuffle.merge.merged_batches over the 8 shards of
`--runs` spills of `--records`, by default stage2's 40 x 262,144; one thread, no payload
read): the CPU of the merge's rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from benchmarks.data import ensure_csv, ensure_images
from benchmarks.shard_writer_bench import SHARDS, spills
from etl.base import heap
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.formats.shards import ShardFormat
from etl.job.read_plan import WHOLE_FILE, ReadTask
from etl.shuffle import files
from etl.shuffle.merge import merged_batches
from etl.shuffle.planning import ShardPlan
from etl.shuffle.runs import read_slice
from etl.sources import make_reader
from transforms.convert import encode_block, flat_settings
from transforms.prefetch import ordered_map, prefetch

SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "bench_csv.yaml"


def stage1(workdir: str, rows: int, spill: str) -> str:
    path = ensure_csv(workdir, rows)
    schema_doc = SCHEMA.read_text()
    schema = schema_from_dict(yaml.safe_load(schema_doc))
    settings = flat_settings(schema_yaml=schema_doc, sources={}, base_dir=".", fractions={},
                             seed=42, spill_dir="", staging_dir="", compression="none",
                             splits=("train",), shards=None, shard_size=None, max_shard_bytes=0)
    encoder = Encoder(schema, max_record_bytes=settings.reading.max_record_bytes)
    reader = make_reader({"format": "csv", "paths": [path]}, ".", "sources.train")
    reader.prepare(schema, settings.reading.max_record_bytes)
    (split,) = reader.splits(path, WHOLE_FILE)
    task = ReadTask("train", path, "data.csv", 0, split)
    out = os.path.join(workdir, "stage1-spills")
    os.makedirs(out, exist_ok=True)

    def work(block) -> int:  # noqa: ANN001 - a reader's Block
        done = encode_block(encoder, settings, task, block)  # what _ReadEncodeFn runs
        if spill == "disk":
            for run in done.outputs:
                files.write_spill(os.path.join(out, f"{int(run.ids[0])}.spill"), run, True)
        return done.encoded

    try:
        wall, cpu = time.perf_counter(), time.process_time()
        n = sum(ordered_map(work, prefetch(reader.read_split(split))))
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


def merge(workdir: str, runs: int, records: int) -> str:
    paths = spills(os.path.join(workdir, "shard_writer"), runs, records)
    step = (1 << 64) // SHARDS
    slices = [[read_slice(p, i * step, (i + 1) * step) for p in paths] for i in range(SHARDS)]
    n, rounds = 0, 0
    cpu = time.process_time()
    for shard in slices:
        for src, _, _, _ in merged_batches(shard, 0, sum(len(s) for s in shard)):
            n += len(src)
            rounds += 1
    cpu = time.process_time() - cpu
    return (f"merge ({SHARDS} shards of {runs} spills): {n} records in {rounds} rounds, "
            f"{cpu:.2f} CPU-s")


def read_idx(workdir: str, images: int, busy: bool) -> str:
    image_path, label_path = ensure_images(workdir, images)
    reader = make_reader({"format": "idx", "paths": {"image": image_path, "label": label_path}},
                         ".", "sources.train")
    (split,) = reader.splits(image_path, WHOLE_FILE)
    stop = threading.Event()

    def encode_like() -> None:
        work = np.ones(1 << 20)
        while not stop.is_set():
            for _ in range(300):
                pass
            (work * 2.0).sum()

    other = threading.Thread(target=encode_like, daemon=True)
    if busy:
        other.start()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        n = sum(block.num_rows for block in reader.read_split(split))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        stop.set()
    return (f"read-idx ({'with' if busy else 'without'} a busy thread): {n} images "
            f"{wall:.2f} s wall {cpu:.2f} CPU-s (both threads), {n / wall / 1e6:.2f} M images/s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.stage_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("stage", choices=["stage1", "stage2", "read-idx", "merge"])
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--spill", choices=["none", "disk"], default="disk")
    p.add_argument("--index", action="store_true")
    p.add_argument("--images", type=int, default=600_000)
    p.add_argument("--busy", action="store_true")
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--records", type=int, default=262_144)
    p.add_argument("--workdir", default="bench_out")
    args = p.parse_args(argv)
    heap.keep_freed_memory()  # as the pipeline's DoFns do
    if args.stage == "read-idx":
        print(read_idx(args.workdir, args.images, args.busy))
    elif args.stage == "merge":
        print(merge(args.workdir, args.runs, args.records))
    else:
        print(stage1(args.workdir, args.rows, args.spill) if args.stage == "stage1"
              else stage2(args.workdir, args.index))
    return 0


if __name__ == "__main__":
    sys.exit(main())
