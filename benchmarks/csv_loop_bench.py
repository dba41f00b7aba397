"""The CSV chunk loop (etl.sources.csv_compiled) against Arrow's CSV reader on the same chunks:
the benchmark CSV (benchmarks/data.py) cut into the fast path's 4 MiB chunks of whole lines,
each parsed by both in one process, alternately, with the schema's column types; the two
tables must be equal. Figures: benchmarks/README.md, "CSV chunks parsed by a compiled loop".

    python -m benchmarks.csv_loop_bench [--rows 1000000] [--rounds 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv

from benchmarks.data import ensure_csv
from etl.contract.schema import load_schema
from etl.sources import csv_compiled
from etl.sources.csv_source import CsvReader

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/etl-bench")
    args = ap.parse_args()
    raw = Path(ensure_csv(args.workdir, args.rows)).read_bytes()
    head = raw.index(b"\n") + 1
    names = raw[: head - 1].decode().split(",")
    numeric = load_schema(str(ROOT / "schemas" / "bench_csv.yaml")).numeric_columns()
    types = [pa.type_for_alias(numeric[n]) if n in numeric else pa.binary() for n in names]
    chunks, at = [], head
    while at < len(raw):
        cut = raw.rfind(b"\n", at, at + CsvReader.FAST_BLOCK_BYTES) + 1
        chunks.append(raw[at:cut] + csv_compiled.PAD)
        at = cut
    t0 = time.perf_counter()
    parser = csv_compiled.chunk_parser(names, types, ",", '"')
    print(f"compile: {time.perf_counter() - t0:.3f} s")
    if parser is None:
        raise SystemExit("no compiled loops on this machine")
    options = dict(
        read_options=pa_csv.ReadOptions(column_names=names, use_threads=False,
                                        block_size=2 * CsvReader.FAST_BLOCK_BYTES),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False),
        convert_options=pa_csv.ConvertOptions(
            column_types=dict(zip(names, types, strict=True)), null_values=[""],
            strings_can_be_null=False, quoted_strings_can_be_null=True))
    size = len(csv_compiled.PAD)
    for r in range(args.rounds):
        t0 = time.perf_counter()
        ours = [parser.parse(c, len(c) - size) for c in chunks]
        t1 = time.perf_counter()
        arrow = [pa_csv.read_csv(pa.BufferReader(c[:-size]), **options) for c in chunks]
        t2 = time.perf_counter()
        same = all(o is not None and pa.Table.from_batches([o]).equals(a.combine_chunks())
                   for o, a in zip(ours, arrow, strict=True))
        print(f"round {r + 1}: loop {(t1 - t0) / args.rows * 1e9:.0f} ns a row, Arrow "
              f"{(t2 - t1) / args.rows * 1e9:.0f} ns a row ({len(chunks)} chunks; "
              f"{'the same tables' if same else 'TABLES DIFFER'})")


if __name__ == "__main__":
    main()
