"""Where the fixed cost of a run goes (issue 29, goal 3): the benchmark CSV's 1k-row job
(benchmarks.same_shards' job: 8 shards, seed 42) run by a checkout's CLI, with timestamps of
its phases taken inside the process, and the process's wall and CPU seconds from wait4.

    python -m benchmarks.fixed_cost [--checkout DIR ...] [--rows 1000] [--repeat 5]

Phases, in seconds since the parent started the process: job loaded (cli.ranges.load_spans),
imports done (cli.main's `_imports_done`), cli.run imported (Beam with it), inputs planned
(cli.run._plan: schema, listing, pins, fingerprints), output locked (cli.run._take_output),
pipeline started and built (cli.run.new_pipeline called, Pipeline.run called), first record
read (the first block the read step gets: out of its reader's prefetch, or of the early read it
takes over, transforms/early_read.py), pipeline done (Pipeline.run returned),
published (etl.output.publish.publish returned), main returned, process ended. The hooks wrap
functions by name once their module has loaded (a meta path hook), so the checkout's own code
and import order run unchanged; a phase a checkout does not have is left out. The checkouts
run `--repeat` times each, alternating, compiled to bytecode first (benchmarks/bytecode.py);
medians per phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bytecode import compile_tree
from benchmarks.data import ensure_csv, ensure_images
from benchmarks.module_hooks import FINDER
from benchmarks.same_shards import REPO

# run as `python -c CHILD TREE/run_pipeline.py run ...` in the checkout: installs the hooks,
# then runs run_pipeline.py as __main__ (sys.argv shifted), as a user's command would.
CHILD = r"""
import os, runpy, sys, time
OUT = os.environ["FIXED_COST_OUT"]
marks = []
def mark(name):
    marks.append((name, time.monotonic(), time.process_time()))
def once(name):
    seen = []
    def hit():
        if not seen:
            seen.append(1)
            mark(name)
    return hit
def after(module, attr, name, first_only=True):
    fn = getattr(module, attr, None)
    if fn is None:
        return
    hit = once(name) if first_only else (lambda: mark(name))
    def wrapped(*a, **k):
        try:
            return fn(*a, **k)
        finally:
            hit()
    setattr(module, attr, wrapped)
def on_first_item(module, attr, name, last=None):
    fn = getattr(module, attr, None)
    if fn is None:
        return
    hit = once(name)
    def wrapped(*a, **k):
        for item in fn(*a, **k):
            hit()
            yield item
            if last:
                mark(last)
    setattr(module, attr, wrapped)
def before(module, attr, name):
    fn = getattr(module, attr, None)
    if fn is None:
        return
    hit = once(name)
    def wrapped(*a, **k):
        hit()
        return fn(*a, **k)
    setattr(module, attr, wrapped)
def patch_cli_main(m): after(m, "_imports_done", "imports done")
def patch_cli_ranges(m): after(m, "load_spans", "job loaded")
def patch_cli_run(m):
    mark("cli.run imported")
    after(m, "_plan", "inputs planned")
    after(m, "_take_output", "output locked")
    before(m, "new_pipeline", "pipeline started")
    after(m, "publish", "published")
def patch_pipeline(m):
    cls = m.Pipeline
    before(cls, "run", "pipeline built")
    after(cls, "run", "pipeline done")
def patch_convert(m):
    on_first_item(m, "prefetch", "first record read", "last block read")
    before(m, "_finalize_run", "finalize started")
def patch_early_read(m):
    # the read step's blocks when it takes the launcher's early read instead of prefetch
    cls = getattr(m, "EarlyRead", None)
    take = getattr(cls, "take", None)
    if take is None:
        return
    first = once("first record read")
    def taken(blocks):
        for block in blocks:
            first()
            yield block
            mark("last block read")
    def wrapped(self, task):
        blocks = take(self, task)
        return None if blocks is None else taken(blocks)
    cls.take = wrapped
def patch_shard_writer(m):
    first = once("first shard started")
    for writer in ("write_shard", "write_placed"):  # merged, or a slice of placed records
        fn = getattr(m, writer, None)
        if fn is None:
            continue
        def wrapped(*a, _fn=fn, **k):
            first()
            try:
                return _fn(*a, **k)
            finally:
                mark("last shard written")
        setattr(m, writer, wrapped)
HOOKS = {"cli.main": patch_cli_main, "cli.ranges": patch_cli_ranges, "cli.run": patch_cli_run,
         "apache_beam.pipeline": patch_pipeline, "transforms.convert": patch_convert,
         "etl.shuffle.shard_writer": patch_shard_writer, "transforms.early_read": patch_early_read}
""" + FINDER + r"""def write():
    with open(OUT, "w") as fh:
        for name, t, cpu in marks:
            fh.write(f"{name}\t{t}\t{cpu}\n")
import atexit
atexit.register(write)
main = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(main)))
try:
    runpy.run_path(main, run_name="__main__")
finally:
    mark("main returned")
    write()
"""

# Beam's own floor, for comparison: the import, then a trivial pipeline on the runner and mode
# our CLI uses locally (Create -> Map -> GroupByKey -> Map), with the GC handled as cli.main
# handles it (off while importing, then frozen)
FLOOR = r"""
import gc, os, sys, time
gc.disable()
marks = [("start", time.monotonic(), time.process_time())]
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
gc.freeze(); gc.enable()
marks.append(("beam imported", time.monotonic(), time.process_time()))
opts = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=multi_threading",
                        f"--direct_num_workers={os.cpu_count()}"])
p = beam.Pipeline(options=opts)
_ = (p | beam.Create(range(1000)) | beam.Map(lambda x: (x % 8, x)) | beam.GroupByKey()
     | beam.Map(lambda kv: len(kv[1])))
marks.append(("pipeline built", time.monotonic(), time.process_time()))
p.run().wait_until_finish()
marks.append(("pipeline done", time.monotonic(), time.process_time()))
with open(os.environ["FIXED_COST_OUT"], "w") as fh:
    for name, t, cpu in marks:
        fh.write(f"{name}\t{t}\t{cpu}\n")
"""

# per-run differences worth a median of their own (less noisy than a difference of medians)
SPANS = [("imports done", "cli.run imported"), ("pipeline started", "pipeline done"),
         ("pipeline done", "process ended")]
FLOOR_PHASES = ["beam imported", "pipeline built", "pipeline done", "process ended"]
PHASES = ["job loaded", "imports done", "cli.run imported", "inputs planned", "output locked",
          "pipeline started", "pipeline built", "first record read", "last block read",
          "first shard started", "last shard written",
          "finalize started", "pipeline done", "published", "main returned", "process ended"]


def one_run(tree: str, job_path: str, extra: list[str]) -> dict[str, tuple[float, float]]:
    """One `run JOB --force` of `tree` (tree "": Beam's floor, FLOOR): phase timestamps,
    wall and CPU seconds."""
    with tempfile.NamedTemporaryFile(suffix=".tsv", delete=False) as fh:
        out = fh.name
    env = {**os.environ, "PYTHONPATH": tree, "FIXED_COST_OUT": out}
    cmd = [sys.executable, "-c", CHILD, os.path.join(tree, "run_pipeline.py"), "run", job_path,
           "--force", "--progress", "none", "--runner=FnApiRunner", *extra]
    if not tree:
        cmd, tree = [sys.executable, "-c", FLOOR], tempfile.gettempdir()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    end = time.monotonic()
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: exit {os.waitstatus_to_exitcode(status)}: {err.strip()}")
    with open(out, encoding="utf-8") as fh:
        rows = [line.rstrip("\n").split("\t") for line in fh]
    os.unlink(out)
    got = {name: (float(t) - t0, float(cpu)) for name, t, cpu in rows}
    got["process ended"] = (end - t0, usage.ru_utime + usage.ru_stime)
    return got


def commands(trees: list[str], job_path: str, out: str, workdir: str, repeat: int) -> None:
    """The light commands (`--help`, `history`, `run --dry-run`, `verify`) of each checkout,
    alternating: medians of wall and user+sys seconds (wait4)."""
    cases = {"--help": ["--help"], "history": ["history", os.path.abspath(workdir)],
             "run --dry-run": ["run", job_path, "--dry-run"], "verify": ["verify", out]}
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(repeat):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            for name, args in cases.items():
                t0 = time.monotonic()
                proc = subprocess.Popen([sys.executable, os.path.join(tree, "run_pipeline.py"),
                                         *args], cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _, status, usage = os.wait4(proc.pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"{tree}: {name}: exit {os.waitstatus_to_exitcode(status)}")
                got.setdefault((tree, name), []).append(
                    (time.monotonic() - t0, usage.ru_utime + usage.ru_stime))
    for (tree, name), values in got.items():
        print(f"{tree}: {name:14s} {statistics.median(v[0] for v in values):.3f} s wall, "
              f"{statistics.median(v[1] for v in values):.3f} s CPU (medians of {len(values)})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fixed_cost",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", action="append", default=[],
                   help="another checkout to run alternately with this one (repeatable)")
    p.add_argument("--variant", action="append", default=[], metavar="ARGS",
                   help="this tree again with these extra run arguments (repeatable), e.g. "
                        "'--direct_running_mode=in_memory'")
    p.add_argument("--beam-floor", action="store_true",
                   help="also run Beam's floor: its import and a trivial pipeline, no code of ours")
    p.add_argument("--commands", action="store_true",
                   help="instead: the light commands (--help, history, run --dry-run, verify)")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--images", type=int, default=0,
                   help="instead of the CSV: benchmarks.run's images job of this many images")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--workdir", default="bench_out")
    args = p.parse_args(argv)
    trees = [REPO, *(os.path.abspath(c) for c in args.checkout), *(REPO for _ in args.variant)]
    extras = [[] for _ in range(1 + len(args.checkout))] + [v.split() for v in args.variant]
    for tree in set(trees):
        compile_tree(tree)
    if args.beam_floor:
        trees.append("")
        extras.append([])
    if args.images:
        images, labels = ensure_images(args.workdir, args.images)
        job = {"schema": os.path.join(REPO, "schemas", "bench_images.yaml"),  # benchmarks.run's
               "sources": {"train": {"format": "idx", "paths": {"image": images,
                                                                "label": labels}}},
               "shards": 16, "shuffle": {"seed": 42}}
    else:
        csv = ensure_csv(args.workdir, args.rows)
        job = {"schema": os.path.join(REPO, "schemas", "bench_csv.yaml"),  # same_shards' csv job
               "sources": {"train": {"format": "csv", "paths": [csv]}},
               "shards": 8, "shuffle": {"seed": 42}}
    paths = []
    for i in range(len(trees)):
        path = os.path.abspath(os.path.join(args.workdir, f"fixed-{i}.json"))
        out = os.path.abspath(os.path.join(args.workdir, f"fixed-{i}"))
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({**job, "output": out}, fh)
        paths.append(path)
    if args.commands:
        first = os.path.abspath(os.path.join(args.workdir, "fixed-0"))
        if not os.path.exists(os.path.join(first, "_SUCCESS")):
            one_run(trees[0], paths[0], [])  # an output for `verify`
        commands([t for t in trees if t], paths[0], first, args.workdir, args.repeat)
        return 0
    runs: list[list[dict[str, float]]] = [[] for _ in trees]
    for r in range(args.repeat):
        order = list(range(len(trees)))
        for i in order if r % 2 == 0 else order[::-1]:
            runs[i].append(one_run(trees[i], paths[i], extras[i]))
    load = os.getloadavg()[0]
    for tree, extra, got in zip(trees, extras, runs, strict=True):
        print(f"{tree or 'Beam alone'} {' '.join(extra)} (medians of {len(got)}; "
              f"load average {load:.2f}):")
        print(f"  {'phase':18s} {'wall':>7s} {'CPU':>7s}   (CPU: the process's user+sys so far)")
        for name in PHASES if tree else FLOOR_PHASES:
            values = [g[name] for g in got if name in g]
            if values:
                wall = statistics.median(v[0] for v in values)
                cpu = statistics.median(v[1] for v in values)
                print(f"  {name:18s} {wall:7.3f} {cpu:7.3f}   "
                      f"[{', '.join(f'{v[1]:.2f}' for v in values)}]")
        for first, last in SPANS if tree else ():
            paired = [(g[last][0] - g[first][0], g[last][1] - g[first][1]) for g in got
                      if first in g and last in g]
            if paired:
                print(f"  {first} -> {last}: {statistics.median(p[0] for p in paired):.3f} s "
                      f"wall, {statistics.median(p[1] for p in paired):.3f} s CPU (medians of "
                      "each run's own difference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
