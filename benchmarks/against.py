"""This tree against another checkout on the benchmark's own jobs (a change on the data path is
measured against the commit before it): the generated CSV (and optionally the IDX images and
the .npy arrays) converted by both, alternating, wall and CPU seconds and peak RSS, medians of `--repeat`.

    python -m benchmarks.against --checkout DIR [--rows N] [--images N] [--arrays N] [--repeat 3]
                                 [--idle SECONDS]

DIR is a checkout of the other commit (`git worktree add /tmp/old COMMIT`; one from before
index files gets the job without the `index` key); both run with this venv's Python, in fresh
processes, with the job of benchmarks.same_shards (8 shards, seed 42, `--force` so each run
converts), both trees compiled to bytecode first (benchmarks/bytecode.py). Prints one line per
job: both medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks.bytecode import compile_tree
from benchmarks.same_shards import REPO, jobs
from benchmarks.tools_bench import pair


def command(tree: str, job: dict, path: str) -> list[str]:
    """`run JOB` of `tree` (the job written to `path`), replacing any earlier output."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(job, fh)
    return [sys.executable, os.path.join(tree, "run_pipeline.py"), "run", path, "--force",
            "--progress", "none", "--runner=FnApiRunner"]


def accepted(tree: str, doc: dict, path: str, env: dict[str, str]) -> dict:
    """`doc` as `tree` takes it: without `index` where the checkout predates index files (it
    refuses unknown keys; its shards then have no index files beside them either). Probed
    with `--dry-run`, which reads the job and converts nothing."""
    probe = subprocess.run([*command(tree, doc, path), "--dry-run"], env=env,
                           capture_output=True, text=True)
    if probe.returncode != 0 and "'index'" in probe.stderr:
        return {k: v for k, v in doc.items() if k != "index"}
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.against",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", required=True, help="the other commit's checkout")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--images", type=int, default=0)
    p.add_argument("--arrays", type=int, default=0, help="rows of the npy job (x: 16 float32, y)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", default="bench_out")
    p.add_argument("--idle", type=float, default=0.0,
                   help="seconds of pause before each run (memory the host has taken back)")
    args = p.parse_args(argv)
    other = os.path.abspath(args.checkout)
    for tree in (REPO, other):
        compile_tree(tree)
    os.makedirs(args.workdir, exist_ok=True)
    counts = {"csv": args.rows, "images": args.images, "arrays": args.arrays}
    for name, job in jobs(args.workdir, args.rows, args.images, args.arrays).items():
        if not counts[name]:
            continue
        cmds = {}
        for label, tree in (("ours", REPO), ("other", other)):
            out = os.path.abspath(os.path.join(args.workdir, f"against-{name}-{label}"))
            env_tree = {**os.environ, "PYTHONPATH": tree}
            doc = accepted(tree, {**job, "output": out, "index": False}, out + ".json", env_tree)
            cmds[label] = (command(tree, doc, out + ".json"), env_tree)
        result = pair(name, cmds["ours"][0], cmds["other"][0], args.repeat,
                      env=cmds["ours"][1], baseline_env=cmds["other"][1], idle=args.idle)
        med = result["median"]
        print(f"{name} ({counts[name]} records): "
              f"ours {med['ours']['seconds']:.2f} s wall, {med['ours']['cpu_seconds']:.2f} s CPU, "
              f"{med['ours']['peak_rss_mb']:.0f} MB; other {med['baseline']['seconds']:.2f} s, "
              f"{med['baseline']['cpu_seconds']:.2f} s CPU, {med['baseline']['peak_rss_mb']:.0f} MB; "
              f"other/ours wall {result['baseline_over_ours_seconds']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
