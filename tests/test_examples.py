"""The bundled jobs on real-shaped data, and the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

import etl
from cli.run import run_job
from etl.job.config import load_job
from etl.output.manifest import verify

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name: str, tmp_path) -> str:
    job = load_job(os.path.join(ROOT, "examples", f"{name}.yaml"), output=str(tmp_path / name))
    out = run_job(job, ["--runner=FnApiRunner"]).output
    verify(out)
    return out


def records(out: str, split: str) -> dict[str, np.ndarray]:
    batches = list(etl.make_dataset(out, split=split, batch_size=512, shuffle_buffer=0))
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


def test_digits_idx_train_test_exact(tmp_path) -> None:
    from sklearn.datasets import load_digits

    d = load_digits()
    out = run_example("demo", tmp_path)
    for split, sl in (("train", slice(0, 1500)), ("test", slice(1500, None))):
        got = records(out, split)
        assert got["image"].shape[1:] == (8, 8, 1) and got["image"].dtype == np.uint8
        want = Counter((int(t), img.astype(np.uint8).tobytes())
                       for img, t in zip(d.images[sl], d.target[sl], strict=True))
        assert Counter((int(t), img[..., 0].tobytes())
                       for img, t in zip(got["image"], got["label"], strict=True)) == want


def test_iris_csv_vocabulary_labels_exact(tmp_path) -> None:
    from sklearn.datasets import load_iris

    d = load_iris()
    out = run_example("iris", tmp_path)
    got = [records(out, s) for s in ("train", "test")]
    rows = Counter((int(lab), tuple(np.round(f, 1).tolist()))
                   for g in got for f, lab in zip(g["features"], g["label"], strict=True))
    want = Counter((int(t), tuple(np.round(f.astype(np.float32), 1).tolist()))
                   for f, t in zip(d.data, d.target, strict=True))
    assert rows == want
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert m["splits"]["train"]["num_records"] + m["splits"]["test"]["num_records"] == 150


def test_jsonl_sequence_example_job_exact(tmp_path) -> None:
    out = run_example("sentences", tmp_path)
    want = {}
    with open(os.path.join(ROOT, "examples", "data", "sentences.jsonl")) as fh:
        for line in fh:
            r = json.loads(line)
            want[r["id"]] = (r["length"], r["tokens"])
    got = {}
    for split in ("train", "validation"):
        for b in etl.make_dataset(out, split=split, batch_size=100, shuffle_buffer=0):
            for i, n, t in zip(b["id"].numpy(), b["length"].numpy(), b["tokens"].to_list(),
                               strict=True):
                got[int(i)] = (int(n), t)
    assert got == want


def _cli(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, os.path.join(ROOT, "run_pipeline.py"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_cli_demo_default_runs_and_prints_summary(tmp_path) -> None:
    proc = _cli(cwd=str(tmp_path))  # no arguments: the bundled demo into ./out/demo
    assert proc.returncode == 0, proc.stderr
    assert "train             1,500 records in 4 shard(s)" in proc.stdout
    assert "test                297 records in 4 shard(s)" in proc.stdout
    assert "label: int64 [] =" in proc.stdout
    assert os.path.exists(tmp_path / "out" / "demo" / "_SUCCESS")
    proc = _cli("verify", str(tmp_path / "out" / "demo"))
    assert proc.returncode == 0 and "1797 records" in proc.stdout


@pytest.mark.parametrize("schema,expected", [
    ("mnist", "FixedLenFeature(shape=[], dtype=tf.string"),
    ("iris", "FixedLenFeature(shape=[4], dtype=tf.float32"),
    ("sentences", "FixedLenSequenceFeature(shape=[], dtype=tf.int64"),
])
def test_cli_spec(schema: str, expected: str) -> None:
    proc = _cli("spec", os.path.join("schemas", f"{schema}.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout


def test_cli_reports_bad_job_without_traceback(tmp_path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("schema: nope.yaml\nsources: {train: {format: csv, paths: [x.csv]}}\n"
                   "output: out\n")
    proc = _cli("run", str(job))
    assert proc.returncode == 2  # bad configuration
    assert "error:" in proc.stderr and "nope.yaml" in proc.stderr
    assert "Traceback" not in proc.stderr
