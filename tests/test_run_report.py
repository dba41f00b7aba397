"""`run JOB --report`: a scheduled run's dataset report, with drift against the previous span.

Dated iris spans as in examples/daily.yaml (the bundled 2026-11-19..21 partitions copied into
tmp); on 2026-11-20 every Iris-versicolor row is dropped, so that day's labels drift. Covered:
the first span has no previous output (one line, no drift block); the next one compares with
the previous span's output (the exact path in the JSON, the flagged label, the L-infinity
value recomputed from both reports' exact counts); a rerun skipped as current remakes a
missing report and leaves a current one untouched (mtime); a report failing after publish
(the previous span's shards emptied: exit 3) says the data was published, verify passes, and
the retry makes only the report; ranges print the report on a second line per span; a job
without a dated output compares with nothing.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

DAILY = Path(ROOT, "examples", "data", "daily")
D0, D1, D2, D3 = "2026-11-18", "2026-11-19", "2026-11-20", "2026-11-21"
LABELS = ["Iris-setosa", "Iris-versicolor", "Iris-virginica"]
CURRENT = "already published and current (inputs, schema and job unchanged)"


def daily_job(tmp_path: Path, output: str = "out/{date}") -> Path:
    """examples/daily.yaml over a copy of its data; 2026-11-20 without Iris-versicolor."""
    shutil.copytree(DAILY, tmp_path / "data")
    day = tmp_path / "data" / D2 / "iris.csv"
    rows = day.read_text().splitlines(keepends=True)
    day.write_text("".join(r for r in rows if "Iris-versicolor" not in r))
    job = tmp_path / "job.yaml"
    job.write_text(f"schema: {ROOT}/schemas/iris.yaml\n"
                   'source: {format: csv, paths: ["data/{date}/iris.csv"]}\n'
                   "split: {train: 0.8, test: 0.2}\n"
                   f'output: "{output}"\n'
                   "shuffle: {seed: 7}\nshards: 2\n")
    return job


def source_labels(tmp_path: Path, day: str) -> dict[int, int]:
    with open(tmp_path / "data" / day / "iris.csv", newline="") as fh:
        species = [row["species"] for row in csv.DictReader(fh)]
    return {LABELS.index(s): species.count(s) for s in LABELS if s in species}


def label_counts(report: dict, split: str) -> dict[int, int]:
    return {int(v): int(n) for v, n in report["features"]["label"]["splits"][split]["value_counts"]}


def linf(a: dict[int, int], b: dict[int, int]) -> float:
    ta, tb = sum(a.values()), sum(b.values())
    return round(max(abs(a.get(k, 0) / ta - b.get(k, 0) / tb) for k in set(a) | set(b)), 6)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_span_report_drift_against_the_previous_span_and_reruns(tmp_path: Path) -> None:
    job = daily_job(tmp_path)
    out = tmp_path / "out"
    first = cli("run", str(job), "--date", D1, "--report")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[-2:] == [
        f"Report written: {out / D1}/report.json, {out / D1}/report.html",
        f"no previous span output to compare with ({out / D0} is not published): report "
        "without drift"]
    assert first.stderr == ""  # TensorFlow's start-up lines stay hidden
    r1 = read_json(out / D1 / "report.json")
    assert "drift" not in r1
    assert r1["run_id"] == read_json(out / D1 / "manifest.json")["run_id"]
    assert {s: v["num_records"] for s, v in r1["splits"].items()} == {"train": 42, "test": 8}

    second = cli("run", str(job), "--date", D2, "--report")
    assert second.returncode == 0, second.stderr
    r2 = read_json(out / D2 / "report.json")
    drift = r2["drift"]
    assert drift["against"] == str(out / D1)
    # exact against the sources: day 2 has no versicolor, day 1 all three classes
    totals = [{k: sum(label_counts(r, s).get(k, 0) for s in r["splits"]) for k in range(3)}
              for r in (r1, r2)]
    assert totals[0] == source_labels(tmp_path, D1) == {0: 17, 1: 17, 2: 16}
    assert {k: v for k, v in totals[1].items() if v} == source_labels(tmp_path, D2) == {0: 17, 2: 17}
    assert drift["features"]["label"]["flagged"] is True
    for split in ("train", "test"):
        expected = linf(label_counts(r2, split), label_counts(r1, split))
        assert drift["features"]["label"]["splits"][split] == {
            "metric": "linf", "value": expected, "threshold": 0.1, "flagged": expected > 0.1}
    train_linf = drift["features"]["label"]["splits"]["train"]["value"]
    assert train_linf > 0.3  # a third of the classes gone
    lines = second.stdout.splitlines()
    at = lines.index(f"Report written: {out / D2}/report.json, {out / D2}/report.html")
    assert lines[at + 1] == (f"drift against {out / D1} (previous span; its report.json): "
                             f"{len(drift['findings'])} finding(s)")
    assert lines[at + 2:] == [f"  - {f}" for f in drift["findings"]]
    assert f"  - feature 'label', split 'train': linf {train_linf:.3f} > 0.1" in lines

    # a scheduler's retry of a published day without its report: only the report is made
    (out / D2 / "report.json").unlink()
    (out / D2 / "report.html").unlink()
    again = cli("run", str(job), "--date", D2, "--report")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[:3] == [
        f"Skipped {D2} ({out / D2}): {CURRENT}",
        f"Report was missing or stale, made again: {out / D2}/report.json, {out / D2}/report.html",
        f"drift against {out / D1} (previous span; its report.json): "
        f"{len(drift['findings'])} finding(s)"]
    remade = read_json(out / D2 / "report.json")
    assert remade["run_id"] == r2["run_id"] and remade["drift"]["findings"] == drift["findings"]

    # a current report is left as it is
    before = {n: (out / D2 / n).stat().st_mtime_ns for n in ("report.json", "report.html")}
    kept = cli("run", str(job), "--date", D2, "--report")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.splitlines() == [f"Skipped {D2} ({out / D2}): {CURRENT}",
                                        f"Report {out / D2}/report.json is current: left as it is"]
    assert {n: (out / D2 / n).stat().st_mtime_ns for n in before} == before


def test_report_failure_after_publish_keeps_the_data_and_a_retry_makes_only_the_report(
        tmp_path: Path) -> None:
    job = daily_job(tmp_path)
    out = tmp_path / "out"
    assert cli("run", str(job), "--date", D1).returncode == 0  # no report of its own
    shards = sorted((out / D1).glob("train-*.tfrecord"))
    saved = {p: p.read_bytes() for p in shards}
    for p in shards:
        p.write_bytes(b"")  # the previous span's train split can no longer be read

    failed = cli("run", str(job), "--date", D2, "--report")
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert failed.stderr.splitlines()[-1] == (
        f"error: the data of span {D2} WAS published to {out / D2}; only its report failed "
        f"(rerun to make just the report): {out / D1}: split 'train' holds 0 records, its "
        "manifest says 42 (run verify)")
    assert f"Wrote {out / D2} (span {D2})" in failed.stdout
    assert not (out / D2 / "report.json").exists() and not (out / D2 / "report.html").exists()
    verified = cli("verify", str(out / D2))
    assert (verified.returncode, verified.stdout.strip()) == (
        0, f"OK {out / D2}: 34 records train=27, test=7")

    for p, data in saved.items():
        p.write_bytes(data)
    retry = cli("run", str(job), "--date", D2, "--report")
    assert retry.returncode == 0, retry.stderr
    lines = retry.stdout.splitlines()
    assert lines[:2] == [
        f"Skipped {D2} ({out / D2}): {CURRENT}",
        f"Report was missing or stale, made again: {out / D2}/report.json, {out / D2}/report.html"]
    assert lines[2].startswith(f"drift against {out / D1} (previous span; read again): ")
    assert read_json(out / D2 / "report.json")["drift"]["against"] == str(out / D1)


def test_range_reports_each_span_against_the_one_before(tmp_path: Path) -> None:
    job = daily_job(tmp_path)
    out = tmp_path / "out"
    ranged = cli("run", str(job), "--from", D1, "--to", D2, "--report")
    assert ranged.returncode == 0, ranged.stderr
    lines = ranged.stdout.splitlines()
    findings = read_json(out / D2 / "report.json")["drift"]["findings"]
    assert lines[0].startswith(f"{D1}  ok              50 records  {out / D1}  ")
    assert lines[1] == (f"{'':<12}report {out / D1}/report.json; no previous span output to "
                        f"compare with ({out / D0} is not published): report without drift")
    assert lines[2].startswith(f"{D2}  ok              34 records  {out / D2}  ")
    assert lines[3] == (f"{'':<12}report {out / D2}/report.json; drift against {out / D1} "
                        f"(previous span; its report.json): {len(findings)} finding(s)")
    assert lines[4:] == ["2 span(s): 2 ok, 0 skipped, 0 failed (exit 0)"]

    # newest first: the previous span is not there yet when a span's report is made
    rev = tmp_path / "rev"
    reverse = cli("run", str(job), "--from", D1, "--to", D2, "--report", "--reverse",
                  "--output", f"{rev}/{{date}}")
    assert reverse.returncode == 0, reverse.stderr
    assert [ln.strip() for ln in reverse.stdout.splitlines()[1::2][:2]] == [
        f"report {rev / D2}/report.json; no previous span output to compare with ({rev / D1} is "
        "not published): report without drift",
        f"report {rev / D1}/report.json; no previous span output to compare with ({rev / D0} is "
        "not published): report without drift"]
    assert "drift" not in read_json(rev / D2 / "report.json")


def test_undated_output_is_reported_without_a_comparison(tmp_path: Path) -> None:
    job = daily_job(tmp_path, output="out/fixed")  # dated inputs, one fixed output
    out = tmp_path / "out" / "fixed"
    done = cli("run", str(job), "--date", D3, "--report")
    assert done.returncode == 0, done.stderr
    # no line about a previous span or drift after the report's
    assert done.stdout.splitlines()[-2:] == [
        f"Read it back: etl.make_dataset({str(out)!r}, split='train')",
        f"Report written: {out}/report.json, {out}/report.html"]
    report = read_json(out / "report.json")
    assert "drift" not in report
    assert report["output"] == str(out)
