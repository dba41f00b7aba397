"""Bytes the `engine` shuffle moves, against the encoded (framed) record bytes, and what each
candidate codec costs (issue 29 goal 4).

Runs stage 1 of the pipeline (read, encode, key, sort: transforms.convert.encode_block) over the
benchmark CSV in this process, plans the shards like the pipeline, cuts every run into its
chunks (etl.shuffle.engine.partition) and encodes each with the coders the pipeline declares
(transforms/coders.py); the chunks are cut from the runs as the partition step gets them
(packed, through the run coder). Prints:

- records and framed record bytes (what the shards hold, before any compression);
- bytes through GroupByKey (every encoded chunk) and through the runs' PCollection (every
  encoded run), each as a ratio of the framed bytes;
- for --codecs: the compressed size of the chunk body and the CPU seconds per MB (of raw
  body) to compress and to decompress, one process, `time.process_time`.

    python -m benchmarks.engine_bytes --rows 2000000 --workdir /tmp/p29/data --shards 8
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml

from benchmarks.data import ensure_csv
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.job.read_plan import WHOLE_FILE, ReadTask
from etl.shuffle import engine
from etl.shuffle.planning import ShuffleKeys, make_plan
from etl.sources import make_reader
from transforms.coders import ChunkCoder, SortedRunCoder
from transforms.convert import encode_block, flat_settings

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "bench_csv.yaml"


def runs_of(csv: str, seed: int) -> list:
    schema_doc = SCHEMA.read_text()
    schema = schema_from_dict(yaml.safe_load(schema_doc))
    spec = flat_settings(schema_yaml=schema_doc, sources={}, base_dir=".", fractions={},
                       seed=seed, spill_dir="", staging_dir="", compression="none",
                       splits=("train",), shards=None, shard_size=None, max_shard_bytes=0)
    encoder = Encoder(schema, max_record_bytes=spec.reading.max_record_bytes)
    reader = make_reader({"format": "csv", "paths": [csv]}, ".", "sources.train")
    reader.prepare(schema, spec.reading.max_record_bytes)
    runs = []
    for split in reader.splits(csv, WHOLE_FILE):
        task = ReadTask("train", csv, "data.csv", 0, split)
        for block in reader.read_split(split):
            runs += encode_block(encoder, spec, task, block).outputs
    return runs


def body_of(chunk: engine.Chunk) -> bytes:
    """The uncompressed body a codec sees: keys, ids, record lengths, payload."""
    keys, ids, offsets, payload = chunk.unpack("a chunk")
    return b"".join([np.asarray(keys, "<u8").tobytes(), np.asarray(ids, "<u8").tobytes(),
                     np.diff(offsets).astype("<u8").tobytes(), bytes(payload)])


def codec_table(chunks: list[engine.Chunk], codecs: list[str]) -> list[str]:
    bodies = [body_of(c) for c in chunks]
    raw = sum(len(b) for b in bodies)
    lines = ["  codec     compressed/raw body   compress CPU-s/MB   decompress CPU-s/MB"]
    for name in codecs:
        kind, _, level = name.partition("-")
        codec = pa.Codec(kind, int(level)) if level else pa.Codec(kind)
        t = time.process_time()
        packed = [codec.compress(b, asbytes=True) for b in bodies]
        comp = time.process_time() - t
        t = time.process_time()
        for p, b in zip(packed, bodies, strict=True):
            codec.decompress(p, decompressed_size=len(b), asbytes=True)
        decomp = time.process_time() - t
        size = sum(len(p) for p in packed)
        lines.append(f"  {name:8s}  {size / raw:19.3f}   {comp / raw * 1e6:17.4f}   "
                     f"{decomp / raw * 1e6:19.4f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--workdir", default="/tmp/p29/data")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--codecs", default="zstd-1,zstd-2,zstd-3,lz4",
                    help="comma-separated pa.Codec names (kind-level); empty: none")
    args = ap.parse_args(argv)
    csv = ensure_csv(args.workdir, args.rows)
    runs = runs_of(csv, args.seed)
    stats = ShuffleKeys(True)
    for run in runs:
        stats.add(run.stats(True))
    plan = make_plan(stats.compact(), ("train",), args.shards, None, 1 << 40)
    plans = plan.shards["train"]
    framed = sum(int(r.offsets[-1]) for r in runs)
    records = sum(len(r.keys) for r in runs)
    run_coder, chunk_coder = SortedRunCoder(), ChunkCoder()
    t = time.process_time()
    encoded_runs = [run_coder.encode(r) for r in runs]
    run_cpu = time.process_time() - t
    run_bytes = sum(len(e) for e in encoded_runs)
    t = time.process_time()
    packed_runs = [run_coder.decode(e) for e in encoded_runs]  # as the partition step gets them
    run_dec_cpu = time.process_time() - t
    chunks = []
    t = time.process_time()
    for run in packed_runs:
        chunks += [c for _, c in engine.partition(run, plans)]
    part_cpu = time.process_time() - t
    t = time.process_time()
    encoded = [chunk_coder.encode(c) for c in chunks]
    enc_cpu = time.process_time() - t
    chunk_bytes = sum(len(e) for e in encoded)
    t = time.process_time()
    for e in encoded:
        chunk_coder.decode(e)
    dec_cpu = time.process_time() - t
    print(f"{records:,} records in {len(runs)} runs, {len(chunks)} chunks; framed record "
          f"bytes {framed:,} ({framed / records:.1f} B/record)")
    print(f"through GroupByKey (encoded chunks): {chunk_bytes:,} B = {chunk_bytes / framed:.3f}x "
          f"framed; partition {part_cpu:.2f} CPU-s, encode {enc_cpu:.2f}, decode {dec_cpu:.2f}")
    print(f"runs PCollection (encoded runs): {run_bytes:,} B = {run_bytes / framed:.3f}x framed; "
          f"encode {run_cpu:.2f} CPU-s, decode {run_dec_cpu:.2f}")
    codecs = [c for c in args.codecs.split(",") if c]
    if codecs:
        print("\n".join(codec_table(chunks, codecs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
