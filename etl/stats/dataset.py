"""`stats.json`: the statistics a run gathers while it converts, and `load_stats` to read them.

The conversion pipeline feeds every record it WRITES (rejected records never reach it) into
the report's own accumulators (etl.stats.accumulators.SplitStats), one per split, merged by a
Beam CombineFn (transforms/convert.py, step "GatherStats"); the finalize step writes the result
as `stats.json` into the staged output, listed under the manifest's `files` (size and sha256:
`verify` covers it) and published with the shards. `report OUT` and `run --report` build the
report from it without reading the data again; outputs without one are read again as before.

The file (format 1; JSON):

    {"generator": "tfrecord-etl stats", "stats_format": 1, "schema_sha256": "...",
     "splits":   {SPLIT: {"num_records": N}},
     "features": {NAME: {"dtype", "shape", "encoding", "sequence", "image", ["vocabulary"],
                         "categorical", ["pixel_max"],
                         "splits": {SPLIT: FEATURE_STATS}}}}

FEATURE_STATS is exactly the report's per-split entry (report.json `features.NAME.splits.SPLIT`,
made by FeatureStats.to_json): `records`, `missing` (records without the feature; None where
it is not counted), `values` (finite values; NaN and inf are not values), `min`, `max`, `sum`,
`mean`, `stddev`, `zeros`, `nan_or_inf` (float features: NaN and ±inf count), `distinct`,
`value_counts_exact`, `top_values`, `value_counts` (when exact), `quantiles`, `histogram`;
strings: `values`, `distinct`, `top_values`, `value_counts`, `byte_length`; variable-length and
sequence features add `lengths`; small fixed vectors add `components` (one FEATURE_STATS each).

Exact: counts, missing, NaN, min, max, sum, mean, stddev, zeros; value counts, distinct and
histograms while a feature has fewer than accumulators.CAPACITY distinct values (small integer
dtypes: always). Estimated (tfx_bsl sketches, the report's): distinct above that (KMV), top
values (Misra-Gries), quantiles and the histograms drawn from them.

The Python API (for the checks of issue 23 and anyone else):

    stats = load_stats(OUT)          # DatasetStats, or None: an output without stats.json
    stats.num_records("train")       # int
    f = stats.feature("x", "train")  # FeatureSummary
    f.records, f.missing, f.missing_fraction, f.nan, f.values, f.min, f.max, f.mean,
    f.stddev, f.distinct, f.distinct_exact, f.value_counts, f.histogram, f.raw (the dict)
    stats.drift(previous, "x", "train")  # {"metric": "linf"|"jensen_shannon", "value": v,
                                         #  "threshold", "flagged"} or None (nothing to compare)

Drift uses the report's measures (etl.stats.drift): the L-infinity distance of value
shares for categorical features (a vocabulary, strings, integers with few distinct values),
the Jensen-Shannon divergence of histograms on shared bins for numbers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from etl.base.errors import VerifyError
from etl.contract.images import is_image
from etl.contract.schema import Schema
from etl.output.layout import STATS_FILE
from etl.output.manifest import dataset_dir, load_manifest
from etl.stats.accumulators import SplitStats
from etl.stats.drift import feature_drift, is_categorical
from etl.storage import fs

STATS_FORMAT = 1
STATS_GENERATOR = "tfrecord-etl stats"


@dataclass(frozen=True)
class FeatureSummary:
    """One feature in one split: the numbers a check compares with a threshold."""

    name: str
    split: str
    categorical: bool
    raw: dict[str, Any]

    @property
    def records(self) -> int:
        return int(self.raw.get("records", 0))

    @property
    def missing(self) -> int | None:
        return self.raw.get("missing")

    @property
    def missing_fraction(self) -> float | None:
        """Records without the feature / records (None when not counted or no records)."""
        if self.missing is None or not self.records:
            return None
        return self.missing / self.records

    @property
    def nan(self) -> int:
        return int(self.raw.get("nan_or_inf") or 0)

    @property
    def values(self) -> int:
        return int(self.raw.get("values") or 0)

    @property
    def min(self) -> float | int | None:
        return self.raw.get("min")

    @property
    def max(self) -> float | int | None:
        return self.raw.get("max")

    @property
    def mean(self) -> float | None:
        return self.raw.get("mean")

    @property
    def stddev(self) -> float | None:
        return self.raw.get("stddev")

    @property
    def distinct(self) -> int | None:
        return self.raw.get("distinct")

    @property
    def distinct_exact(self) -> bool:
        return bool(self.raw.get("value_counts_exact"))

    @property
    def value_counts(self) -> list[tuple[Any, int]] | None:
        """(value, count) pairs when exact (strings as text), else None."""
        counts = self.raw.get("value_counts")
        return None if counts is None else [(v, int(c)) for v, c in counts]

    @property
    def histogram(self) -> dict[str, Any] | None:
        return self.raw.get("histogram")


@dataclass(frozen=True)
class DatasetStats:
    """The statistics of one output (its stats.json document in `doc`)."""

    doc: dict[str, Any]

    @property
    def splits(self) -> list[str]:
        return list(self.doc["splits"])

    @property
    def features(self) -> list[str]:
        return list(self.doc["features"])

    def num_records(self, split: str) -> int:
        return int(self.doc["splits"][split]["num_records"])

    def feature(self, name: str, split: str) -> FeatureSummary:
        entry = self.doc["features"][name]
        return FeatureSummary(name, split, bool(entry.get("categorical")),
                              entry["splits"][split])

    def drift(self, previous: DatasetStats, name: str, split: str) -> dict[str, Any] | None:
        """The report's drift measure of feature `name` in `split` against `previous`;
        None when either side lacks the feature or split, or neither has values."""
        mine = self.doc["features"].get(name, {}).get("splits", {}).get(split)
        theirs = previous.doc["features"].get(name, {}).get("splits", {}).get(split)
        if mine is None or theirs is None:
            return None
        categorical = bool(self.doc["features"][name].get("categorical"))
        return feature_drift(mine, theirs, categorical)


def describe_features(schema: Schema, per_split: dict[str, SplitStats]) -> dict[str, Any]:
    """The report's `features` section from each split's accumulators (one home: `report`'s
    re-read and the run's stats.json describe features with this)."""
    features: dict[str, Any] = {}
    for f in schema.features:
        by_split = {split: acc.features[f.name].to_json() for split, acc in per_split.items()}
        entry: dict[str, Any] = {"dtype": f.dtype, "shape": list(f.shape),
                                 "encoding": f.encoding, "sequence": f.is_sequence,
                                 "image": is_image(f)}
        if f.vocabulary:
            entry["vocabulary"] = list(f.vocabulary)
        entry["categorical"] = is_categorical(entry, by_split)
        if entry["image"]:
            maxima = [s["max"] for s in by_split.values() if s.get("max") is not None]
            entry["pixel_max"] = max(maxima) if maxima else None
        entry["splits"] = by_split
        features[f.name] = entry
    return features


def stats_document(schema: Schema, per_split: dict[str, SplitStats]) -> bytes:
    """stats.json's bytes (the finalize step writes them; the manifest lists them)."""
    doc = {"generator": STATS_GENERATOR, "stats_format": STATS_FORMAT,
           "schema_sha256": schema.sha256(),
           "splits": {split: {"num_records": acc.records} for split, acc in per_split.items()},
           "features": describe_features(schema, per_split)}
    return json.dumps(doc, indent=1, default=_json_default, allow_nan=False).encode()


def _json_default(o: Any) -> Any:
    import numpy as np  # noqa: PLC0415 - only for NumPy scalars in a document

    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON: {type(o).__name__}")


# the largest stats.json `load_stats` reads (docs/output.md, "What the skip rule checks"): a
# numeric feature takes about 4 KB per split (histogram, quantiles), so this is room for some
# 250,000 feature-splits; anything larger is garbage, not statistics
STATS_MAX_BYTES = 1 << 30


def load_stats(out: str, manifest: dict[str, Any] | None = None) -> DatasetStats | None:
    """The stats.json of output `out` (or of a dataset dir) when it describes that data:
    listed in its manifest with these bytes (sha256), for this schema and these record
    counts. None when there is none (outputs written before runs gathered statistics) or it
    does not match (a file changed since): the caller reads the data instead. `manifest`:
    the dataset dir's manifest when the caller has it already."""
    ddir = dataset_dir(out)
    manifest = load_manifest(ddir) if manifest is None else manifest
    entry = manifest.get("files", {}).get(STATS_FILE)
    path = fs.join(ddir, STATS_FILE)
    if entry is None or not fs.exists(path):
        return None
    # bounded before a byte is read: a file of another size is not the one listed, and no
    # listed stats.json is read above STATS_MAX_BYTES (a 2 GB sparse file took 2.4 GB of RSS)
    if entry["num_bytes"] > STATS_MAX_BYTES:
        raise VerifyError(f"{path}: the manifest lists {entry['num_bytes']} bytes, above the "
                          f"{STATS_MAX_BYTES >> 20} MiB a stats.json may have: not read")
    if fs.size(path) != entry["num_bytes"]:
        return None
    data = fs.read_bytes(path)
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    counts = {k: v["num_records"] for k, v in manifest["splits"].items()}
    if (not isinstance(doc, dict) or doc.get("generator") != STATS_GENERATOR
            or doc.get("stats_format") != STATS_FORMAT
            or doc.get("schema_sha256") != manifest.get("schema_sha256")
            or {k: (v or {}).get("num_records") for k, v in doc.get("splits", {}).items()}
            != counts):
        return None
    return DatasetStats(doc)
