"""Serialisation alone: etl.formats.proto_wire and the compiled Example loop
(etl.formats.compiled_examples) against tfx_bsl's C++ RecordBatchToExamplesEncoder.

    python -m benchmarks.wire_bench [--rows 1000000] [--block 65536]

Both get the same stored columns (schemas/bench_csv.yaml: eight float32 scalars, two int64
scalars, one bytes scalar; ~182-byte Examples), block by block, one core, same process.
Prints seconds and records/s of each; checks that the loop's bytes are proto_wire's and that
tfx_bsl's first Example parses to the same values. The loop is compiled before it is timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

from etl.base import heap
from etl.contract import columns as cols
from etl.contract.schema import load_schema
from etl.formats import compiled_examples, proto_wire

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stored_blocks(rows: int, block: int) -> list[list[tuple[str, str, pa.Array]]]:
    """(name, storage, LargeList column) per feature, per block, like the encoder builds."""
    schema = load_schema(os.path.join(REPO, "schemas", "bench_csv.yaml"))
    rng = np.random.default_rng(7)
    out = []
    for start in range(0, rows, block):
        n = min(block, rows - start)
        raw = {f"f{i}": rng.standard_normal(n).astype(np.float32) for i in range(8)}
        raw["i0"] = rng.integers(0, 1_000_000, n)
        raw["i1"] = rng.integers(-1000, 1000, n)
        raw["cat"] = pa.array(rng.choice(["alpha", "beta", "gamma", "delta", "epsilon"], n))
        out.append([(f.name, f.storage, cols.to_storage(f, raw, n).storage)
                    for f in schema.context])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--block", type=int, default=65536)
    args = parser.parse_args(argv)
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder  # noqa: PLC0415

    heap.keep_freed_memory()  # as a run's encode step does (transforms/convert.py)
    blocks = stored_blocks(args.rows, args.block)
    t = time.perf_counter()
    ours = [proto_wire.serialize_examples(b) for b in blocks]
    ours_s = time.perf_counter() - t
    compiled_examples.serialize(blocks[0])  # compiled once per process, not timed
    t = time.perf_counter()
    looped = [compiled_examples.serialize(b) for b in blocks]
    loop_s = time.perf_counter() - t
    if not all(x is not None and x.equals(y) for x, y in zip(looped, ours, strict=True)):
        print("MISMATCH: the compiled loop's bytes are not proto_wire's", file=sys.stderr)
        return 1

    batches = [pa.RecordBatch.from_arrays([c for _, _, c in b], [name for name, _, _ in b])
               for b in blocks]
    encoder = RecordBatchToExamplesEncoder()
    t = time.perf_counter()
    theirs = [encoder.encode(rb) for rb in batches]
    tfx_s = time.perf_counter() - t

    import tensorflow as tf  # noqa: PLC0415

    a = tf.train.Example.FromString(ours[0][0].as_py())
    b = tf.train.Example.FromString(theirs[0][0])
    if a != b:
        print("MISMATCH: the two encoders disagree on the first record", file=sys.stderr)
        return 1
    size = sum(len(x.buffers()[2]) for x in ours) / args.rows
    print(f"{args.rows:,} records, {size:.0f} B each, blocks of {args.block:,}")
    print(f"etl.formats.proto_wire            {ours_s:6.2f} s  {args.rows / ours_s:12,.0f} records/s")
    print(f"compiled loop                     {loop_s:6.2f} s  {args.rows / loop_s:12,.0f} records/s")
    print(f"tfx_bsl encoder                   {tfx_s:6.2f} s  {args.rows / tfx_s:12,.0f} records/s")
    print(f"tfx_bsl / proto_wire {tfx_s / ours_s:6.2f}x, proto_wire / compiled loop {ours_s / loop_s:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
