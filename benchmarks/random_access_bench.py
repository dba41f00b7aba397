"""Random access (`etl.open_records`) against the sequential tf.data reader (`make_dataset`).

    python -m benchmarks.random_access_bench [--rows N] [--repeat R] [--workdir DIR]
                                             [--batch-size B] [--singles K] [--json PATH]

The data: the benchmark CSV (benchmarks/data.py, N rows, 11 columns) converted by our
pipeline (`run_pipeline.py run`, schemas/bench_csv.yaml, 16 uncompressed shards with their
index files), kept under WORKDIR/random_access/ and reused. Then, in this one process, each
variant R times (the median is reported), every variant reading every record once:

- make_dataset:    `make_dataset(out, shuffle_buffer=0, batch_size=B)`, the whole split in
                   file order, each batch pulled into NumPy (the baseline: a sequential read)
- random_batches:  `records[idx]` for batches of B positions of one uniform random
                   permutation of all N records (what a shuffling loader asks for)
- random_singles:  `records[i]`, one record per call, for K random positions (what Grain or a
                   DataLoader without batched fetch asks for); records/s over those K
- decode:          decode throughput alone: the serialized records (read beforehand, in
                   batches of B) through `RecordDecoder.decode`, this process pinned to one
                   core (os.sched_setaffinity)

Prints a table (records/s, ratio to make_dataset) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.data import ensure_csv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 42


def convert(workdir: str, rows: int) -> str:
    """The CSV converted by our pipeline (once per size; the output is reused)."""
    import yaml

    csv = ensure_csv(os.path.join(workdir, "data"), rows)
    out = os.path.abspath(os.path.join(workdir, "random_access", f"csv-{rows}"))
    if not os.path.exists(os.path.join(out, "_SUCCESS")):
        job = os.path.join(workdir, "random_access", f"csv-{rows}.yaml")
        os.makedirs(os.path.dirname(job), exist_ok=True)
        with open(job, "w", encoding="utf-8") as fh:
            yaml.safe_dump({"schema": os.path.join(REPO, "schemas", "bench_csv.yaml"),
                            "sources": {"train": {"format": "csv", "paths": [csv]}},
                            "output": out, "shuffle": {"seed": SEED}, "shards": 16,
                            "compression": "none"}, fh, sort_keys=False)
        print(f"converting {rows:,} rows to {out} ...", flush=True)
        subprocess.run([sys.executable, os.path.join(REPO, "run_pipeline.py"), "run", job,
                        "--runner=FnApiRunner", "--progress", "none"], check=True)
    return out


def median_run(name: str, repeat: int, fn: Callable[[], tuple[int, int]]) -> dict[str, Any]:
    runs, checks = [], set()
    for r in range(repeat):
        print(f"{name} (run {r + 1}/{repeat}) ...", flush=True)
        t0 = time.perf_counter()
        count, check = fn()
        runs.append(time.perf_counter() - t0)
        checks.add((count, check))
    if len(checks) != 1:
        raise RuntimeError(f"{name}: runs disagree: {checks}")
    count, check = checks.pop()
    seconds = statistics.median(runs)
    return {"records": count, "seconds": seconds, "records_per_s": count / seconds,
            "runs": runs, "checksum": check}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.random_access_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--singles", type=int, default=100_000)
    parser.add_argument("--workdir", default="bench_out")
    parser.add_argument("--json", help="default WORKDIR/random_access_bench.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = convert(args.workdir, args.rows)

    from etl.read.random_access import open_records

    records = open_records(out)
    n = len(records)
    if n != args.rows:
        raise RuntimeError(f"{out}: {n} records, expected {args.rows}")
    b = args.batch_size
    order = np.random.default_rng(SEED).permutation(n)
    singles = order[: min(args.singles, n)]

    def random_batches() -> tuple[int, int]:
        count = check = 0
        for start in range(0, n, b):
            batch = records[order[start:start + b]]
            count += len(batch["i0"])
            check += int(batch["i0"].sum())
        return count, check

    def random_singles() -> tuple[int, int]:
        check = 0
        for i in singles.tolist():
            check += int(records[i]["i0"])
        return len(singles), check

    serialized = [records._read(np.sort(order[s:s + b]))[0] for s in range(0, n, b)]
    decoder = records._decoder

    def decode() -> tuple[int, int]:
        count = check = 0
        for batch in serialized:
            cols = decoder.decode(batch, str)
            count += len(cols["i0"])
            check += int(cols["i0"].sum())
        return count, check

    results: dict[str, Any] = {}
    results["random_batches"] = median_run("random_batches", args.repeat, random_batches)
    results["random_singles"] = median_run("random_singles", args.repeat, random_singles)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        results["decode"] = median_run("decode (one core)", args.repeat, decode)
    finally:
        os.sched_setaffinity(0, cpus)

    from etl.read.dataset import make_dataset

    def sequential() -> tuple[int, int]:
        count = check = 0
        for batch in make_dataset(out, batch_size=b, shuffle_buffer=0):
            i0 = batch["i0"].numpy()
            count += len(i0)
            check += int(i0.sum())
        return count, check

    results["make_dataset"] = median_run("make_dataset (sequential)", args.repeat, sequential)
    if results["random_batches"]["checksum"] != results["make_dataset"]["checksum"]:
        raise RuntimeError("random_batches and make_dataset read different records")

    base = results["make_dataset"]["records_per_s"]
    print()
    print(f"{'variant':<26} {'records':>10} {'seconds':>9} {'records/s':>12} {'vs make_dataset':>16}")
    for name, res in results.items():
        print(f"{name:<26} {res['records']:>10,} {res['seconds']:>9.2f} "
              f"{res['records_per_s']:>12,.0f} {res['records_per_s'] / base:>15.2f}x")
    report = {"rows": args.rows, "batch_size": b, "repeat": args.repeat, "results": results,
              "ratios_vs_make_dataset": {k: v["records_per_s"] / base for k, v in results.items()},
              "python": sys.version.split()[0], "cpus": os.cpu_count(),
              "platform": platform.platform(),
              "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    path = args.json or os.path.join(args.workdir, "random_access_bench.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
