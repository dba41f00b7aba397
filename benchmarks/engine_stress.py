"""Failure rate of the engine shuffle under load: runs alone and pairs of runs at once, each
compared with the `via: files` shards; wall time and peak RSS of every run.

How issue 19's root cause was measured before and after the fix: run it once with
`--checkout` pointing at a checkout of the commit before the fix (its run_pipeline.py runs
with this venv), once without.

    python -m benchmarks.engine_stress --rows 1000000 --pairs 8 [--alone 0] \\
        [--mode threads|processes] [--checkout DIR] [--workdir bench_out/stress]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from benchmarks.data import write_quoted_csv

ROOT = Path(__file__).resolve().parent.parent
MODES = {"threads": [], "processes": ["--direct_running_mode=multi_processing",
                                      "--direct_num_workers=2"]}
SCHEMA = {"name": "stress", "kind": "example", "features": {
    "n": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
    "s": {"dtype": "string", "shape": []}}}


def _job(workdir: Path, name: str, via: str) -> Path:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "schema": "schema.yaml", "source": {"format": "csv", "paths": ["data.csv"]},
        "split": {"train": 0.9, "test": 0.1}, "output": f"out-{name}",
        "shuffle": {"seed": 5, "via": via}, "shards": 8}))
    return path


def _shards(out: Path) -> dict[str, str]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {s["path"]: s["sha256"] for split in manifest["splits"].values()
            for s in split["shards"]}


def run_at_once(cli: Path, jobs: list[Path], beam_args: list[str]) -> list[dict]:
    """Start every job at once; per job: exit code, wall seconds, peak RSS, last error line."""
    started, procs = time.perf_counter(), []
    for job in jobs:
        log = open(job.with_suffix(".log"), "w")  # noqa: SIM115 - closed below
        procs.append((job, log, subprocess.Popen(
            [sys.executable, str(cli), "run", str(job), "--force", "--progress", "none",
             *beam_args], cwd=job.parent, stdout=log, stderr=subprocess.STDOUT)))
    results = []
    for job, log, proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.close()
        text = job.with_suffix(".log").read_text()
        errors = [line for line in text.splitlines() if line.startswith("error")]
        results.append({"job": job.stem, "exit": proc.returncode,
                        "seconds": round(time.perf_counter() - started, 1),
                        "peak_rss_mb": round(usage.ru_maxrss / 1024),
                        "error": errors[-1][:160] if errors else ""})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=4, help="pairs of engine runs at once")
    parser.add_argument("--alone", type=int, default=0, help="engine runs one at a time")
    parser.add_argument("--mode", choices=sorted(MODES), default="threads")
    parser.add_argument("--checkout", default=str(ROOT),
                        help="the project checkout whose run_pipeline.py to run")
    parser.add_argument("--workdir", default=str(ROOT / "bench_out" / "stress"))
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data.csv"
    if not data.exists() or (workdir / "rows").read_text() != str(args.rows):
        write_quoted_csv(str(data), args.rows)
        (workdir / "rows").write_text(str(args.rows))
    (workdir / "schema.yaml").write_text(yaml.safe_dump(SCHEMA))
    cli, beam_args = Path(args.checkout) / "run_pipeline.py", MODES[args.mode]
    (reference,) = run_at_once(cli, [_job(workdir, "files", "files")], beam_args)
    if reference["exit"]:
        print(f"the files run failed: {reference['error']}")
        return 1
    expected = _shards(workdir / "out-files")
    print(f"files: {reference['seconds']} s, {reference['peak_rss_mb']} MB peak RSS")
    rounds = [[_job(workdir, "engine-a", "engine")]] * args.alone + [
        [_job(workdir, "engine-a", "engine"), _job(workdir, "engine-b", "engine")]] * args.pairs
    failed = total = 0
    for i, jobs in enumerate(rounds):
        for r in run_at_once(cli, jobs, beam_args):
            total += 1
            same = not r["exit"] and _shards(workdir / f"out-{r['job']}") == expected
            failed += not same
            kind = "alone" if len(jobs) == 1 else "pair"
            print(f"{kind} {i}: {r['job']}: {'ok, same shards' if same else 'FAILED'} "
                  f"{r['seconds']} s, {r['peak_rss_mb']} MB {r['error']}")
    print(f"{args.rows:,} rows, {args.mode}, {cli.parent}: {failed} of {total} engine runs "
          "failed or differed from files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
