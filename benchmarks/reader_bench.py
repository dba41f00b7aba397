"""Reader benchmark: the usual per-record tf.data reader against `etl.read.dataset.make_dataset`.

    python -m benchmarks.reader_bench [--records N] [--json PATH] [--batch-size B]
                                      [--shuffle-buffer S] [--shards K] [--workdir DIR]
                                      [--repeat R] [--only seed|make_dataset]

Writes N small records (8 float32 + 2 int64 + a short bytes feature; our Encoder and
`etl.formats.tfrecord.frame_all`, K shards, a pipeline-style directory with schema.yaml and
manifest.json) and then, in this one process, iterates the whole data once with:

- seed:          TFRecordDataset(files) -> map(parse_single_example) -> shuffle -> batch
                 (the reader most projects start from: one parse op per record)
- make_dataset:  etl.read.dataset.make_dataset(dir): interleaved shards -> shuffle -> batch ->
                 one vectorised parse_and_decode per batch -> prefetch

Both use the same batch size and shuffle buffer. Each timing covers building the dataset
and pulling every batch into Python (a checksum of the int64 feature proves both read the
same records). Prints a table (records/s, speed-up) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

SCHEMA_DOC = {
    "name": "reader_bench",
    "kind": "example",
    "features": {
        "floats": {"dtype": "float32", "shape": [8]},
        "ints": {"dtype": "int64", "shape": [2]},
        "tag": {"dtype": "bytes", "shape": []},
    },
}
CHUNK = 100_000
SEED = 42


def write_dataset(root: str, n: int, shards: int) -> dict[str, Any]:
    """A pipeline-style directory: schema.yaml, train-i-of-k shards, manifest.json."""
    import pyarrow as pa

    from etl.contract.codec import Encoder
    from etl.contract.schema import schema_from_dict
    from etl.formats.tfrecord import frame_all

    schema = schema_from_dict(SCHEMA_DOC)
    encoder = Encoder(schema)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "schema.yaml"), "w", encoding="utf-8") as fh:
        fh.write(schema.to_yaml())
    bounds = np.linspace(0, n, shards + 1).astype(np.int64)
    entries = []
    checksum = 0
    t0 = time.perf_counter()
    for s in range(shards):
        name = f"train-{s:05d}-of-{shards:05d}.tfrecord"
        size = 0
        count = 0
        with open(os.path.join(root, name), "wb") as fh:
            for start in range(int(bounds[s]), int(bounds[s + 1]), CHUNK):
                stop = min(start + CHUNK, int(bounds[s + 1]))
                rng = np.random.default_rng([SEED, start])
                m = stop - start
                ints = np.stack([np.arange(start, stop), rng.integers(-1000, 1000, m)], axis=1)
                tags = pa.array([b"tag-%d" % (i % 1000) for i in range(start, stop)],
                                pa.large_binary())
                out = encoder.encode({
                    "floats": rng.standard_normal((m, 8), dtype=np.float32),
                    "ints": ints,
                    "tag": tags,
                })
                if out.bad or len(out.records) != m:
                    raise RuntimeError(f"encoding failed: {out.bad[:3]}")
                data = frame_all(out.records)
                fh.write(data)
                size += len(data)
                count += m
                checksum += int(ints[:, 0].sum())
        entries.append({"path": name, "num_records": count, "num_bytes": size})
    seconds = time.perf_counter() - t0
    manifest = {"format_version": 1,
                "splits": {"train": {"num_records": n, "shards": entries}}}
    with open(os.path.join(root, "manifest.json"), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
    return {"seconds": seconds, "bytes": sum(e["num_bytes"] for e in entries),
            "checksum": checksum, "files": [os.path.join(root, e["path"]) for e in entries]}


def seed_reader(files: list[str], batch_size: int, shuffle_buffer: int) -> Any:
    """The common starting point: one parse op per record, then shuffle and batch."""
    import tensorflow as tf

    from etl.contract.schema import schema_from_dict

    spec = schema_from_dict(SCHEMA_DOC).parse_spec()
    ds = tf.data.TFRecordDataset(files)
    ds = ds.map(lambda record: tf.io.parse_single_example(record, spec))
    return ds.shuffle(shuffle_buffer, seed=SEED).batch(batch_size)


def ours(root: str, batch_size: int, shuffle_buffer: int) -> Any:
    from etl.read.dataset import make_dataset

    return make_dataset(root, batch_size=batch_size, shuffle_buffer=shuffle_buffer, seed=SEED)


def time_reader(build: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    ds = build()
    records = 0
    checksum = 0
    batches = 0
    for batch in ds:
        ints = batch["ints"].numpy()
        records += ints.shape[0]
        checksum += int(ints[:, 0].sum())
        batches += 1
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "records": records, "batches": batches, "checksum": checksum}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reader_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--json", help="write results here (default WORKDIR or bench_out/, "
                        "reader_bench.json)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--shuffle-buffer", type=int, default=10_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workdir", help="keep the data here (default: a temp dir, removed)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per reader (median)")
    parser.add_argument("--only", choices=["seed", "make_dataset"])
    args = parser.parse_args(argv)
    if args.records < 1 or args.shards < 1:
        parser.error("--records and --shards must be >= 1")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    workdir = args.workdir or tempfile.mkdtemp(prefix="reader_bench_")
    root = os.path.join(workdir, f"data-{args.records}")
    try:
        print(f"writing {args.records:,} records in {args.shards} shards to {root} ...",
              flush=True)
        written = write_dataset(root, args.records, args.shards)
        print(f"  {written['seconds']:.1f} s, {written['bytes'] / 1e6:.1f} MB "
              f"({args.records / written['seconds']:,.0f} records/s encode + frame + write)",
              flush=True)
        import tensorflow as tf

        readers = {
            "seed": lambda: seed_reader(written["files"], args.batch_size, args.shuffle_buffer),
            "make_dataset": lambda: ours(root, args.batch_size, args.shuffle_buffer),
        }
        results: dict[str, Any] = {}
        for name, build in readers.items():
            if args.only and name != args.only:
                continue
            runs = []
            for r in range(args.repeat):
                print(f"reading with {name} (run {r + 1}/{args.repeat}) ...", flush=True)
                run = time_reader(build)
                if run["records"] != args.records or run["checksum"] != written["checksum"]:
                    raise RuntimeError(f"{name} read {run['records']} records (checksum "
                                       f"{run['checksum']}), expected {args.records} "
                                       f"({written['checksum']})")
                runs.append(run)
            seconds = statistics.median(r["seconds"] for r in runs)
            results[name] = {"seconds": seconds, "records_per_s": args.records / seconds,
                             "runs": [r["seconds"] for r in runs]}
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    ratio = (results["make_dataset"]["records_per_s"] / results["seed"]["records_per_s"]
             if len(results) == 2 else None)
    print()
    print(f"{'reader':<14} {'records':>10} {'seconds':>9} {'records/s':>12}")
    for name, res in results.items():
        print(f"{name:<14} {args.records:>10,} {res['seconds']:>9.2f} "
              f"{res['records_per_s']:>12,.0f}")
    if ratio is not None:
        print(f"make_dataset / seed: {ratio:.1f}x")

    report = {
        "records": args.records, "batch_size": args.batch_size,
        "shuffle_buffer": args.shuffle_buffer, "shards": args.shards,
        "bytes": written["bytes"], "write_seconds": written["seconds"],
        "results": results, "ratio": ratio,
        "python": sys.version.split()[0], "tensorflow": tf.__version__,
        "cpus": os.cpu_count(), "platform": platform.platform(),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    json_path = args.json or os.path.join(args.workdir or "bench_out", "reader_bench.json")
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
    print(f"results: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
