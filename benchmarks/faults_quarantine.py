"""Issue 28's quarantine fault cases (G19), through the real CLI, for the fault table
(benchmarks/fault_cases.py registers CASES). Each case publishes a small iris day, blocks a
collapsed second day into quarantine (`checks:`), then plays the operator or the attacker:
an edited marker, a copied tree, a symlinked or damaged entry, a drop during a release, a
SIGINT after a release's `_SUCCESS`. It reports the exit code, the first stderr line and the
facts that differ before/after the fix (whether a sentinel survived, what the output
publishes, what the history says). Works against old checkouts too (their CLI is all it
uses; the pause points used exist since the publish's signal handling).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.fault_cases import HERE, Runner, _listing, _outcome

IRIS = HERE / "examples" / "data" / "daily" / "2026-11-19" / "iris.csv"
JOB = """schema: schema.yaml
source: {format: csv, paths: [iris.csv]}
split: {train: 0.8, test: 0.2}
output: out
shuffle: {seed: 7}
shards: 2
checks:
  block:
    features:
      label: {distinct: {min: 2}}
"""


def _iris(path: Path, collapse: bool = False) -> None:
    with open(IRIS, newline="") as fh:
        rows = list(csv.reader(fh))
    if collapse:
        rows = [rows[0]] + [r[:-1] + ["Iris-setosa"] for r in rows[1:]]
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)


def _blocked(r: Runner, d: Path) -> tuple[Path, Path]:
    """Day 1 published into d/out, day 2 (one class) blocked: (the job, its entry)."""
    shutil.copy(HERE / "schemas" / "iris.yaml", d / "schema.yaml")
    _iris(d / "iris.csv")
    job = d / "job.yaml"
    job.write_text(JOB)
    first = r.run(job)
    assert first["exit"] == 0, first
    _iris(d / "iris.csv", collapse=True)
    blocked = r.run(job)
    assert blocked["exit"] == 6, blocked
    [entry] = [p for p in (d / "out.quarantine").iterdir() if p.is_dir()]
    return job, entry


def _cli(r: Runner, d: Path, *args: str, env: dict[str, str] | None = None,
         ) -> subprocess.Popen[str]:
    return subprocess.Popen([r.python, str(r.code / "run_pipeline.py"), *args], cwd=d,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})})


def _q(r: Runner, d: Path, *args: str) -> dict[str, Any]:
    proc = _cli(r, d, "quarantine", *args)
    out, err = proc.communicate(timeout=300)
    res = _outcome(proc.returncode, err, d / "nothing")
    res["stdout"] = out.strip()[:160]
    return res


def _run_id(out: Path) -> str | None:
    try:
        return json.loads((out / "manifest.json").read_text()).get("run_id")
    except (OSError, ValueError):
        return None


def _verifies(r: Runner, d: Path, out: Path) -> bool:
    proc = _cli(r, d, "verify", str(out))
    proc.communicate(timeout=300)
    return proc.returncode == 0


def _edit(entry: Path, **fields: Any) -> None:
    marker = entry / "_QUARANTINE.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), **fields}))


def marker_traversal_drop(r: Runner, d: Path) -> dict[str, Any]:
    """A `../` name and an absolute one in the marker: drop deleted files outside OUT."""
    _, entry = _blocked(r, d)
    (d / "sentinel.txt").write_text("not yours")
    (d / "keep").mkdir()
    (d / "keep" / "abs.txt").write_text("not yours either")
    objects = json.loads((entry / "_QUARANTINE.json").read_text())["objects"]
    _edit(entry, objects=[*objects, "../../sentinel.txt", str(d / "keep" / "abs.txt")])
    res = _q(r, d, "drop", "out")
    res["sentinels_survived"] = (d / "sentinel.txt").exists() and (d / "keep" / "abs.txt").exists()
    return res


def marker_copied_tree_release(r: Runner, d: Path) -> dict[str, Any]:
    """The output tree copied to a backup; `release BACKUP/out` published into the original."""
    _, entry = _blocked(r, d)
    original = _run_id(d / "out")
    (d / "backup").mkdir()
    for name in ("out", "out.quarantine"):
        shutil.copytree(d / name, d / "backup" / name, symlinks=True)
    res = _q(r, d, "release", str(d / "backup" / "out"))
    res["original_unchanged"] = _run_id(d / "out") == original
    res["backup_publishes_entry"] = _run_id(d / "backup" / "out") == entry.name
    return res


def symlinked_dataset_release(r: Runner, d: Path) -> dict[str, Any]:
    """The entry's dataset/ replaced by a symlink to another published output."""
    _, entry = _blocked(r, d)
    shutil.copytree(d / "out", d / "other", symlinks=True)
    before = _listing(d / "other")
    shutil.rmtree(entry / "dataset")
    (entry / "dataset").symlink_to(d / "other", target_is_directory=True)
    res = _q(r, d, "release", "out")
    res["other_intact"] = (d / "other").is_dir() and _listing(d / "other") == before
    res["out_is_a_symlink"] = (d / "out").is_symlink()
    res["out_verifies"] = _verifies(r, d, d / "out")
    return res


def damaged_entry_release(r: Runner, d: Path) -> dict[str, Any]:
    """A quarantined shard deleted while it waited: release published it unchecked."""
    _, entry = _blocked(r, d)
    good = _run_id(d / "out")
    next(p for p in sorted((entry / "dataset").iterdir()) if p.name.startswith("train-")).unlink()
    res = _q(r, d, "release", "out")
    res["out_verifies"] = _verifies(r, d, d / "out")
    res["out_still_previous"] = _run_id(d / "out") == good
    return res


def drop_during_release(r: Runner, d: Path) -> dict[str, Any]:
    """`drop` while a release holds the output's lock (paused before its publish)."""
    _, entry = _blocked(r, d)
    pause = d / "pause"
    pause.mkdir()
    release = _cli(r, d, "quarantine", "release", "out",
                   env={"ETL_PAUSE_AT": "publish:start", "ETL_PAUSE_DIR": str(pause)})
    deadline = time.monotonic() + 120
    while not (pause / "publish-start.reached").exists() and release.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    res = _q(r, d, "drop", "out")
    (pause / "publish-start.go").touch()
    _, err = release.communicate(timeout=300)
    res["release_exit"] = release.returncode
    res["out_verifies"] = _verifies(r, d, d / "out")
    return res


def sigint_after_release_success(r: Runner, d: Path) -> dict[str, Any]:
    """SIGINT once release wrote `_SUCCESS`: the history said `blocked`, `list` kept it."""
    _, entry = _blocked(r, d)
    pause = d / "pause"
    pause.mkdir()
    release = _cli(r, d, "quarantine", "release", "out",
                   env={"ETL_PAUSE_AT": "publish:success", "ETL_PAUSE_DIR": str(pause)})
    deadline = time.monotonic() + 120
    while not (pause / "publish-success.reached").exists() and release.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    release.send_signal(signal.SIGINT)
    _, err = release.communicate(timeout=300)
    res = _outcome(release.returncode, err, d / "nothing")
    runs = [json.loads(x) for x in (d / "_runs.jsonl").read_text().splitlines() if x.strip()]
    res["history_last"] = runs[-1]["status"]
    listed = _q(r, d, "list", "out")
    res["list_shows_entry"] = entry.name in listed["stdout"]
    res["out_publishes_entry"] = _run_id(d / "out") == entry.name
    return res


CASES: dict[str, Callable[[Runner, Path], dict[str, Any]]] = {
    f"quarantine_{f.__name__}": f for f in (
        marker_traversal_drop, marker_copied_tree_release, symlinked_dataset_release,
        damaged_entry_release, drop_during_release, sigint_after_release_success)
}
