"""Where a run's page faults and CPU go, per function of the data path: the benchmark's images
job (or its CSV job) run by this tree's CLI, with each listed function wrapped to add up the
calling thread's minor page faults (`getrusage(RUSAGE_THREAD)`) and CPU time around its calls.

    python -m benchmarks.page_faults [--images 600000 | --rows N] [--workdir W]

Inclusive figures (a function's callees count in it too), summed over all calls and threads;
the process's own total at exit comes first. On this VM memory the host has taken back is the
dearest thing a run touches ("Fresh memory on this VM" in benchmarks/README.md): one fault is a
4 KiB page, or a 2 MB one where the memory is advised for huge pages. The hooks wrap a function
once its module has loaded (a meta path hook, as benchmarks/fixed_cost.py does), so a name
imported elsewhere is the wrapped one and the code runs unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.data import ensure_csv, ensure_images
from benchmarks.module_hooks import FINDER
from benchmarks.same_shards import REPO

# module -> functions ("Class.method" for methods) whose faults and CPU are counted
WATCHED = {
    "etl.formats.idx": ["read_block"],
    "transforms.convert": ["encode_block"],
    "etl.contract.codec": ["Encoder.encode"],
    "etl.contract.columns": ["to_storage"],
    "etl.formats.proto_wire": ["join"],
    "etl.shuffle.runs": ["sorted_run"],
    "etl.formats.tfrecord": ["frame_records", "_data_crcs"],
    "etl.shuffle.placement": ["SplitPlacement.place"],
    "etl.shuffle.files": ["write_spill"],
    "etl.shuffle.shard_writer": ["write_shard", "write_placed"],
    "etl.base.behind": ["Behind._drain"],
    "etl.storage.direct_file": ["DirectFile.write"],
}

# run as `python -c CHILD run_pipeline.py run ...`: installs the hooks, then runs the CLI
CHILD = r"""
import atexit, json, os, resource, runpy, sys, threading, time
OUT = os.environ["PAGE_FAULTS_OUT"]
WATCHED = json.loads(os.environ["PAGE_FAULTS_WATCHED"])
totals = {}
lock = threading.Lock()
def counted(fn, name):
    def wrapped(*a, **k):
        before, cpu = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt, time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
            with lock:
                t = totals.setdefault(name, [0, 0, 0.0])
                t[0] += 1
                t[1] += faults
                t[2] += time.thread_time() - cpu
    return wrapped
def hook(module):
    for name in WATCHED[module.__name__]:
        owner, _, attr = name.rpartition(".")
        holder = getattr(module, owner) if owner else module
        if getattr(holder, attr, None) is not None:
            setattr(holder, attr, counted(getattr(holder, attr), name))
HOOKS = {name: hook for name in WATCHED}
""" + FINDER + r"""def write():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(OUT, "w") as fh:
        json.dump({"process": [1, usage.ru_minflt, usage.ru_utime + usage.ru_stime],
                   **totals}, fh)
atexit.register(write)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def job_file(workdir: str, images: int, rows: int) -> str:
    """The benchmark's images job (benchmarks.run's) or its CSV job, written under `workdir`."""
    if images:
        image_path, label_path = ensure_images(workdir, images)
        source = {"format": "idx", "paths": {"image": image_path, "label": label_path}}
        schema = "bench_images.yaml"
    else:
        source = {"format": "csv", "paths": [ensure_csv(workdir, rows)]}
        schema = "bench_csv.yaml"
    job = {"schema": os.path.join(REPO, "schemas", schema), "sources": {"train": source},
           "output": os.path.join(os.path.abspath(workdir), "page_faults_out"),
           "shuffle": {"seed": 42}, "shards": 16, "compression": "none"}
    path = os.path.join(workdir, "page_faults_job.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(job, fh)
    return path


def measure(job: str) -> dict[str, list[float]]:
    """One run of `job` with the hooks: {name: [calls, faults, CPU seconds]}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "faults.json")
        env = {**os.environ, "PAGE_FAULTS_OUT": out, "PAGE_FAULTS_WATCHED": json.dumps(WATCHED),
               "PYTHONPATH": REPO}
        subprocess.run([sys.executable, "-c", CHILD, os.path.join(REPO, "run_pipeline.py"),
                        "run", job, "--force", "--progress", "none", "--runner=FnApiRunner"],
                       env=env, check=True, capture_output=True)
        with open(out, encoding="utf-8") as fh:
            return json.load(fh)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.page_faults",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=600_000)
    p.add_argument("--rows", type=int, default=0, help="the CSV job instead of the images")
    p.add_argument("--workdir", default="bench_out")
    args = p.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    got = measure(job_file(args.workdir, 0 if args.rows else args.images, args.rows))
    for name, (calls, faults, cpu) in sorted(got.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:28} {int(calls):6} calls {int(faults):9,} faults {cpu:7.3f} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
