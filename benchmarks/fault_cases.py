"""The bad-input and fault cases (issue 9's here, issue 28's in the `faults_*` modules listed
in GROUPS), run through the real CLI, one table row each.

    python -m benchmarks.fault_cases                      # this checkout
    python -m benchmarks.fault_cases --code /path/to/old  # another checkout (before/after)
    python -m benchmarks.fault_cases --cases csv_quote,jsonl_scalar --big
    python -m benchmarks.fault_cases --group faults_quarantine

Each case builds its inputs in a fresh temp dir, runs `run_pipeline.py run JOB` in a
subprocess and reports what a user would see: the exit code, how many lines reached stderr
(and whether a traceback did), the first line, the manifest's counts, and whether the files
that were there before are still there with the same bytes. The tests assert the outcomes;
this script only shows them side by side (the closing note's before/after table).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
ROWS = 1000

CSV_SCHEMA = """name: t
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float32, shape: []}
  name: {dtype: bytes, shape: []}
"""
SEQ_SCHEMA = """name: s
kind: sequence_example
context:
  id: {dtype: int64, shape: []}
sequence:
  tokens: {dtype: int64, shape: []}
"""
IMG_SCHEMA = """name: img
kind: example
features:
  image: {dtype: uint8, shape: [16, 16, 3], encoding: png}
  label: {dtype: bytes, shape: []}
"""


def _csv(path: Path, rows: int = ROWS, bad: dict[int, str] | None = None) -> None:
    """`rows` data rows; `bad` maps a 1-based file line to the text put there instead."""
    lines = ["id,x,name"] + [f"{i},{i * 0.5},n{i}" for i in range(rows)]
    for line, text in (bad or {}).items():
        lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n")


def _job(d: Path, schema: str, source: dict[str, Any], output: str = "out", **extra: Any) -> Path:
    (d / "schema.yaml").write_text(schema)
    job = {"schema": "schema.yaml", "sources": {"train": source}, "output": output,
           "shards": 2, **extra}
    path = d / "job.yaml"
    path.write_text(json.dumps(job))
    return path


def _listing(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class Runner:
    def __init__(self, code: Path, python: str):
        self.code = code
        self.python = python

    def start(self, job: Path, *args: str) -> subprocess.Popen:
        return subprocess.Popen([self.python, str(self.code / "run_pipeline.py"), "run", str(job),
                                 "--runner=FnApiRunner", *args], cwd=job.parent,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})

    def run(self, job: Path, *args: str, timeout: float = 600) -> dict[str, Any]:
        proc = self.start(job, *args)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        return _outcome(proc.returncode, err, job.parent / "out")


def _outcome(rc: int, err: str, out: Path) -> dict[str, Any]:
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("WARNING")]
    result: dict[str, Any] = {"exit": rc, "stderr_lines": len(lines),
                              "traceback": any("Traceback" in x for x in lines),
                              "first": (lines[0][:160] if lines else "")}
    manifest = out / "manifest.json"
    if rc == 0 and manifest.exists():
        m = json.loads(manifest.read_text())
        written = sum(s["num_records"] for s in m["splits"].values())
        rej = m.get("rejected", {})
        result["counts"] = f"written {written}, rejected {rej.get('num_records')}"
        if all("read" in i for i in m.get("inputs", [])):  # per-file accounting (format 2)
            result["read"] = sum(i["read"] for i in m["inputs"])
        result["by_reason"] = rej.get("by_reason")
        dead = out / "rejected" / "rejected.jsonl"
        if dead.exists():
            recs = [json.loads(x) for x in dead.read_text().splitlines() if x.strip()]
            result["where"] = [r.get("line", r.get("position", r.get("record"))) for r in recs][:5]
            result["files"] = sorted({Path(r["source"]).name for r in recs})
    return result


# ---- the cases -----------------------------------------------------------------------------
def _output_case(r: Runner, d: Path, output: str, paths: list[str]) -> dict[str, Any]:
    """Run a CSV job whose output is `output`; was anything in `d` lost or changed?"""
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": paths}, output=output)
    before = _listing(d)
    res = r.run(job)
    res["intact"] = _listing(d) == before or _missing(before, d)
    return res


def output_is_job_dir(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv")
    return _output_case(r, d, ".", ["in.csv"])


def output_is_input_dir(r: Runner, d: Path) -> dict[str, Any]:
    (d / "data").mkdir()
    _csv(d / "data" / "in.csv")
    return _output_case(r, d, "data", ["data/in.csv"])


def output_is_a_file(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv")
    (d / "notes.txt").write_text("my notes\n")
    return _output_case(r, d, "notes.txt", ["in.csv"])


def output_is_foreign_dir(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv")
    (d / "photos").mkdir()
    (d / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 my cat")
    return _output_case(r, d, "photos", ["in.csv"])


def sibling_old_keep(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv")
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    (d / "out.old-keep").mkdir()
    (d / "out.old-keep" / "thesis.tex").write_text("years of work\n")
    r.run(job)
    res = r.run(job)  # the second run is the one that used to clean up "leftovers"
    res["intact"] = (d / "out.old-keep" / "thesis.tex").exists()
    return res


def _missing(before: dict[str, str], d: Path) -> str:
    after = _listing(d)
    gone = sorted(k for k in before if after.get(k) != before[k])
    return f"LOST {len(gone)}: {gone[:3]}" if gone else "yes"


def csv_quote(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv", bad={102: '100,50.0,"unterminated'})
    return r.run(_job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]},
                      max_bad_fraction=0.2))


def csv_int64_overflow(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv", bad={102: "99999999999999999999999,50.0,n100"})
    return r.run(_job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]},
                      max_bad_fraction=0.2))


def csv_huge_field(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv")
    with open(d / "in.csv", "a") as fh:
        fh.write(f"{ROWS},0.5,")
        chunk = "x" * (1 << 20)
        for _ in range(300):
            fh.write(chunk)
        fh.write("\n")
    return r.run(_job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]},
                      max_bad_fraction=0.2))


def png_wrong_shape(r: Runner, d: Path) -> dict[str, Any]:
    import numpy as np  # noqa: PLC0415
    from PIL import Image  # noqa: PLC0415

    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (d / "img" / cls).mkdir(parents=True)
        for i in range(10):
            size = 32 if (cls, i) == ("b", 3) else 16
            Image.fromarray(rng.integers(0, 255, (size, size, 3), np.uint8)).save(
                d / "img" / cls / f"{i}.png")
    return r.run(_job(d, IMG_SCHEMA, {"format": "images", "paths": ["img"]},
                      max_bad_fraction=0.2))


def jsonl_scalar_for_list(r: Runner, d: Path) -> dict[str, Any]:
    rows = [json.dumps({"id": i, "tokens": [i, i + 1]}) for i in range(ROWS)]
    rows[100] = json.dumps({"id": 100, "tokens": "oops"})
    (d / "s.jsonl").write_text("\n".join(rows) + "\n")
    return r.run(_job(d, SEQ_SCHEMA, {"format": "jsonl", "paths": ["s.jsonl"]},
                      max_bad_fraction=0.2))


def _tfrecords(r: Runner, d: Path, sequence: bool) -> Path:
    """Records made by the pipeline itself (one shard, input order)."""
    src = d / "src"
    src.mkdir()
    if sequence:
        (src / "s.jsonl").write_text("".join(json.dumps({"id": i, "tokens": [i, 1]}) + "\n"
                                             for i in range(ROWS)))
        job = _job(src, SEQ_SCHEMA, {"format": "jsonl", "paths": ["s.jsonl"]}, shards=1,
                   shuffle=False)
    else:
        _csv(src / "in.csv")
        job = _job(src, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]}, shards=1,
                   shuffle=False)
    r.run(job)
    return next((src / "out").glob("train-*.tfrecord"))


def tfrecord_flipped_byte(r: Runner, d: Path) -> dict[str, Any]:
    shard = _tfrecords(r, d, sequence=False)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (d / "in.tfrecord").write_bytes(bytes(data))
    return r.run(_job(d, CSV_SCHEMA, {"format": "tfrecord", "paths": ["in.tfrecord"]},
                      max_bad_fraction=0.5))


def tfrecord_wrong_kind(r: Runner, d: Path) -> dict[str, Any]:
    shard = _tfrecords(r, d, sequence=True)
    (d / "in.tfrecord").write_bytes(shard.read_bytes())
    return r.run(_job(d, CSV_SCHEMA, {"format": "tfrecord", "paths": ["in.tfrecord"]}))


def two_runs_at_once(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv", rows=300_000)
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    procs = [r.start(job), r.start(job)]
    results = [_outcome(p.wait(), p.communicate()[1], d / "out") for p in procs]
    return {"exit": [x["exit"] for x in results],
            "first": " | ".join(x["first"] for x in results if x["first"])[:200],
            "traceback": any(x["traceback"] for x in results)}


def kill_then_rerun(r: Runner, d: Path) -> dict[str, Any]:
    _csv(d / "in.csv", rows=300_000)
    job = _job(d, CSV_SCHEMA, {"format": "csv", "paths": ["in.csv"]})
    proc = r.start(job)
    time.sleep(4)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    res = r.run(job)
    res["leftovers"] = sorted(p.name for p in d.iterdir()
                              if p.name not in ("in.csv", "job.yaml", "schema.yaml", "out"))
    return res


CASES: dict[str, Callable[[Runner, Path], dict[str, Any]]] = {
    f.__name__: f for f in (output_is_job_dir, output_is_input_dir, output_is_a_file,
                            output_is_foreign_dir, sibling_old_keep, csv_quote, csv_int64_overflow,
                            csv_huge_field, png_wrong_shape, jsonl_scalar_for_list,
                            tfrecord_flipped_byte, tfrecord_wrong_kind, two_runs_at_once,
                            kill_then_rerun)
}
BIG = {"csv_huge_field"}
# Issue 28 ("trust nothing on disk"), one module per area, each with its own CASES.
GROUPS = ("faults_quarantine", "faults_readers", "faults_skiprule", "faults_leftovers",
          "faults_checks", "faults_bounds")


def all_cases(groups: tuple[str, ...] = ("",) + GROUPS) -> dict[str, Callable[..., dict[str, Any]]]:
    """Every case by name ("" is this module's own); imported late: the group modules use
    this module's helpers."""
    found: dict[str, Callable[..., dict[str, Any]]] = {}
    for group in groups:
        cases = CASES if not group else importlib.import_module(f"benchmarks.{group}").CASES
        for name, case in cases.items():
            if name in found:
                raise ValueError(f"fault case {name!r} defined twice ({group or 'fault_cases'})")
            found[name] = case
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code", type=Path, default=HERE, help="checkout whose run_pipeline.py runs")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--cases", default="", help="comma-separated subset (default: all)")
    p.add_argument("--group", choices=("",) + GROUPS, default=None,
                   help="only one module's cases (\"\": issue 9's)")
    p.add_argument("--big", action="store_true", help="include the 300 MB field case")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    cases = all_cases() if args.group is None else all_cases((args.group,))
    names = args.cases.split(",") if args.cases else [n for n in cases if args.big or n not in BIG]
    runner = Runner(args.code.resolve(), args.python)
    results = {}
    print("| case | exit | stderr lines (traceback) | outcome |")
    print("|---|---|---|---|")
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"fault-{name}-", ignore_cleanup_errors=True) as tmp:
            res = cases[name](runner, Path(tmp))
        results[name] = res
        facts = "; ".join(f"{k}: {v}" for k, v in res.items()
                          if k not in ("exit", "stderr_lines", "traceback"))
        print(f"| {name} | {res.get('exit', '')} | {res.get('stderr_lines', '')}"
              f"{' (traceback)' if res.get('traceback') else ''} | {facts} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
