"""File-system operations of a conversion per shuffle strategy, and planning memory.

    python -m benchmarks.shuffle_ops [--sizes 16,64,256] [--rows-per-block 1000]
                                     [--planning-blocks 1000000] [--workdir DIR]

Operations: every call into etl.storage.fs is counted by a wrapper installed in this process, and the
pipeline runs on FnApiRunner in `in_memory` mode, so every call is made here. A generated
CSV of blocks × rows-per-block rows is read in blocks of `block_rows` and written to as many
shards as blocks, once with `shuffle.via: files` and once with `via: engine`. Held spills are
off (`spill_in_memory: 0`): on any runner but the local one every spill is a file (object).
`delete_tree` counts one listing plus one delete per file below the path, as an object store
needs. The run's own files (lock, markers, log) are counted too: they are the same in both.

Planning memory: the planning CombineFn (transforms.convert.MergeKeysFn) is called directly
for N simulated blocks (create_accumulator / add_input / merge_accumulators / extract_output,
1,000 blocks per bundle as a runner would lift it), with tracemalloc's peak.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time
import tracemalloc
from collections import Counter
from contextlib import contextmanager
from typing import Any

import numpy as np
import yaml

from etl.storage import fs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CountingFs:
    """Wraps etl.storage.fs's functions in place; counts per category of path."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.saved: dict[str, Any] = {}

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    @contextmanager
    def installed(self):
        real = {name: getattr(fs, name) for name in
                ("open_read", "open_write", "match", "list_dir", "delete_tree", "delete",
                 "exists", "size", "rename")}
        counter = self

        class Reader:
            def __init__(self, fh: Any):
                self.fh = fh

            def read(self, *a: Any) -> bytes:
                data = self.fh.read(*a)
                counter.add("reads")
                counter.add("bytes_read", len(data))
                return data

            def __getattr__(self, name: str) -> Any:
                return getattr(self.fh, name)

            def __enter__(self) -> Reader:
                return self

            def __exit__(self, *exc: object) -> None:
                self.fh.close()

            def __iter__(self):
                return iter(self.fh)

        class Writer(Reader):
            def write(self, data: Any) -> int:
                counter.add("bytes_written", len(memoryview(data).cast("B")))
                return self.fh.write(data)

        def open_read(path: str) -> Any:
            counter.add("opens_read")
            return Reader(real["open_read"](path))

        def open_write(path: str, *a: Any, **k: Any) -> Any:
            counter.add("opens_write")
            return Writer(real["open_write"](path, *a, **k))

        def listing(name: str):
            def f(*a: Any, **k: Any) -> Any:
                counter.add("listings")
                return real[name](*a, **k)
            return f

        def delete_tree(path: str) -> None:
            counter.add("listings")
            files = sum(len(f) for _, _, f in os.walk(path)) if os.path.isdir(path) else 1
            counter.add("deletes", files if os.path.lexists(path) else 0)
            real["delete_tree"](path)

        def delete(paths: list[str]) -> None:
            counter.add("deletes", len(paths))
            real["delete"](paths)

        def other(name: str):
            def f(*a: Any, **k: Any) -> Any:
                counter.add("other")
                return real[name](*a, **k)
            return f

        patched = {"open_read": open_read, "open_write": open_write,
                   "match": listing("match"), "list_dir": listing("list_dir"),
                   "delete_tree": delete_tree, "delete": delete, "exists": other("exists"),
                   "size": other("size"), "rename": other("rename")}
        for name, fn in patched.items():
            setattr(fs, name, fn)
        try:
            yield self
        finally:
            for name, fn in real.items():
                setattr(fs, name, fn)


def make_job(workdir: str, blocks: int, rows_per_block: int, via: str) -> str:
    from benchmarks.data import write_csv  # noqa: PLC0415

    rows = blocks * rows_per_block
    data = os.path.join(workdir, f"csv-{rows}.csv")
    if not os.path.exists(data):
        write_csv(data, rows)
    job = {"schema": os.path.join(REPO, "schemas", "bench_csv.yaml"),
           "sources": {"train": {"format": "csv", "paths": [data],
                                 "block_rows": rows_per_block}},
           "output": os.path.join(workdir, f"out-{via}-{blocks}"), "shards": blocks,
           "shuffle": {"seed": 1, "via": via}, "spill_in_memory": 0}
    path = os.path.join(workdir, f"job-{via}-{blocks}.yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(job, fh)
    return path


def count_ops(workdir: str, blocks: int, rows_per_block: int, via: str) -> dict[str, Any]:
    from cli.run import run_job  # noqa: PLC0415
    from etl.job.config import load_job  # noqa: PLC0415

    job = load_job(make_job(workdir, blocks, rows_per_block, via))
    counting = CountingFs()
    started = time.time()
    with counting.installed():
        result = run_job(job, ["--runner=FnApiRunner", "--direct_running_mode=in_memory",
                                   "--direct_num_workers=1"])
    shas = sorted(s["sha256"] for s in result.manifest["splits"]["train"]["shards"])
    shutil.rmtree(job.output)
    return {"via": via, "blocks": blocks, "shards": blocks, "seconds": time.time() - started,
            "shas": shas, **counting.counts}


def planning_memory(num_blocks: int, per_bundle: int = 1000) -> list[dict[str, Any]]:
    """Peak traced memory of merging `num_blocks` simulated block statistics."""
    from etl.shuffle.planning import RunKeys, make_plan  # noqa: PLC0415
    from transforms.convert import MergeKeysFn  # noqa: PLC0415

    rng = np.random.default_rng(0)
    out = []
    for shuffled in (True, False):
        fn = MergeKeysFn(shuffled)
        # shuffled: 1,000 distinct blocks of 64k records, cycled (the histogram's size does
        # not depend on the content); input order: every block its own interval
        pool = []
        for _ in range(1000 if shuffled else 0):
            keys = np.sort(rng.integers(0, 2**63, 65_536, dtype=np.uint64) * np.uint64(2))
            top = (keys >> np.uint64(48)).astype(np.uint16)
            buckets, counts = np.unique(top, return_counts=True)
            pool.append(RunKeys("train", 65_536, 65_536 * 200, int(keys[0]),
                                   int(keys[-1]) + 1, buckets, counts.astype(np.int64)))
        tracemalloc.start()
        started = time.time()
        merged = fn.create_accumulator()
        for bundle in range(0, num_blocks, per_bundle):
            acc = fn.create_accumulator()
            for b in range(bundle, min(num_blocks, bundle + per_bundle)):
                stats = (pool[b % len(pool)] if shuffled else
                         RunKeys("train", 65_536, 65_536 * 200, b << 16, (b + 1) << 16))
                acc = fn.add_input(acc, stats)
            merged = fn.merge_accumulators([merged, fn.compact(acc)])
        final = fn.extract_output(merged)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        plan = make_plan(final, ("train",), 4096, None, 1 << 40)
        assert sum(p.take for p in plan.shards["train"]) == num_blocks * 65_536
        out.append({"keys": "shuffled" if shuffled else "input order", "blocks": num_blocks,
                    "accumulator_bytes": final.nbytes, "peak_traced_bytes": peak,
                    "seconds": time.time() - started})
    return out


COLUMNS = ("opens_read", "reads", "bytes_read", "opens_write", "bytes_written", "listings",
           "deletes", "other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64,256", help="blocks (= shards) per run")
    parser.add_argument("--rows-per-block", type=int, default=1000)
    parser.add_argument("--planning-blocks", type=int, default=1_000_000)
    parser.add_argument("--workdir", default=os.path.join(REPO, "bench_out", "shuffle_ops"))
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rows = []
    for blocks in [int(x) for x in args.sizes.split(",") if x]:
        pair = [count_ops(args.workdir, blocks, args.rows_per_block, via)
                for via in ("files", "engine")]
        assert pair[0]["shas"] == pair[1]["shas"], "strategies wrote different shards"
        rows += pair
    head = f"{'blocks x shards':>15} {'via':>7} " + " ".join(f"{c:>13}" for c in COLUMNS)
    print(head)
    for r in rows:
        cells = [f"{r.get(c, 0) / 1e6:>13.1f}" if c.startswith("bytes") else f"{r.get(c, 0):>13,}"
                 for c in COLUMNS]
        print(f"{r['blocks']:>7} x {r['shards']:<5} {r['via']:>7} " + " ".join(cells))
    print("(bytes in MB; identical shard sha256 in both strategies at every size)")
    if args.planning_blocks:
        for r in planning_memory(args.planning_blocks):
            print(f"planning, {r['keys']}: {r['blocks']:,} blocks -> accumulator "
                  f"{r['accumulator_bytes'] / 2**20:.2f} MiB, peak traced "
                  f"{r['peak_traced_bytes'] / 2**20:.2f} MiB, {r['seconds']:.1f} s")


if __name__ == "__main__":
    main()
