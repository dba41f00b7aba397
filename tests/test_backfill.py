"""Backfills through `run_pipeline.py run JOB --from D1 --to D2` (subprocesses): every span
its own output and manifest, oldest first (--reverse: newest first), one line per span, going
on after a failed span and exiting with the worst code; --dry-run runs nothing; --only picks
what to reprocess; --parallel gives the same shards as one at a time; `history` prints the
runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest

from cli.ranges import worst
from etl.base.errors import EXIT_BAD_INPUT, EXIT_CONFIG, EXIT_LOCKED, EXIT_OK, EXIT_OTHER, EXIT_STORAGE
from tests.helpers import IDS_SCHEMA, ROOT, cli

DAYS = ["2026-11-19", "2026-11-20", "2026-11-21", "2026-11-22"]
LINE = re.compile(r"^(\d{4}-\d{2}-\d{2})  (ok|skipped|failed \(exit \d\))\s+(.*)$")


def write_day(base: str, day: str, rows: int = 40, bad: int = 0) -> str:
    """Day `day`'s partition: ids unique to the day (day number * 1000 + i); `bad` rows
    with a missing field."""
    folder = os.path.join(base, "raw", day)
    os.makedirs(folder, exist_ok=True)
    n = int(day[-2:])
    path = os.path.join(folder, "part.csv")
    with open(path, "w") as fh:
        fh.write("id,a,b\n")
        fh.write("".join(f"{n * 1000 + i},{i * 0.5},{-i}\n" for i in range(rows)))
        fh.write("".join(f"{n * 1000 + rows + i},{i}\n" for i in range(bad)))
    return path


def make_job(base: str, days: list[str], **extra: Any) -> str:
    """A dated job in base/jobs/: raw/{date}/*.csv -> out/{date}, seeded by the span."""
    os.makedirs(os.path.join(base, "jobs"), exist_ok=True)
    with open(os.path.join(base, "schema.yaml"), "w") as fh:
        fh.write(IDS_SCHEMA)
    for day in days:
        write_day(base, day)
    doc = {"schema": "../schema.yaml",
           "source": {"format": "csv", "paths": ["../raw/{date}/*.csv"]},
           "split": {"train": 0.75, "test": 0.25},
           "output": "../out/{date}", "shuffle": {"seed": "{span}"}, "shards": 2, **extra}
    path = os.path.join(base, "jobs", "daily.yaml")
    with open(path, "w") as fh:
        json.dump(doc, fh)  # JSON is YAML
    return path


def span_lines(stdout: str) -> list[tuple[str, str, str]]:
    """(span, status, rest) of every span line, in printed order."""
    return [m.groups() for m in map(LINE.match, stdout.splitlines()) if m]


def manifest(out: str) -> dict[str, Any]:
    with open(os.path.join(out, "manifest.json")) as fh:
        return json.load(fh)


def shard_sha256(out: str) -> dict[str, str]:
    """Every shard file's sha256, computed from its bytes (and checked against the manifest)."""
    found = {}
    for split in manifest(out)["splits"].values():
        for shard in split["shards"]:
            with open(os.path.join(out, shard["path"]), "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            assert digest == shard["sha256"]
            found[shard["path"]] = digest
    return found


def success_ns(out: str) -> int:
    return os.stat(os.path.join(out, "_SUCCESS")).st_mtime_ns


def listing(root: str) -> dict[str, str]:
    out = {}
    for base, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(base, f), "rb") as fh:
                out[os.path.relpath(os.path.join(base, f), root)] = hashlib.sha256(
                    fh.read()).hexdigest()
    return out


def test_worst_code_order() -> None:
    # retryable failures rank below those that need a person; unknown is worst of all
    assert worst([]) == EXIT_OK
    assert worst([EXIT_OK, EXIT_OK]) == EXIT_OK
    assert worst([EXIT_OK, EXIT_LOCKED]) == EXIT_LOCKED
    assert worst([EXIT_LOCKED, EXIT_STORAGE]) == EXIT_STORAGE
    assert worst([EXIT_STORAGE, EXIT_BAD_INPUT, EXIT_LOCKED]) == EXIT_BAD_INPUT
    assert worst([EXIT_BAD_INPUT, EXIT_CONFIG]) == EXIT_CONFIG
    assert worst([EXIT_CONFIG, EXIT_OTHER, EXIT_STORAGE]) == EXIT_OTHER
    assert worst([EXIT_OK, 130]) == EXIT_OTHER  # a code we do not know: as bad as 1


@pytest.mark.slow
def test_three_day_backfill_oldest_first_then_skipped_then_reverse(tmp_path: Any) -> None:
    base = str(tmp_path)
    job = make_job(base, DAYS[:3])
    outs = {d: os.path.join(base, "out", d) for d in DAYS[:3]}
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[2])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = span_lines(r.stdout)
    assert [(d, s) for d, s, _ in lines] == [(d, "ok") for d in DAYS[:3]]
    for (day, _, rest) in lines:
        assert re.fullmatch(rf"\s*40 records  {re.escape(outs[day])}  \d+\.\ds", rest), rest
    assert r.stdout.splitlines()[-1] == "3 span(s): 3 ok, 0 skipped, 0 failed (exit 0)"
    assert len(r.stdout.splitlines()) == 4
    for day, out in outs.items():  # each span: its own output, manifest and inputs
        m = manifest(out)
        assert sum(s["num_records"] for s in m["splits"].values()) == 40
        assert [os.path.relpath(i["path"], base) for i in m["inputs"]] == \
            [os.path.join("raw", day, "part.csv")]
    assert len({json.dumps(shard_sha256(o), sort_keys=True) for o in outs.values()}) == 3
    published = [success_ns(outs[d]) for d in DAYS[:3]]
    assert published == sorted(published)  # oldest first
    # again: all three current, each skipped (how fast is benchmarks', not a test's, to say)
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[2], "--reverse")
    assert r.returncode == 0, r.stderr
    assert [(d, s) for d, s, _ in span_lines(r.stdout)] == \
        [(d, "skipped") for d in reversed(DAYS[:3])]
    assert all(rest.startswith("already published and current")
               for _, _, rest in span_lines(r.stdout))
    assert [success_ns(outs[d]) for d in DAYS[:3]] == published  # untouched
    # --reverse --force: rebuilt newest first, the same shards
    before = {d: shard_sha256(o) for d, o in outs.items()}
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[2], "--reverse", "--force")
    assert r.returncode == 0, r.stderr
    assert [(d, s) for d, s, _ in span_lines(r.stdout)] == [(d, "ok") for d in reversed(DAYS[:3])]
    again = [success_ns(outs[d]) for d in DAYS[:3]]
    assert again == sorted(again, reverse=True) and min(again) > max(published)
    assert {d: shard_sha256(o) for d, o in outs.items()} == before
    # the history, through the CLI: 9 runs of 3 spans
    r = cli("history", os.path.join(base, "out"))
    assert r.returncode == 0, r.stderr
    rows = [line.split()[:2] for line in r.stdout.splitlines() if line[:4] == "2026"]
    assert rows == ([[d, "ok"] for d in DAYS[:3]] + [[d, "skipped"] for d in reversed(DAYS[:3])]
                    + [[d, "ok"] for d in reversed(DAYS[:3])])
    r = cli("history", os.path.join(base, "nothing-here"))
    assert (r.returncode, r.stdout.strip()) == (0, f"no runs recorded in {base}/nothing-here")


@pytest.mark.slow
def test_failed_spans_do_not_stop_the_range_worst_code_and_only_failed(tmp_path: Any) -> None:
    base = str(tmp_path)
    job = make_job(base, DAYS[:3], max_bad_fraction=0.1)
    write_day(base, DAYS[1], rows=20, bad=20)  # half its rows bad: over the threshold
    outs = {d: os.path.join(base, "out", d) for d in DAYS}
    # day 4 has no data: exit 2 outranks day 2's exit 3
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[3])
    assert r.returncode == 2, r.stdout + r.stderr
    lines = span_lines(r.stdout)
    assert [(d, s) for d, s, _ in lines] == [(DAYS[0], "ok"), (DAYS[1], "failed (exit 3)"),
                                             (DAYS[2], "ok"), (DAYS[3], "failed (exit 2)")]
    assert "20 of 40 records rejected" in lines[1][2] or "rejected" in lines[1][2], lines[1]
    assert "\n" not in lines[1][2]
    assert lines[3][2].startswith(f"no input files for span {DAYS[3]}: source.paths "
                                  f"{os.path.join(base, 'raw', DAYS[3], '*.csv')} matches no file")
    assert r.stdout.splitlines()[-1] == "4 span(s): 2 ok, 0 skipped, 2 failed (exit 2)"
    for day in (DAYS[0], DAYS[2]):
        assert os.path.exists(os.path.join(outs[day], "_SUCCESS"))
    for day in (DAYS[1], DAYS[3]):  # nothing published for the failed spans
        assert not os.path.exists(outs[day])
    # without the missing day, the range exits with day 2's bad input
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[2])
    assert r.returncode == 3, r.stdout + r.stderr
    assert [s for _, s, _ in span_lines(r.stdout)] == ["skipped", "failed (exit 3)", "skipped"]
    # day 2 repaired: --only failed runs day 2 (and day 4, skipped for want of data)
    write_day(base, DAYS[1])
    published = success_ns(outs[DAYS[0]])
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[3], "--only", "failed",
            "--allow-missing")
    assert r.returncode == 0, r.stdout + r.stderr
    assert span_lines(r.stdout)[0][1:] == ("skipped", "its last run did not fail; --only failed")
    assert [(d, s) for d, s, _ in span_lines(r.stdout)] == [
        (DAYS[0], "skipped"), (DAYS[1], "ok"), (DAYS[2], "skipped"), (DAYS[3], "skipped")]
    assert span_lines(r.stdout)[3][2] == f"no input files for span {DAYS[3]}"
    assert sum(s["num_records"] for s in manifest(outs[DAYS[1]])["splits"].values()) == 40
    assert success_ns(outs[DAYS[0]]) == published
    assert not os.path.exists(outs[DAYS[3]])


@pytest.mark.slow
def test_dry_run_runs_nothing_and_says_why(tmp_path: Any) -> None:
    base = str(tmp_path)
    job = make_job(base, DAYS[:3])
    assert cli("run", job, "--date", DAYS[0]).returncode == 0
    assert cli("run", job, "--date", DAYS[2]).returncode == 0
    with open(os.path.join(base, "raw", DAYS[2], "part.csv"), "r+b") as fh:
        fh.seek(-3, os.SEEK_END)  # other bytes, same size
        fh.write(b"-9\n")
    before = listing(base)
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[3], "--dry-run")
    assert r.returncode == 0, r.stderr
    out = {d: os.path.join(base, "out", d) for d in DAYS}
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{DAYS[0]}  would skip  already published and current")
    assert lines[1] == f"{DAYS[1]}  would run   {out[DAYS[1]]}  (not published yet (no _SUCCESS))" \
        or lines[1].startswith(f"{DAYS[1]}  would run   {out[DAYS[1]]}  (not published yet")
    assert lines[2].startswith(f"{DAYS[2]}  would run   {out[DAYS[2]]}  (") and "changed" in lines[2]
    assert lines[3].startswith(f"{DAYS[3]}  would fail (exit 2)  no input files for span {DAYS[3]}")
    assert lines[4] == "dry run: 2 would run, 1 would be skipped, 1 would fail; nothing was run"
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[1], "--dry-run", "--force",
            "--only", "missing")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == [
        f"{DAYS[0]}  would skip  published (_SUCCESS present); --only missing",
        f"{DAYS[1]}  would run   {out[DAYS[1]]}  (--force)"]
    assert listing(base) == before  # nothing written, not even the history


@pytest.mark.slow
def test_only_missing_reruns_only_the_deleted_span(tmp_path: Any) -> None:
    base = str(tmp_path)
    job = make_job(base, DAYS[:3])
    assert cli("run", job, "--from", DAYS[0], "--to", DAYS[2]).returncode == 0
    outs = {d: os.path.join(base, "out", d) for d in DAYS[:3]}
    shards = shard_sha256(outs[DAYS[1]])
    kept = {d: success_ns(outs[d]) for d in (DAYS[0], DAYS[2])}
    shutil.rmtree(outs[DAYS[1]])  # made by this test's run
    r = cli("run", job, "--from", DAYS[0], "--to", DAYS[2], "--only", "missing")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [(d, s, rest.split("  ")[0].strip()) for d, s, rest in span_lines(r.stdout)] == [
        (DAYS[0], "skipped", "published (_SUCCESS present); --only missing"),
        (DAYS[1], "ok", "40 records"),
        (DAYS[2], "skipped", "published (_SUCCESS present); --only missing")]
    assert shard_sha256(outs[DAYS[1]]) == shards  # rebuilt byte for byte
    assert {d: success_ns(outs[d]) for d in (DAYS[0], DAYS[2])} == kept


@pytest.mark.slow
def test_parallel_gives_the_same_shards(tmp_path: Any) -> None:
    base = str(tmp_path)
    job = make_job(base, DAYS)
    seconds = {}
    for n in (1, 2):
        started = time.time()
        r = cli("run", job, "--from", DAYS[0], "--to", DAYS[3], "--parallel", str(n),
                "--output", os.path.join(base, f"p{n}", "{date}"))
        seconds[n] = time.time() - started
        assert r.returncode == 0, r.stdout + r.stderr
        assert [(d, s) for d, s, _ in span_lines(r.stdout)] == [(d, "ok") for d in DAYS]
    for day in DAYS:
        one, two = (shard_sha256(os.path.join(base, f"p{n}", day)) for n in (1, 2))
        assert one == two and len(one) == 4
    print(f"4 spans: --parallel 1 {seconds[1]:.1f}s, --parallel 2 {seconds[2]:.1f}s")


@pytest.mark.slow
def test_a_current_span_is_skipped_without_importing_beam(tmp_path: Any) -> None:
    """A daily rerun that has nothing to do decides so before importing Beam (~1 s of
    start-up): the CLI's one-span path, checked in a fresh interpreter."""
    job = make_job(str(tmp_path), ["2026-11-20"])
    assert cli("run", job, "--date", "2026-11-20").returncode == 0
    code = ("import sys; from cli.one_span import run_keywords as run_and_report; "
            f"rc = run_and_report({job!r}, None, ['--runner=FnApiRunner'], sample=False, "
            "span=__import__('etl.job.spans', fromlist=['x']).parse_date('2026-11-20')); "
            "print(rc, 'apache_beam' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"Skipped 2026-11-20 ({tmp_path}/out/2026-11-20): already published and current "
        "(inputs, schema and job unchanged)", "0 False"]
    history = [json.loads(x) for x in (tmp_path / "out" / "_runs.jsonl").read_text().splitlines()]
    assert [h["status"] for h in history] == ["ok", "skipped"]
    assert history[1]["run_key"] == history[0]["run_key"] and history[1]["exit_code"] == 0
