"""Measure the per-core rates the launch estimate (`run JOB --estimate`, etl/job/estimate.py) uses,
and write them to etl/job/estimate_rates.json.

For each input kind, a large job and a tiny job of the same format run through the CLI on the
local runner (`via: files`, the local default) and the CPU seconds of each (user + system of
the process and its children, `os.wait4`) are taken, medians of --repeat. The tiny job's CPU is
the start-up (interpreter, Beam, pipeline set-up); (large - tiny) / input bytes is the CPU per
input byte, which is what the estimate multiplies by the inputs' sizes.

    python -m benchmarks.estimate_rates [--rows 1000000] [--images 300000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from benchmarks.data import ensure_csv, ensure_images

ROOT = Path(__file__).resolve().parent.parent
RATES = ROOT / "etl" / "job" / "estimate_rates.json"


def cpu_of(job: Path) -> float:
    """CPU seconds (user + system) of one local run of `job` through the CLI."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_pipeline.py"), "run", str(job),
                             "--force", "--progress", "none"], cwd=job.parent,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{job} failed: {proc.stderr.read().decode()[-500:]}")
    return usage.ru_utime + usage.ru_stime


def _job(folder: Path, name: str, schema: str, source: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"schema": schema, "source": source, "output": f"out-{name}",
                                    "shuffle": {"seed": 1}, "split": {"train": 0.9, "test": 0.1}}))
    return path


def measure(kind: str, big: Path, tiny: Path, input_bytes: int, records: int,
            repeat: int) -> dict:
    big_cpu = statistics.median(cpu_of(big) for _ in range(repeat))
    tiny_cpu = statistics.median(cpu_of(tiny) for _ in range(repeat))
    per_byte = (big_cpu - tiny_cpu) / input_bytes
    print(f"{kind}: {records:,} records, {input_bytes / 1e6:.1f} MB: {big_cpu:.2f} CPU-s; "
          f"start-up {tiny_cpu:.2f} CPU-s; {1 / per_byte / 1e6:.1f} MB of input per CPU-s")
    return {"cpu_seconds_per_input_byte": per_byte, "startup_cpu_seconds": round(tiny_cpu, 2),
            "measured_on": {"records": records, "input_bytes": input_bytes,
                            "cpu_seconds": round(big_cpu, 2)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--images", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default=str(ROOT / "bench_out" / "estimate"))
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    csv = Path(ensure_csv(str(work), args.rows))
    small_csv = Path(ensure_csv(str(work), 100))
    images, labels = map(Path, ensure_images(str(work), args.images))
    small_images, small_labels = map(Path, ensure_images(str(work), 100))
    schemas = ROOT / "schemas"
    rates = {
        "text": measure("text (CSV)",
                        _job(work, "csv", str(schemas / "bench_csv.yaml"),
                             {"format": "csv", "paths": [str(csv)]}),
                        _job(work, "csv-tiny", str(schemas / "bench_csv.yaml"),
                             {"format": "csv", "paths": [str(small_csv)]}),
                        csv.stat().st_size, args.rows, args.repeat),
        "binary": measure("binary (gzip IDX images)",
                          _job(work, "idx", str(schemas / "bench_images.yaml"),
                               {"format": "idx", "paths": {"image": str(images),
                                                           "label": str(labels)}}),
                          _job(work, "idx-tiny", str(schemas / "bench_images.yaml"),
                               {"format": "idx", "paths": {"image": str(small_images),
                                                           "label": str(small_labels)}}),
                          images.stat().st_size + labels.stat().st_size, args.images,
                          args.repeat),
    }
    out = {"measured": dt.date.today().isoformat(), "machine": platform.processor() or
           platform.machine(), "cores": os.cpu_count(),
           "command": "python -m benchmarks.estimate_rates " + " ".join(argv or sys.argv[1:]),
           "rates": rates}
    RATES.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {RATES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
