"""The tools around a conversion, against what users run instead, on the same data in one run.

    python -m benchmarks.tools_bench [--rows N] [--repeat R] [--workdir DIR] [--json PATH]
                                     [--only infer_schema|report]

- infer-schema: `run_pipeline.py infer-schema data.csv` (reads a 10,000-record sample) against
  `pandas.read_csv(data.csv).dtypes`, the usual way to guess a CSV's types (the whole file).
- report: `run_pipeline.py report OUT` (one pass: statistics, sketches, plots, sample images)
  against the plain read it cannot avoid: every batch of `etl.make_dataset(OUT)` pulled into
  Python and nothing computed. Their ratio is what the statistics cost on top of reading.

Each is a fresh process (imports included, as a user runs it): wall seconds, CPU seconds and
peak RSS (benchmarks.rss), medians of `--repeat` runs, the two commands of a pair alternating
so a change in the machine's load hits both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

import yaml

from benchmarks.data import ensure_csv
from benchmarks.rss import measure
from benchmarks.run import machine_info

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(REPO, "run_pipeline.py")

PANDAS_INFER = "import sys, pandas; print(pandas.read_csv(sys.argv[1]).dtypes.to_dict())"
PLAIN_READ = ("import sys, etl\n"
              "n = 0\n"
              "for split in ('train',):\n"
              "    for batch in etl.make_dataset(sys.argv[1], split=split, batch_size=1024):\n"
              "        n += int(next(iter(batch.values())).shape[0])\n"
              "print(n)\n")


def convert(csv: str, workdir: str) -> str:
    """The CSV converted once with the benchmark schema (8 shards): the report's input."""
    out = os.path.join(workdir, "tools", "out")
    job = os.path.join(workdir, "tools", "job.yaml")
    os.makedirs(os.path.dirname(job), exist_ok=True)
    with open(job, "w", encoding="utf-8") as fh:
        yaml.safe_dump({"schema": os.path.join(REPO, "schemas", "bench_csv.yaml"),
                        "sources": {"train": {"format": "csv", "paths": [csv]}},
                        "output": out, "shards": 8, "shuffle": {"seed": 42}}, fh)
    subprocess.run([sys.executable, RUN, "run", job, "--progress", "none"], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def timed(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    m = measure(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if m.returncode != 0:
        raise SystemExit(f"failed ({m.returncode}): {' '.join(cmd)}")
    return {"seconds": m.seconds, "cpu_seconds": m.cpu_seconds or 0.0, "peak_rss_mb": m.peak_rss_mb}


def pair(name: str, ours: list[str], baseline: list[str], repeat: int,
         env: dict[str, str]) -> dict[str, Any]:
    """Both commands `repeat` times, alternating; medians and the ratio baseline / ours."""
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "baseline": []}
    for i in range(repeat):
        order = (("ours", ours), ("baseline", baseline))
        for label, cmd in order if i % 2 == 0 else order[::-1]:
            runs[label].append(timed(cmd, env))
            print(f"  {name} {label} run {i + 1}: {runs[label][-1]['seconds']:.2f} s, "
                  f"{runs[label][-1]['peak_rss_mb']:.0f} MB", flush=True)
    med = {label: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for label, rs in runs.items()}
    return {"runs": runs, "median": med,
            "baseline_over_ours_seconds": med["baseline"]["seconds"] / med["ours"]["seconds"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", default="bench_out")
    p.add_argument("--json", default=None, help="default WORKDIR/tools_bench.json")
    p.add_argument("--only", choices=["infer_schema", "report"], default=None)
    args = p.parse_args(argv)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": REPO}
    csv = ensure_csv(args.workdir, args.rows)
    results: dict[str, Any] = {"machine": machine_info(), "rows": args.rows}
    if args.only in (None, "infer_schema"):
        results["infer_schema"] = pair(
            "infer-schema", [sys.executable, RUN, "infer-schema", csv],
            [sys.executable, "-c", PANDAS_INFER, csv], args.repeat, env)
    if args.only in (None, "report"):
        out = convert(csv, args.workdir)
        report_dir = os.path.join(args.workdir, "tools", "report")
        results["report"] = pair(
            "report", [sys.executable, RUN, "report", out, "--out", report_dir],
            [sys.executable, "-c", PLAIN_READ, out], args.repeat, env)
    for name, label in (("infer_schema", "pandas.read_csv(...).dtypes"),
                        ("report", "plain make_dataset read")):
        if name not in results:
            continue
        med = results[name]["median"]
        print(f"{name}: ours {med['ours']['seconds']:.2f} s / {med['ours']['peak_rss_mb']:.0f} MB, "
              f"{label} {med['baseline']['seconds']:.2f} s / {med['baseline']['peak_rss_mb']:.0f} MB"
              f" (baseline/ours {results[name]['baseline_over_ours_seconds']:.2f}x)")
    path = args.json or os.path.join(args.workdir, "tools_bench.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
