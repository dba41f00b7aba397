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

from etl.base.errors import BadInputError, StorageError
from etl.contract.images import is_image
from etl.contract.schema import load_schema
from etl.formats.shards import read_shard
from etl.job.config import JobConfig, job_from_dict
from etl.job.spans import Span, parse_date, placeholders
from etl.output.layout import SCHEMA_FILE, SUCCESS
from etl.output.manifest import load_manifest
from etl.storage import fs
from etl.tools.report import BATCH, build, current_report
from etl.tools.report.dataset_stats import load_stats
from etl.tools.report.drift import is_categorical
from etl.tools.report.stats import SplitStats

LOOK_BACK_DAYS = 31  # how far back a dated job looks for its last published span


def staged_stats(staging: str, output: str) -> tuple[dict[str, Any],
                                                     dict[tuple[str, str], list[np.ndarray]]]:
    """(report-shaped statistics, sample images) of the dataset staged in `staging` (its
    manifest written, no `_SUCCESS` yet); `output` is what the report names. From its
    stats.json when the run gathered one (no sample images then), else read from its shards."""
    manifest = load_manifest(staging)
    schema = load_schema(fs.join(staging, SCHEMA_FILE))
    splits = {split: {"num_records": info["num_records"], "num_bytes": info["num_bytes"],
                      "num_shards": len(info["shards"])}
              for split, info in manifest["splits"].items()}
    gathered = load_stats(staging)
    samples: dict[tuple[str, str], list[np.ndarray]] = {}
    features = (gathered.doc["features"] if gathered is not None
                else _read_features(staging, manifest, schema, samples))
    report = {"output": output, "dataset_dir": staging,
              "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "run_id": manifest.get("run_id"),
              "schema": {"name": schema.name, "kind": schema.kind,
                         "sha256": manifest.get("schema_sha256")},
              "notes": [], "splits": splits, "features": features}
    return report, samples


def _read_features(staging: str, manifest: dict[str, Any], schema: Any,
                   samples: dict[tuple[str, str], list[np.ndarray]]) -> dict[str, Any]:
    """The report's `features` section, from one read of the staged shards (a staged dataset
    without stats.json); fills `samples` with the first images of each split."""
    per_split: dict[str, SplitStats] = {}
    for split, info in manifest["splits"].items():
        acc = SplitStats(schema)
        batch: list[bytes] = []
        for shard in info["shards"]:
            path = fs.join(staging, shard["path"])
            try:
                with fs.guarded(path, "reading"):
                    for _, data in read_shard(path):
                        batch.append(data)
                        if len(batch) >= BATCH:
                            acc.add_batch(batch)
                            batch = []
            except FileNotFoundError as e:
                raise StorageError(f"{path}: staged shard listed in the manifest is missing") from e
        if batch:
            acc.add_batch(batch)
        if acc.records != info["num_records"]:
            raise BadInputError(f"{staging}: split {split!r} holds {acc.records} records, its "
                                f"manifest says {info['num_records']}")
        per_split[split] = acc
    features: dict[str, Any] = {}
    for f in schema.features:
        by_split = {split: acc.features[f.name].to_json() for split, acc in per_split.items()}
        entry: dict[str, Any] = {"dtype": f.dtype, "shape": list(f.shape), "encoding": f.encoding,
                                 "sequence": f.is_sequence, "image": is_image(f)}
        if f.vocabulary:
            entry["vocabulary"] = list(f.vocabulary)
        entry["categorical"] = is_categorical(entry, by_split)
        if entry["image"]:
            maxima = [s["max"] for s in by_split.values() if s.get("max") is not None]
            entry["pixel_max"] = max(maxima) if maxima else None
            for split, acc in per_split.items():
                samples[(f.name, split)] = acc.features[f.name].samples
        entry["splits"] = by_split
        features[f.name] = entry
    return features


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
