"""The statistics document of an output (report.json's numbers): `build` for a published
output, `gather` for a dataset dir (published or staged), `current_report` for a report.json
that still describes its output's data.

From the statistics its run gathered (stats.json, etl.stats.dataset) plus, for image datasets,
the first records of each split; an output without a current stats.json is read once, every
shard, in one streaming pass (etl.formats.shards through etl.storage.fs: local and gs://
alike), decoded with the dataset's own schema.yaml in batches of BATCH records; memory is
bounded by the accumulators of etl.stats.accumulators, whatever the size of the data.
`report` (etl.tools.report) renders and writes the document; the quality gate
(etl.quality.stats) reads it.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np

from etl.base.errors import BadInputError, ConfigError, EtlError, StorageError
from etl.base.pause import pause
from etl.contract.images import is_image
from etl.contract.schema import load_schema
from etl.formats.shards import read_shard
from etl.output.layout import MANIFEST, PRODUCER, REPORT_FILES, SUCCESS
from etl.output.manifest import dataset_dir, load_manifest
from etl.output.ownership import REPORT_GENERATOR, report_is_ours
from etl.stats.accumulators import SAMPLE_IMAGES, SplitStats, caption, label_feature
from etl.stats.dataset import describe_features, load_stats
from etl.storage import fs

BATCH = 1024
REPORT_FORMAT = 1
JSON_NAME = REPORT_FILES[0]


def build(out: str, keep_samples: bool = True) -> tuple[dict[str, Any],
                                                         dict[tuple[str, str], list[np.ndarray]]]:
    """The report's JSON document and the sample images of `out`: from the statistics its
    run gathered (stats.json, listed in the manifest) and, for image datasets, the first
    records of each split; outputs without them are read once, every shard."""

    ddir = dataset_dir(out)
    manifest = _manifest(out, ddir)
    schema = load_schema(fs.join(ddir, "schema.yaml"))
    pause("report:read")  # tests: a publish between the manifest and the shards (etl.base.pause)
    splits = split_sizes(manifest)
    features, per_split, samples = gather(ddir, manifest, schema, keep_samples)
    return _document(out, ddir, manifest, schema, splits, features, per_split, samples), samples


def split_sizes(manifest: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The report's `splits` section: records, bytes and shards of each split."""
    return {split: {"num_records": info["num_records"], "num_bytes": info["num_bytes"],
                    "num_shards": len(info["shards"])}
            for split, info in manifest["splits"].items()}


def gather(ddir: str, manifest: dict[str, Any], schema: Any, keep_samples: bool = True
           ) -> tuple[dict[str, Any], dict[str, SplitStats], dict[tuple[str, str], list[np.ndarray]]]:
    """The report's `features` section of the dataset in `ddir` (published or staged), the
    per-split accumulators that hold the sample images and their labels, and those images:
    from the stats.json its run gathered plus the first records of each split (image datasets
    only), or from one read of every shard when it has no current stats.json."""
    gathered = load_stats(ddir, manifest)
    if gathered is None:
        per_split = _read_all(ddir, manifest, schema)
        features = describe_features(schema, per_split)
    else:
        features = gathered.doc["features"]
        images = keep_samples and any(is_image(f) for f in schema.features)
        per_split = _first_records(ddir, manifest, schema) if images else {}
    samples: dict[tuple[str, str], list[np.ndarray]] = {}
    if keep_samples:
        for f in schema.features:
            if is_image(f):
                for split, acc in per_split.items():
                    samples[(f.name, split)] = acc.features[f.name].samples
    return features, per_split, samples


def _first_records(ddir: str, manifest: dict[str, Any], schema: Any) -> dict[str, SplitStats]:
    """The sample images and their labels: the first SAMPLE_IMAGES records of each split,
    in shard order (the same records a full read keeps), read from its first shard(s)."""
    return _read(ddir, manifest, schema, SAMPLE_IMAGES)


def _read_all(ddir: str, manifest: dict[str, Any], schema: Any) -> dict[str, SplitStats]:
    """Every record of every split, once, into the report's accumulators."""
    return _read(ddir, manifest, schema, None)


def _read(ddir: str, manifest: dict[str, Any], schema: Any,
          first: int | None) -> dict[str, SplitStats]:
    """Each split's records in shard order into its accumulators, in batches of BATCH: all of
    them (checked against the manifest's count), or only the `first` ones."""
    per_split: dict[str, SplitStats] = {}
    for split, info in manifest["splits"].items():
        acc = SplitStats(schema)
        batch: list[bytes] = []
        taken = 0
        for shard in info["shards"]:
            path = fs.join(ddir, shard["path"])
            try:
                with fs.guarded(path, "reading"):
                    for _, data in read_shard(path):
                        batch.append(data)
                        taken += 1
                        if len(batch) >= BATCH:
                            _add(acc, batch, path)
                            batch = []
                        if taken == first:
                            break
            except FileNotFoundError as e:
                raise StorageError(f"{path}: shard listed in the manifest is missing") from e
            if taken == first:
                break
        if batch:
            _add(acc, batch, path)
        if first is None and acc.records != info["num_records"]:
            raise BadInputError(f"{ddir}: split {split!r} holds {acc.records} records, its "
                                f"manifest says {info['num_records']} (run verify)")
        per_split[split] = acc
    return per_split


def _document(out: str, ddir: str, manifest: dict[str, Any], schema: Any,
              splits: dict[str, Any], features: dict[str, Any],
              per_split: dict[str, SplitStats],
              samples: dict[tuple[str, str], list[np.ndarray]]) -> dict[str, Any]:
    """report.json's document."""
    sample_labels = None
    if samples:
        label = label_feature(list(schema.features),
                              {name: f["categorical"] for name, f in features.items()})
        sample_labels = {"per_split": SAMPLE_IMAGES, "feature": label.name if label else None,
                         "splits": {split: [caption(v, label) for v in
                                            acc.features[label.name].head or []]
                                    for split, acc in per_split.items()} if label else {}}
    report = {
        "generator": REPORT_GENERATOR,  # first: the marker etl.output.ownership.report_is_ours reads
        "report_format": REPORT_FORMAT,
        "output": out,
        "dataset_dir": ddir,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "run_id": manifest.get("run_id"),
        "schema": {"name": schema.name, "kind": schema.kind,
                   "sha256": manifest.get("schema_sha256")},
        "notes": ["value counts, top values and histograms are exact where "
                  "value_counts_exact is true; otherwise from bounded sketches (Misra-Gries "
                  "top values, KMV distinct count, quantiles)",
                  "missing: records without the feature (variable-length: no values; optional "
                  "fixed features: absent in the record, before the default fills it in)"],
        "splits": splits,
        "features": features,
    }
    if sample_labels is not None:
        # captions of the sample images: the label of each of the first records of a split
        report["sample_labels"] = sample_labels
    return report


def current_report(out: str) -> dict[str, Any] | None:
    """`out`'s own report.json when it describes `out`'s current data (ours, this report
    format, made from the run its manifest names, same split counts and bytes): comparing with
    it saves a second pass over that output. None when there is none or it may be stale."""
    ddir = dataset_dir(out)
    path = fs.join(ddir, JSON_NAME)
    if not fs.exists(path) or not report_is_ours(path):
        return None
    manifest = _manifest(out, ddir)
    try:
        doc = json.loads(fs.read_bytes(path))
    except (OSError, ValueError):
        return None
    splits = split_sizes(manifest)
    fresh = (doc.get("report_format") == REPORT_FORMAT and manifest.get("run_id")
             and doc.get("run_id") == manifest.get("run_id") and doc.get("splits") == splits
             and (doc.get("schema") or {}).get("sha256") == manifest.get("schema_sha256"))
    return doc if fresh else None


def _add(acc: Any, batch: list[bytes], path: str) -> None:
    try:
        acc.add_batch(batch)
    except EtlError:
        raise
    except Exception as e:  # TensorFlow's InvalidArgumentError on a record the schema rejects
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise BadInputError(f"{path}: records do not decode with the dataset's schema.yaml: "
                            f"{first}") from e


def _manifest(out: str, ddir: str) -> dict[str, Any]:
    if not fs.exists(fs.join(ddir, SUCCESS)) or not fs.exists(fs.join(ddir, MANIFEST)):
        raise ConfigError(f"{out}: not a published output (no {SUCCESS} and {MANIFEST} in "
                          f"{ddir}); give the output directory of a run")
    try:
        manifest = load_manifest(ddir)
    except (ValueError, OSError) as e:
        raise ConfigError(f"{ddir}: cannot read its {MANIFEST}: {fs.first_line(e)}") from e
    if manifest.get("producer") != PRODUCER or not isinstance(manifest.get("splits"), dict):
        raise ConfigError(f"{ddir}: its {MANIFEST} was not written by {PRODUCER}")
    return manifest
