"""Per-process peak memory of one large `via: engine` shard (issue 29, goal 4): N CSV rows of
~1 KB (id, x, y and 950 hex characters from a seeded RNG: the same bytes for the same N),
`shards: 1`, `max_shard_bytes: 1GB`, converted by the CLI on the local runner with worker
processes (`--direct_running_mode=multi_processing --direct_num_workers=2`) or on the
PortableRunner with a worker pool (benchmarks/worker_pool.py). Every 100 ms the RSS of every
process of the launcher's tree (and of the pool's tree) is read with psutil; prints each
process's peak, the sum's peak, and the shard's sha256.

    python -m benchmarks.engine_memory [--rows 700000] [--runner multi|pool]
        [--workdir /tmp/p29/mem] [--checkout DIR]

`--checkout` runs another checkout's CLI (e.g. the commit before) with this venv's Python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import psutil
import yaml

from benchmarks.worker_pool import portable_flags, worker_pool

REPO = Path(__file__).resolve().parent.parent
SCHEMA = {"name": "kb_rows", "kind": "example", "features": {
    "id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
    "y": {"dtype": "int64", "shape": []}, "text": {"dtype": "string", "shape": []}}}
CHUNK = 50_000


def ensure_rows(workdir: Path, n: int) -> Path:
    """The CSV of `n` ~1 KB rows (written once; chunks of CHUNK rows, each its own RNG)."""
    path = workdir / f"kb-rows-{n}.csv"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write("id,x,y,text\n")
        for start in range(0, n, CHUNK):
            rng = np.random.default_rng([29, start])
            m = min(CHUNK, n - start)
            raw = rng.integers(0, 256, (m, 475), dtype=np.uint8)
            xs, ys = rng.standard_normal(m), rng.integers(-10**6, 10**6, m)
            fh.write("".join(f"{start + i},{xs[i]:.6g},{ys[i]},{raw[i].tobytes().hex()}\n"
                             for i in range(m)))
    tmp.rename(path)
    return path


class Peaks:
    """Peak RSS per process of the trees under `roots`, sampled until stopped."""

    def __init__(self, roots: list[int]):
        self.roots = roots
        self.peaks: dict[int, tuple[int, str]] = {}
        self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for root in self.roots:
                try:
                    top = psutil.Process(root)
                    procs = [top, *top.children(recursive=True)]
                except psutil.Error:
                    continue
                for proc in procs:
                    try:
                        rss = proc.memory_info().rss
                        if rss > self.peaks.get(proc.pid, (0, ""))[0]:
                            self.peaks[proc.pid] = (rss, " ".join(proc.cmdline())[-90:])
                    except psutil.Error:
                        continue
                    total += rss
            self.total = max(self.total, total)
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=700_000)
    parser.add_argument("--runner", choices=("multi", "pool"), default="multi")
    parser.add_argument("--workdir", default="/tmp/p29/mem")
    parser.add_argument("--checkout", default=str(REPO))
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    tree = str(Path(args.checkout).resolve())
    csv = ensure_rows(workdir, args.rows)
    (workdir / "kb_rows.yaml").write_text(yaml.safe_dump(SCHEMA))
    out = workdir / f"out-{args.runner}-{Path(tree).name}"
    job = workdir / f"job-{args.runner}-{Path(tree).name}.yaml"
    job.write_text(yaml.safe_dump({
        "schema": str(workdir / "kb_rows.yaml"), "sources": {"train": {
            "format": "csv", "paths": [str(csv)]}},
        "shuffle": {"seed": 42, "via": "engine"}, "shards": 1, "max_shard_bytes": "1GB",
        "compression": "none", "output": str(out)}))
    env = {**os.environ, "PYTHONPATH": tree}
    pool = (worker_pool(sys.executable, tree, env, workdir / "pool.log") if args.runner == "pool"
            else nullcontext(None))
    with pool as port:
        flags = (portable_flags(port) if port else
                 ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
                  "--direct_num_workers=2"])
        roots = [p.pid for p in psutil.process_iter(["cmdline"])
                 if port and f"--service_port={port}" in " ".join(p.info["cmdline"] or [])]
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "run_pipeline.py", "run", str(job), "--force",
                                 "--progress", "none", *flags], cwd=tree, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peaks = Peaks([proc.pid, *roots])
        _, err = proc.communicate()
        peaks.stop()
    if proc.returncode:
        raise SystemExit(f"run failed: {err[-2000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    shard = next(s for split in manifest["splits"].values() for s in split["shards"])
    print(f"{args.rows:,} rows, one shard of {shard['num_bytes']:,} B (sha256 "
          f"{shard['sha256'][:16]}…), {args.runner}, {tree}: "
          f"{time.perf_counter() - start:.1f} s; peak of the sum {peaks.total / 1e9:.2f} GB")
    for rss, cmd in sorted(peaks.peaks.values(), reverse=True)[:4]:
        print(f"  {rss / 1e9:5.2f} GB  {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
