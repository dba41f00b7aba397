"""Benchmark harness: our pipeline against the hand-written baselines, on the same inputs.

    python -m benchmarks.run [--rows N] [--images N] [--variants ours,beam_naive,tf_loop]
                             [--json PATH] [--workdir DIR] [--keep] [--ours-args "..."]
                             [--repeat R] [--timeout S]

For each dataset (CSV with --rows, MNIST-shaped IDX with --images; 0 skips it) the inputs are
generated once under WORKDIR/data (benchmarks/data.py) and reused. Each variant then runs in
its own process, one after the other:

- ours:       <python> run_pipeline.py run JOB.yaml --output OUT --runner=FnApiRunner [ours-args]
              (JOB.yaml is written to WORKDIR/jobs/); piped, so progress shows as plain lines
- ours_no_progress: the same with --progress none (no live tally): progress's overhead
- beam_naive: <python> -m benchmarks.baselines beam_naive ...  (ReadFromText/Reshuffle/Write)
- tf_loop:    <python> -m benchmarks.baselines tf_loop ...     (one process, shuffle in memory)

Measured per run: wall-clock seconds of the subprocess (start-up and imports included), peak
RSS summed over the whole process tree sampled every 50 ms (benchmarks/rss.py), and the number
of records in the output TFRecords (a variant that did not write exactly N records is
"invalid"; a non-zero exit is "failed", with the stderr tail in the JSON). Our modules are
compiled to bytecode first, as an installed package has them (benchmarks/bytecode.py).
The machine's speed on fixed work (benchmarks/machine_speed.py) is taken before and after the
runs and printed under the tables: the machine is shared, and its speed moves by the hour.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from importlib import metadata
from typing import Any

import yaml

from benchmarks import data, machine_speed
from benchmarks.bytecode import compile_tree
from benchmarks.rss import measure

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("ours", "ours_no_progress", "beam_naive", "tf_loop")
BASELINES = ("beam_naive", "tf_loop")
SHARDS = 16
SEED = 42
_SHARD_RE = re.compile(r"-\d{5}-of-\d{5}|\.tfrecord(\.gz|\.zz)?$")
_TAIL_CHARS = 4000


# ---- inputs, jobs, commands --------------------------------------------------------------
def job_document(dataset: str, inputs: dict[str, str], output: str) -> dict[str, Any]:
    """The job file `run_pipeline.py run` reads for one benchmark dataset."""
    if dataset == "csv":
        schema = os.path.join(REPO, "schemas", "bench_csv.yaml")
        source: dict[str, Any] = {"format": "csv", "paths": [inputs["csv"]]}
    else:
        schema = os.path.join(REPO, "schemas", "bench_images.yaml")
        source = {"format": "idx", "paths": {"image": inputs["images"], "label": inputs["labels"]}}
    return {
        "schema": schema,
        "sources": {"train": source},
        "output": output,
        "shuffle": {"seed": SEED},
        "shards": SHARDS,
        "compression": "none",
    }


def command(variant: str, dataset: str, inputs: dict[str, str], output: str, workdir: str,
            ours_args: list[str]) -> list[str]:
    py = sys.executable
    if variant in ("ours", "ours_no_progress"):  # the second: the live tally's cost
        extra = ["--progress", "none"] if variant == "ours_no_progress" else []
        job_path = os.path.join(workdir, "jobs", f"{dataset}.yaml")
        os.makedirs(os.path.dirname(job_path), exist_ok=True)
        with open(job_path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(job_document(dataset, inputs, output), fh, sort_keys=False)
        return [py, os.path.join(REPO, "run_pipeline.py"), "run", job_path, "--output", output,
                "--runner=FnApiRunner", *extra, *ours_args]
    if dataset == "csv":
        io = ["--input", inputs["csv"]]
    else:
        io = ["--input", inputs["images"], "--labels", inputs["labels"]]
    return [py, "-m", "benchmarks.baselines", variant, "--dataset", dataset, *io,
            "--output", output]


# ---- output check ------------------------------------------------------------------------
def _count_file(path: str, compression: str) -> int:
    try:
        from etl.formats.tfrecord import read_file  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the project module is expected
        read_file = None
    if read_file is not None:
        return sum(1 for _ in read_file(path, compression, check_crc=False))
    import struct  # noqa: PLC0415

    n = 0
    with open(path, "rb") as fh:
        while header := fh.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            fh.seek(length + 4, os.SEEK_CUR)
            n += 1
    return n


def count_records(output: str) -> tuple[int, int, int]:
    """(records, shard files, bytes) of the TFRecord shards anywhere under `output`."""
    records = files = size = 0
    for root, _dirs, names in os.walk(output):
        for name in sorted(names):
            if name.startswith((".", "_")) or not _SHARD_RE.search(name):
                continue
            if name.endswith((".json", ".yaml", ".yml", ".txt", ".pbtxt", ".log", ".tmp",
                              ".index")):  # `NAME.tfrecord.index`: a shard's index file
                continue
            path = os.path.join(root, name)
            compression = {".gz": "gzip", ".zz": "zlib"}.get(os.path.splitext(name)[1], "none")
            records += _count_file(path, compression)
            files += 1
            size += os.path.getsize(path)
    return records, files, size


def _tail(*paths: str) -> str:
    for path in paths:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - _TAIL_CHARS))
                text = fh.read().decode("utf-8", "replace").strip()
        except OSError:
            continue
        if text:
            return text
    return ""


# ---- one variant -------------------------------------------------------------------------
def run_once(variant: str, dataset: str, n: int, inputs: dict[str, str], workdir: str,
             ours_args: list[str], timeout: float | None, keep: bool, attempt: int) -> dict:
    output = os.path.join(workdir, "out", dataset, variant)
    shutil.rmtree(output, ignore_errors=True)
    logs = os.path.join(workdir, "logs")
    os.makedirs(logs, exist_ok=True)
    stem = os.path.join(logs, f"{dataset}-{variant}-{attempt}")
    cmd = command(variant, dataset, inputs, output, workdir, ours_args)
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    load_before = os.getloadavg()
    with open(stem + ".stdout", "wb") as out, open(stem + ".stderr", "wb") as err:
        m = measure(cmd, stdout=out, stderr=err, cwd=REPO, env=env, timeout=timeout)
    result: dict[str, Any] = {
        "seconds": round(m.seconds, 3),
        "records_per_s": None,
        "peak_rss_mb": round(m.peak_rss_mb, 1),
        "status": "ok",
        "cpu_seconds": round(m.cpu_seconds, 2) if m.cpu_seconds is not None else None,
        "command": shlex.join(cmd),
        "log": stem + ".stderr",
        "peak_processes": m.peak_processes,
        "rss_samples": m.samples,
        # 1-minute load average before/after: above ~0 before means other work shared the CPUs
        "loadavg_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "rss_timeline_s_mb": m.timeline,
    }
    if m.timed_out:
        result.update(status="failed", error=f"timed out after {timeout}s\n"
                      + _tail(stem + ".stderr", stem + ".stdout"))
    elif m.returncode != 0:
        result.update(status="failed", returncode=m.returncode,
                      error=_tail(stem + ".stderr", stem + ".stdout"))
    else:
        try:
            records, files, size = count_records(output)
        except Exception as exc:  # noqa: BLE001 - report unreadable output as invalid
            records, files, size = -1, 0, 0
            result["error"] = f"reading the output failed: {exc!r}"
        result.update(records=records, shard_files=files, output_bytes=size,
                      records_per_s=round(n / m.seconds, 1))
        if records != n:
            result["status"] = "invalid"
            result.setdefault("error", f"wrote {records} records in {files} shard files, "
                                       f"expected {n}")
    if not keep:
        shutil.rmtree(output, ignore_errors=True)
    return result


def summarize(runs: list[dict], n: int) -> dict:
    """One result from R runs: median seconds, max peak RSS; ok only if every run was ok."""
    if len(runs) == 1:
        return runs[0]
    bad = [r for r in runs if r["status"] != "ok"]
    if bad:
        out = dict(bad[0])
    else:
        seconds = statistics.median(r["seconds"] for r in runs)
        out = dict(runs[0])
        out.update(seconds=round(seconds, 3), records_per_s=round(n / seconds, 1),
                   peak_rss_mb=max(r["peak_rss_mb"] for r in runs),
                   cpu_seconds=statistics.median(r["cpu_seconds"] or 0 for r in runs))
    out.pop("rss_timeline_s_mb", None)
    out["runs"] = runs
    return out


def ratios(results: dict[str, dict]) -> dict[str, Any]:
    """ours against each baseline: speed = ours records/s / baseline records/s (>1: ours is
    faster), rss = ours peak RSS / baseline peak RSS (<1: ours uses less memory)."""
    out: dict[str, Any] = {}
    ours = results.get("ours")
    for base in BASELINES:
        other = results.get(base)
        if ours is None or other is None:
            continue
        if ours["status"] == "ok" and other["status"] == "ok":
            out[f"ours_vs_{base}"] = {
                "speed": round(ours["records_per_s"] / other["records_per_s"], 3),
                "rss": round(ours["peak_rss_mb"] / other["peak_rss_mb"], 3),
            }
        else:
            out[f"ours_vs_{base}"] = None
    return out


# ---- reporting ---------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    mem_gb = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gb = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": _cpu_model(),
        "memory_gb": mem_gb,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "apache_beam": version("apache-beam"),
        "tensorflow": version("tensorflow"),
        "tfx_bsl": version("tfx-bsl"),
        "numpy": version("numpy"),
        "git_commit": commit or None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def table(name: str, n: int, results: dict[str, dict], rat: dict[str, Any]) -> str:
    unit = "rows" if name == "csv" else "images"
    lines = [f"\n{name}: {n:,} {unit}",
             f"{'variant':<12} {'status':<8} {'seconds':>9} {'cpu s':>7} {'records/s':>11} "
             f"{'peak RSS MB':>12} {'ours speed x':>13} {'ours RSS x':>11}"]
    for variant, r in results.items():
        rps = f"{r['records_per_s']:,.0f}" if r.get("records_per_s") else "-"
        speed = rss = ""
        if variant in BASELINES:
            ratio = rat.get(f"ours_vs_{variant}")
            speed = f"{ratio['speed']:.2f}" if ratio else "-"
            rss = f"{ratio['rss']:.2f}" if ratio else "-"
        cpu = f"{r['cpu_seconds']:.1f}" if r.get("cpu_seconds") is not None else "-"
        lines.append(f"{variant:<12} {r['status']:<8} {r['seconds']:>9.1f} {cpu:>7} {rps:>11} "
                     f"{r['peak_rss_mb']:>12,.0f} {speed:>13} {rss:>11}")
    for variant, r in results.items():
        if r["status"] != "ok":
            tail = "\n    ".join(r.get("error", "").splitlines()[-8:])
            lines.append(f"  {variant} {r['status']}: see {r.get('log')}\n    {tail}")
    return "\n".join(lines)


def _write_json(path: str, report: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="CSV rows (0 skips CSV)")
    parser.add_argument("--images", type=int, default=600_000,
                        help="IDX images (0 skips images)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, from {','.join(VARIANTS)}")
    parser.add_argument("--workdir", default=os.path.join(REPO, "bench_out"))
    parser.add_argument("--json", help="result file (default: WORKDIR/results.json)")
    parser.add_argument("--keep", action="store_true", help="keep the output TFRecords")
    parser.add_argument("--ours-args", default="",
                        help="extra arguments for run_pipeline.py run (one shell-quoted string)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per variant; median seconds, max peak RSS")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run")
    args = parser.parse_args(argv)

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    json_path = os.path.abspath(args.json or os.path.join(workdir, "results.json"))
    ours_args = shlex.split(args.ours_args)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    compile_tree(REPO)
    report: dict[str, Any] = {"machine": machine_info(), "variants": variants,
                              "ours_args": ours_args}
    # the machine is shared: its speed, before and after the runs, goes with their figures
    speed = report["machine_speed"] = {"before": machine_speed.measure()}
    log(f"machine speed before: {machine_speed.describe(speed['before'])}")
    datasets = [("csv", args.rows), ("images", args.images)]
    for dataset, n in datasets:
        if n <= 0:
            continue
        if dataset == "csv":
            inputs = {"csv": data.ensure_csv(workdir, n, log)}
            section: dict[str, Any] = {"rows": n, "input": inputs}
        else:
            images, labels = data.ensure_images(workdir, n, log)
            inputs = {"images": images, "labels": labels}
            section = {"images": n, "input": inputs}
        section["results"] = {}
        report[dataset] = section
        for variant in variants:
            runs = []
            for attempt in range(max(1, args.repeat)):
                log(f"[{dataset} n={n}] {variant} run {attempt + 1}/{args.repeat} ...")
                r = run_once(variant, dataset, n, inputs, workdir, ours_args, args.timeout,
                             args.keep, attempt)
                rps = f"{r['records_per_s']:,.0f} rec/s" if r["records_per_s"] else "-"
                log(f"    {r['status']}: {r['seconds']:.1f}s, {rps}, "
                    f"peak RSS {r['peak_rss_mb']:,.0f} MB")
                runs.append(r)
            section["results"][variant] = summarize(runs, n)
            section["ratios"] = ratios(section["results"])
            _write_json(json_path, report)
        print(table(dataset, n, section["results"], section["ratios"]), flush=True)
    speed["after"] = machine_speed.measure()
    for when in ("before", "after"):
        print(f"\nmachine speed {when} (benchmarks.machine_speed): "
              f"{machine_speed.describe(speed[when])}")
    _write_json(json_path, report)
    print(f"\nresults: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
