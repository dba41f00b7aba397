"""Job folders the CLI tests run the way users do (`run_pipeline.py run` in a subprocess), and
runs held at a pause point (etl/base/pause.py): shared by the signal, heal, unattended and
quarantine tests and by tests/stress_signals.py. The helpers that look at what a run left are in
tests/helpers.py."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import IDS_SCHEMA, ROOT, RUN

# the two interrupt lines: a run stopped before or after it published (tests/test_signals.py)
OLD = "before publishing: nothing was published, the previous output is unchanged"
NEW = "after publishing (the new output is in place)"


def write_job(folder: Path, output: str, rows: int, dated: bool = False) -> str:
    """A job of `rows` ids, 2 shards, seed 5; `dated`: four days of `{date}.csv` into
    OUTPUT/{date} (the signal and stress tests)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    if dated:
        for day in range(1, 5):
            write_rows(folder / f"2026-11-0{day}.csv", rows + day)
        paths, output = ["{date}.csv"], output + "/{date}"
    else:
        write_rows(folder / "ids.csv", rows)
        paths = ["ids.csv"]
    job = folder / "job.yaml"
    job.write_text(json.dumps({"schema": "schema.yaml", "output": output, "shards": 2,
                               "shuffle": {"seed": 5},
                               "sources": {"train": {"format": "csv", "paths": paths}}}))
    return str(job)


def write_rows(path: Path, rows: int) -> None:
    path.write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n" for i in range(rows)))


# the shard the heal tests damage
SHARD = "train-00001-of-00002.tfrecord"


def ids_job(folder: Path, output: str, rows: int = 300, **extra: object) -> str:
    """A job of `rows` ids in one CSV, 2 shards, no shuffle seed (the heal tests)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    (folder / "ids.csv").write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n"
                                                         for i in range(rows)))
    job = folder / "job.yaml"
    job.write_text(json.dumps({"schema": "schema.yaml", "output": output, "shards": 2,
                               **extra, "sources": {"train": {"format": "csv",
                                                              "paths": ["ids.csv"]}}}))
    return str(job)


def csv_job(folder: Path, output: str, source: str, **extra: object) -> str:
    """A job reading the CSV `source` (written by the caller), 2 shards, seed 5."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    job = folder / "job.yaml"
    job.write_text(json.dumps({"schema": "schema.yaml", "output": output, "shards": 2,
                               "shuffle": {"seed": 5}, **extra,
                               "sources": {"train": {"format": "csv", "paths": [source]}}}))
    return str(job)


def paused_run(args: list[str], phase: str, pause: Path,
               env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A run stopped at `phase` (returns once it waits there)."""
    pause.mkdir(exist_ok=True)
    e = dict(env or os.environ)
    e.update(ETL_PAUSE_AT=phase, ETL_PAUSE_DIR=str(pause))
    proc = subprocess.Popen([sys.executable, RUN, *args], cwd=ROOT, env=e, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reached = pause / (phase.replace(":", "-") + ".reached")
    deadline = time.monotonic() + 120
    while not reached.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"never paused at {phase}: {proc.communicate(timeout=30)}")
        time.sleep(0.02)
    return proc


def resume(proc: subprocess.Popen[str], phase: str, pause: Path) -> str:
    (pause / (phase.replace(":", "-") + ".go")).write_text("")
    return proc.communicate(timeout=120)[1]


IRIS = Path(ROOT, "examples", "data", "daily", "2026-11-19", "iris.csv")
CHECKS_YAML = """\
checks:
  block:
    records: {min: 5}
    features:
      label: {drift: 0.1, distinct: {min: 2}}
  warn:
    features:
      features: {drift: 0.9}
"""


def write_iris(path: Path, collapse: bool = False) -> None:
    """The bundled iris day; `collapse`: every label Iris-setosa (one class)."""
    with open(IRIS, newline="") as fh:
        data = list(csv.reader(fh))
    if collapse:
        data = [data[0]] + [r[:-1] + ["Iris-setosa"] for r in data[1:]]
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(data)


def iris_job(folder: Path, output: str) -> Path:
    """The iris day split 80/20 with CHECKS_YAML's checks (the quarantine tests)."""
    write_iris(folder / "iris.csv")
    job = folder / "job.yaml"
    job.write_text(f"schema: {ROOT}/schemas/iris.yaml\n"
                   "source: {format: csv, paths: [iris.csv]}\n"
                   "split: {train: 0.8, test: 0.2}\n"
                   f"output: {output}\nshuffle: {{seed: 7}}\nshards: 2\n" + CHECKS_YAML)
    return job
