"""The benchmark jobs' shard sha256 in this tree against another checkout (a refactor must not
change a byte): the generated CSV and IDX images (benchmarks.data) converted by both with the
same job, 8 shards, seed 42, index files off (older checkouts have none).

    python -m benchmarks.same_shards --checkout DIR [--rows N] [--images N] [--workdir DIR]
                                     [--via files|engine]

DIR is a checkout of the other commit (`git worktree add /tmp/old COMMIT`); both run with this
venv's Python. Prints one line per job: identical or the first shard that differs. Exit 1 when
any differs. `--via` picks the shuffle strategy of both runs (default: the runner's, `files`
on the local runner); the two strategies write the same bytes, so either must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks.data import ensure_arrays, ensure_csv, ensure_images

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def jobs(workdir: str, rows: int, images: int, arrays: int = 0,
         via: str | None = None) -> dict[str, dict]:
    csv = ensure_csv(workdir, rows)
    imgs, labels = ensure_images(workdir, images)
    common = {"shards": 8, "shuffle": {"seed": 42, **({"via": via} if via else {})}}
    more = {}
    if arrays:
        x, y = ensure_arrays(workdir, arrays)
        more["arrays"] = {"schema": os.path.join(REPO, "schemas", "bench_arrays.yaml"),
                          "sources": {"train": {"format": "npy", "paths": {"x": x, "y": y}}},
                          **common}
    return {**more,
        "csv": {"schema": os.path.join(REPO, "schemas", "bench_csv.yaml"),
                "sources": {"train": {"format": "csv", "paths": [csv]}}, **common},
        "images": {"schema": os.path.join(REPO, "schemas", "bench_images.yaml"),
                   "sources": {"train": {"format": "idx",
                                         "paths": {"image": imgs, "label": labels}}}, **common},
    }


def shards(tree: str, label: str, job: dict, workdir: str) -> list[tuple[str, str]]:
    """(shard, sha256) of `job` converted by the checkout `tree`, with `index: false`, or
    without that key where the checkout predates index files (it refuses unknown keys)."""
    out = os.path.abspath(os.path.join(workdir, f"same-{label}"))
    for doc in ({**job, "output": out, "index": False}, {**job, "output": out}):
        path = out + ".json"
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        proc = subprocess.run([sys.executable, "run_pipeline.py", "run", path, "--force",
                               "--progress", "none", "--runner=FnApiRunner"], cwd=tree,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0:
            break
        if "index" not in proc.stderr:
            raise SystemExit(f"{tree}: {proc.stderr.strip()}")
    else:
        raise SystemExit(f"{tree}: {proc.stderr.strip()}")
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    return [(s["path"], s["sha256"]) for info in manifest["splits"].values()
            for s in info["shards"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.same_shards",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", required=True, help="the other commit's checkout")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--images", type=int, default=600_000)
    p.add_argument("--workdir", default="bench_out")
    p.add_argument("--via", choices=("files", "engine"), default=None,
                   help="the shuffle strategy of both runs (default: the runner's)")
    args = p.parse_args(argv)
    other = os.path.abspath(args.checkout)
    differ = 0
    tag = f"-{args.via}" if args.via else ""
    for name, job in jobs(args.workdir, args.rows, args.images, via=args.via).items():
        if {"csv": args.rows, "images": args.images}.get(name) == 0:
            print(f"{name}: skipped (0 asked for)")
            continue
        ours = shards(REPO, f"{name}{tag}-ours", job, args.workdir)
        theirs = shards(other, f"{name}{tag}-other", job, args.workdir)
        if ours == theirs:
            print(f"{name}: identical, {len(ours)} shards (first sha256 {ours[0][1][:16]}…)")
        else:
            differ += 1
            first = next((a, b) for a, b in zip(ours, theirs, strict=False) if a != b)
            print(f"{name}: DIFFER at {first[0][0]}: {first[0][1][:16]}… vs {first[1][1][:16]}…")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
