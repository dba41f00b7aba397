"""Issue 28's damaged-published-output cases (the skip rule, `verify`, the drift baseline),
through the real CLI, for the fault table (benchmarks/fault_cases.py registers CASES), and
the cost of the skip check on a 1,000-shard output.

    python -m benchmarks.faults_skiprule --bench            # skip check cost, this checkout
    PYTHONPATH=/old/checkout python benchmarks/faults_skiprule.py --bench   # before

Each case works with the old code's CLI too (its "before" may be a wrong answer or a crash):
the facts returned differ before/after the fix.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (e.g. against another checkout's etl)
    sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH

from benchmarks.fault_cases import CSV_SCHEMA, Runner, _csv, _job, _outcome  # noqa: E402

SHARD = "train-00001-of-00002.tfrecord"
DAYS = ("2026-01-01", "2026-01-02")


def _cli(r: Runner, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([r.python, str(r.code / "run_pipeline.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def _first_warning(err: str) -> str:
    return next((x[:200] for x in err.splitlines() if x.startswith("WARNING")), "")


def _flip(path: Path, offset: int = 40) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _published(r: Runner, d: Path) -> Path:
    _csv(d / "in.csv", rows=300)
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    r.run(job)
    return job


def shard_flipped_byte_rerun(r: Runner, d: Path) -> dict[str, Any]:
    """A byte flipped in a published shard, then the next unforced run: skipped as current
    (before) or rebuilt naming the shard (after)."""
    job = _published(r, d)
    good = _sha(d / "out" / SHARD)
    _flip(d / "out" / SHARD)
    proc = r.start(job)
    out, err = proc.communicate(timeout=600)
    res = _outcome(proc.returncode, err, d / "out")
    res["stdout"] = out.splitlines()[0][:120] if out.strip() else ""
    res["warning"] = _first_warning(err)
    res["healed"] = _sha(d / "out" / SHARD) == good
    return res


def _verify_manifest(r: Runner, d: Path, damage: Callable[[Path], None]) -> dict[str, Any]:
    _published(r, d)
    damage(d / "out" / "manifest.json")
    got = _cli(r, d, "verify", "out")
    lines = got.stderr.splitlines()
    return {"exit": got.returncode, "stderr_lines": len(lines),
            "traceback": "Traceback" in got.stderr, "first": lines[0][:200] if lines else ""}


def verify_missing_manifest(r: Runner, d: Path) -> dict[str, Any]:
    return _verify_manifest(r, d, lambda p: p.unlink())


def verify_broken_manifest(r: Runner, d: Path) -> dict[str, Any]:
    return _verify_manifest(r, d, lambda p: p.write_text("{broken"))


def _dated(r: Runner, d: Path) -> Path:
    """A dated CSV job with a warn-level drift check; its first day published."""
    for n, day in enumerate(DAYS):
        (d / f"{day}.csv").write_text("id,x,name\n" + "".join(
            f"{i},{i * 0.5 + n},n{i}\n" for i in range(300)))
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["{date}.csv"]}, output="out/{date}",
               checks={"warn": {"drift": 0.99}})
    r.run(job, "--date", DAYS[0])
    return job


def _next_span(r: Runner, d: Path, job: Path) -> dict[str, Any]:
    """Run the second day under a parent that reports its peak RSS (KiB)."""
    probe = ("import os, resource, subprocess, sys; r = subprocess.run(sys.argv[1:], "
             "capture_output=True, text=True, env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'}); "
             "print(json.dumps([r.returncode, r.stderr, "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    got = subprocess.run([r.python, "-c", "import json; " + probe, r.python,
                          str(r.code / "run_pipeline.py"), "run", str(job),
                          "--runner=FnApiRunner", "--date", DAYS[1], "--progress", "none"],
                         cwd=d, capture_output=True, text=True, timeout=900)
    rc, err, rss = json.loads(got.stdout.splitlines()[-1])
    res = _outcome(rc, err, d / "out" / DAYS[1])
    res["warning"] = _first_warning(err)
    res["peak_rss_mb"] = round(rss / 1024)
    return res


def drift_against_damaged_span(r: Runner, d: Path) -> dict[str, Any]:
    """The previous span's shard and stats.json damaged: drift computed against it (before)
    or the damaged span passed over in one line (after)."""
    job = _dated(r, d)
    prev = d / "out" / DAYS[0]
    _flip(prev / SHARD)
    with open(prev / "stats.json", "r+b") as fh:
        fh.write(b"{garbage")
    return _next_span(r, d, job)


def previous_span_broken_manifest(r: Runner, d: Path) -> dict[str, Any]:
    """The previous span's manifest.json broken: the gate failed with an unnamed
    JSONDecodeError (before) or names the file and goes on (after)."""
    job = _dated(r, d)
    (d / "out" / DAYS[0] / "manifest.json").write_text("{")
    return _next_span(r, d, job)


def sparse_stats_json(r: Runner, d: Path) -> dict[str, Any]:
    """A 2 GB sparse stats.json in the previous span: read whole (before: ~2.4 GB RSS)."""
    job = _dated(r, d)
    os.truncate(d / "out" / DAYS[0] / "stats.json", 2 << 30)
    return _next_span(r, d, job)


CASES: dict[str, Callable[[Runner, Path], dict[str, Any]]] = {
    f.__name__: f for f in (shard_flipped_byte_rerun, verify_missing_manifest,
                            verify_broken_manifest, drift_against_damaged_span,
                            previous_span_broken_manifest, sparse_stats_json)
}


# ---- the skip check's cost -----------------------------------------------------------------
def synthetic_output(root: Path, shards: int, records: int = 64, size: int = 1024) -> Path:
    """A published local output of `shards` TFRecord shards (each `records` records of
    `size` bytes) with a manifest as a run writes it, sealed when this code seals."""
    from etl.formats.tfrecord import frame_all  # noqa: PLC0415
    from etl.output import manifest as m  # noqa: PLC0415
    from etl.output.layout import PRODUCER  # noqa: PLC0415

    out = root / "out"
    out.mkdir(parents=True)
    entries = []
    for i in range(shards):
        name = f"train-{i:05d}-of-{shards:05d}.tfrecord"
        data = frame_all(os.urandom(size) for _ in range(records))
        (out / name).write_bytes(data)
        entries.append({"path": name, "num_records": records, "num_bytes": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"format_version": 2, "producer": PRODUCER, "files": {},
                "splits": {"train": {"num_records": shards * records,
                                     "num_bytes": sum(e["num_bytes"] for e in entries),
                                     "shards": entries}}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "schema.yaml").write_text("")
    (out / "schema.pbtxt").write_text("")
    manifest["files"] = {n: {"num_bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
                         for n in ("schema.yaml", "schema.pbtxt")}
    (out / "manifest.json").write_text(json.dumps(manifest))
    if hasattr(m, "seal"):
        m.seal(str(out))
    (out / "_SUCCESS").write_bytes(b"")
    return out


def bench(shards: int = 1000, repeat: int = 5, size: int = 1024) -> dict[str, Any]:
    """Seconds for the quick check (the skip rule) and the full `verify` of a `shards`-shard
    output, warm cache, best of `repeat`."""
    from etl.output.manifest import verify  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="skiprule-bench-") as tmp:
        out = synthetic_output(Path(tmp), shards, size=size)
        sealed = "sealed" in json.loads((out / "manifest.json").read_text())
        total = sum(p.stat().st_size for p in out.iterdir())

        def best(fn: Callable[[], Any]) -> float:
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            return min(times)

        quick = best(lambda: verify(str(out), quick=True))
        full = best(lambda: verify(str(out)))
        # the same check finding a change: the last shard flipped
        _flip(out / f"train-{shards - 1:05d}-of-{shards:05d}.tfrecord")
        try:
            verify(str(out), quick=True)
            seen = "not seen"
        except Exception as e:  # noqa: BLE001 - a report of what the check said
            seen = str(e)[-100:]
        return {"shards": shards, "bytes": total, "sealed": sealed,
                "quick_s": round(quick, 4), "full_s": round(full, 4),
                "flipped_byte_by_quick_check": seen}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", action="store_true", help="time the skip check")
    p.add_argument("--shards", type=int, default=1000)
    p.add_argument("--record-bytes", type=int, default=1024, help="64 records per shard")
    args = p.parse_args(argv)
    if args.bench:
        print(json.dumps(bench(args.shards, size=args.record_bytes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
