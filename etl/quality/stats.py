"""The statistics the checks read: report-shaped documents (etl.tools.report) of the staged
dataset and of the previous published span.

`staged_stats` is the one place that gets a staged dataset's statistics: the `stats.json` the
conversion gathered in its own pass (etl.tools.report.dataset_stats.load_stats: no second read
of the data); for a staged dataset without one, it reads the staged shards once with the
report's accumulators (etl.tools.report.stats), exactly as `report` reads a published output.
Either way the numbers a check measures are the report's numbers (the same document shape).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from etl.contract.schema import load_schema
from etl.job.config import JobConfig, job_from_dict
from etl.job.spans import Span, parse_date, placeholders
from etl.output.layout import SCHEMA_FILE, SUCCESS
from etl.output.manifest import load_manifest
from etl.storage import fs
from etl.tools.report import build, current_report, gather, split_sizes
from etl.tools.report.dataset_stats import load_stats

LOOK_BACK_DAYS = 31  # how far back a dated job looks for its last published span


def staged_stats(staging: str, output: str) -> tuple[dict[str, Any],
                                                     dict[tuple[str, str], list[np.ndarray]]]:
    """(report-shaped statistics, sample images) of the dataset staged in `staging` (its
    manifest written, no `_SUCCESS` yet); `output` is what the report names. From its
    stats.json when the run gathered one, else read from its shards (etl.tools.report.gather)."""
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
    of a run given `--output` are looked for under that template too."""
    template = job.output_override or job.raw.get("output")
    dated = job.span is not None and isinstance(template, str) and bool(placeholders(template))
    if not dated:
        return job.output if _published(job.output) else None
    assert job.span is not None
    day = parse_date(job.span).date
    for back in range(1, LOOK_BACK_DAYS + 1):
        before = Span(day - dt.timedelta(days=back))
        out = job_from_dict(job.raw, job.path, job.base_dir, job.output_override, before).output
        if _published(out):
            return out
    return None


def published_stats(output: str) -> dict[str, Any]:
    """The statistics of a published output: its stats.json, else its own current
    report.json, else one read of its shards (etl.tools.report.build)."""
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
