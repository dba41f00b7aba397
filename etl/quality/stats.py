"""The statistics the checks read: report-shaped documents (etl.stats.document) of the staged
dataset and of the previous published span.

`staged_stats` is the one place that gets a staged dataset's statistics: the `stats.json` the
conversion gathered in its own pass (etl.stats.dataset.load_stats: no second read
of the data); for a staged dataset without one, it reads the staged shards once with the
report's accumulators (etl.stats.accumulators), exactly as `report` reads a published output.
Either way the numbers a check measures are the report's numbers (the same document shape).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from etl.base.errors import EtlError, ForeignEntries
from etl.contract.schema import load_schema
from etl.job.config import JobConfig, job_from_dict
from etl.job.spans import Span, parse_date, placeholders
from etl.output.layout import SCHEMA_FILE, SUCCESS
from etl.output.manifest import load_manifest, verify
from etl.stats.dataset import load_stats
from etl.stats.document import build, current_report, gather, split_sizes
from etl.storage import fs

LOOK_BACK_DAYS = 31  # how far back a dated job looks for its last published span


def staged_stats(staging: str, output: str) -> tuple[dict[str, Any],
                                                     dict[tuple[str, str], list[np.ndarray]]]:
    """(report-shaped statistics, sample images) of the dataset staged in `staging` (its
    manifest written, no `_SUCCESS` yet); `output` is what the report names. From its
    stats.json when the run gathered one, else read from its shards (etl.stats.document.gather)."""
    manifest = load_manifest(staging)
    schema = load_schema(fs.join(staging, SCHEMA_FILE))
    splits = split_sizes(manifest)
    features, _, samples = gather(staging, manifest, schema)
    report = {"output": output, "dataset_dir": staging,
              "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "run_id": manifest.get("run_id"),
              "schema": {"name": schema.name, "kind": schema.kind,
                         "sha256": manifest.get("schema_sha256")},
              "notes": [], "splits": splits, "features": features}
    return report, samples


def previous_output(job: JobConfig) -> str | None:
    """What drift compares with: for a dated job (a placeholder in its output) the newest
    published span before this one (looking back LOOK_BACK_DAYS days: a blocked day is
    skipped over), else the output this run replaces; None when nothing is published. Spans
    of a run given `--output` are looked for under that template too. (`baseline` is what
    the checks use: the same, but only an intact output.)"""
    return next(_published_candidates(job), None)


def _published_candidates(job: JobConfig) -> Iterator[str]:
    """The published outputs drift may compare with, newest first."""
    template = job.output_override or job.raw.get("output")
    dated = job.span is not None and isinstance(template, str) and bool(placeholders(template))
    if not dated:
        if _published(job.output):
            yield job.output
        return
    assert job.span is not None
    day = parse_date(job.span).date
    for back in range(1, LOOK_BACK_DAYS + 1):
        before = Span(day - dt.timedelta(days=back))
        out = job_from_dict(job.raw, job.path, job.base_dir, job.output_override, before).output
        if _published(out):
            yield out


@dataclass
class Baseline:
    """What drift compares with: `output` and its statistics (None, None: nothing), and
    `note`, one line when a damaged output was passed over ("" otherwise)."""

    output: str | None
    stats: dict[str, Any] | None
    note: str = ""


def baseline(job: JobConfig) -> Baseline:
    """The previous published output that is intact, with its statistics. Each candidate
    (previous_output's, newest first) is checked as the skip rule checks an output
    (etl.output.manifest.verify, quick: its files as published, one stat each) and its
    statistics must load (a bounded, listed stats.json, or its shards): a damaged one is no
    baseline. A dated job then compares with the newest intact span before it; a job without
    dates (its previous output is the one this run replaces) compares with nothing. Either
    way `note` says which output was passed over and why, in one line."""
    damaged = ""
    for out in _published_candidates(job):
        try:
            verify(out, quick=True)
        except ForeignEntries:
            pass  # a file beside the data: the data itself is whole
        except (EtlError, OSError, ValueError, KeyError, TypeError) as e:
            damaged = damaged or f"{out} is damaged ({fs.first_line(e)})"
            continue
        try:
            stats = published_stats(out)
        except (EtlError, OSError, ValueError, KeyError, TypeError) as e:
            damaged = damaged or f"{out} is damaged ({fs.first_line(e)})"
            continue
        note = f"drift compared with {out}: the previous span's output {damaged}" if damaged else ""
        return Baseline(out, stats, note)
    note = (f"drift and records.max_change not checked: the previous output {damaged}, no "
            "baseline" if damaged else "")
    return Baseline(None, None, note)


def published_stats(output: str) -> dict[str, Any]:
    """The statistics of a published output: its stats.json, else its own current
    report.json, else one read of its shards (etl.stats.document.build)."""
    gathered = load_stats(output)
    if gathered is not None:
        return gathered.doc
    doc = current_report(output)
    if doc is not None:
        return doc
    report, _ = build(output, keep_samples=False)
    return report


def _published(output: str) -> bool:
    try:
        return fs.exists(fs.join(output, SUCCESS))
    except OSError:
        return False
