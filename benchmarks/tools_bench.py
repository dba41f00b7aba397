"""The tools around a conversion, against what users run instead, on the same data in one run.

    python -m benchmarks.tools_bench [--rows N] [--repeat R] [--workdir DIR] [--json PATH]
                                     [--only infer_schema|report|report_reread|stats_cost]

- infer-schema: `run_pipeline.py infer-schema data.csv` (reads a 10,000-record sample) against
  `pandas.read_csv(data.csv).dtypes`, the usual way to guess a CSV's types (the whole file).
- report: `run_pipeline.py report OUT` (one pass: statistics, sketches, plots, sample images)
  against the plain read it cannot avoid: every batch of `etl.make_dataset(OUT)` pulled into
  Python and nothing computed. Their ratio is what the statistics cost on top of reading.
- stats_cost: `run JOB` with `stats: true` (statistics gathered in the conversion pass)
  against the same job with `stats: false`: what gathering costs a conversion.
- report_reread: `report OUT` built from the stats.json the run gathered in its conversion pass
  (issue 23), against `report` of the same output without it (a copy whose manifest lists no
  stats.json: what `report` did before runs gathered statistics, one read of every shard).

Each is a fresh process (imports included, as a user runs it): wall seconds, CPU seconds and
peak RSS (benchmarks.rss), medians of `--repeat` runs, the two commands of a pair alternating
so a change in the machine's load hits both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
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


def job_file(csv: str, workdir: str, stats: bool = False) -> tuple[str, str]:
    """(job file, output) converting the CSV with the benchmark schema (8 shards); `stats`:
    with the statistics gathered in the conversion pass (stats.json)."""
    name = "out_stats" if stats else "out"
    out = os.path.join(workdir, "tools", name)
    job = os.path.join(workdir, "tools", f"{name}.yaml")
    os.makedirs(os.path.dirname(job), exist_ok=True)
    with open(job, "w", encoding="utf-8") as fh:
        yaml.safe_dump({"schema": os.path.join(REPO, "schemas", "bench_csv.yaml"),
                        "sources": {"train": {"format": "csv", "paths": [csv]}},
                        "output": out, "shards": 8, "shuffle": {"seed": 42},
                        "stats": stats}, fh)
    return job, out


def convert(csv: str, workdir: str, stats: bool = False) -> str:
    """The CSV converted once: the report's input."""
    job, out = job_file(csv, workdir, stats)
    subprocess.run([sys.executable, RUN, "run", job, "--progress", "none"], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def without_stats(out: str) -> str:
    """A copy of output `out` whose manifest lists no stats.json (an output written before
    runs gathered statistics): `report` reads every shard of it."""
    bare = out + "_without_stats"
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("stats.json", "report.*"))
    path = os.path.join(bare, "manifest.json")
    with open(path, encoding="utf-8") as fh:
        manifest = json.load(fh)
    manifest.get("files", {}).pop("stats.json", None)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
    return bare


SKETCHED = ("quantiles", "histogram")  # estimates of tfx_bsl's QuantilesSketch (eps 0.001)


def same_numbers(a: str, b: str) -> dict[str, Any]:
    """Two report.json files' features sections compared: `exact_equal` (every field but the
    quantile sketch's: floats to 1e-12 relative, a merged sum differs from a one-pass sum in
    the last bits) and `sketch_values_differing` (quantiles and the histograms drawn from them:
    the sketch's answer depends on the order the values arrive in, within its rank error)."""
    found = {"exact_equal": True, "sketch_values_differing": 0}

    def walk(x: Any, y: Any, sketched: bool) -> None:
        if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
            for k in x:
                walk(x[k], y[k], sketched or k in SKETCHED)
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for u, v in zip(x, y, strict=True):
                walk(u, v, sketched)
        elif not (x == y or (isinstance(x, float) and isinstance(y, float) and (
                math.isclose(x, y, rel_tol=1e-12) or (math.isnan(x) and math.isnan(y))))):
            if sketched:
                found["sketch_values_differing"] += 1
            else:
                found["exact_equal"] = False

    with open(a, encoding="utf-8") as fa, open(b, encoding="utf-8") as fb:
        walk(json.load(fa)["features"], json.load(fb)["features"], False)
    return found


def timed(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    m = measure(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if m.returncode != 0:
        raise SystemExit(f"failed ({m.returncode}): {' '.join(cmd)}")
    return {"seconds": m.seconds, "cpu_seconds": m.cpu_seconds or 0.0, "peak_rss_mb": m.peak_rss_mb}


def pair(name: str, ours: list[str], baseline: list[str], repeat: int,
         env: dict[str, str], baseline_env: dict[str, str] | None = None,
         idle: float = 0.0) -> dict[str, Any]:
    """Both commands `repeat` times, alternating; medians and the ratio baseline / ours.
    `baseline_env`: the baseline's own environment (another checkout's code), else `env`.
    `idle`: seconds of pause before each run, so that none starts on memory the run before
    it just freed (on a VM whose host takes free memory back, new memory costs more after
    a few seconds: benchmarks.fresh_memory)."""
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "baseline": []}
    order = (("ours", ours, env), ("baseline", baseline, baseline_env or env))
    for i in range(repeat):
        for label, cmd, cmd_env in order if i % 2 == 0 else order[::-1]:
            time.sleep(idle)
            runs[label].append(timed(cmd, cmd_env))
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
    p.add_argument("--only", choices=["infer_schema", "report", "report_reread", "stats_cost"], default=None)
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
    if args.only in (None, "report_reread"):
        out = convert(csv, args.workdir, stats=True)
        bare = without_stats(out)
        report_dir = os.path.join(args.workdir, "tools", "report_stats")
        results["report_reread"] = pair(
            "report", [sys.executable, RUN, "report", out, "--out", report_dir],
            [sys.executable, RUN, "report", bare, "--out", report_dir + "_reread"],
            args.repeat, env)
        results["report_reread"]["same_numbers"] = same_numbers(
            os.path.join(report_dir, "report.json"),
            os.path.join(report_dir + "_reread", "report.json"))
        same = results["report_reread"]["same_numbers"]
        print(f"  report from stats.json vs a re-read: exact fields "
              f"{'equal' if same['exact_equal'] else 'DIFFER'}, "
              f"{same['sketch_values_differing']} quantile/histogram values differ")
    if args.only in (None, "stats_cost"):
        run = [sys.executable, RUN, "run", "--force", "--progress", "none"]
        results["stats_cost"] = pair(
            "run", [*run, job_file(csv, args.workdir, stats=True)[0]],
            [*run, job_file(csv, args.workdir, stats=False)[0]], args.repeat, env)
    for name, label in (("infer_schema", "pandas.read_csv(...).dtypes"),
                        ("report", "plain make_dataset read"),
                        ("report_reread", "report re-reading every shard"),
                        ("stats_cost", "run with stats: false")):
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
