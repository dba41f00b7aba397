"""`report OUT [--against OUT2] [--out DIR]`: statistics, plots and sample images of an output.

One streaming pass over the output's shards (etl.formats.tfrecord through etl.storage.fs: local and gs://
alike), decoded with the dataset's own schema.yaml in batches of BATCH records; memory is
bounded by the accumulators of etl.tools.report.stats, whatever the size of the data. Writes
`report.json` (the numbers) and `report.html` (one self-contained page) beside the data —
the output's current dataset dir (etl.output.manifest.dataset_dir) — or into `--out DIR`.

Beside the data the two files are allowed unlisted by `verify` and by the next run's output
check when they carry our marker (etl.output.ownership.report_is_ours). A report file that is not ours
is never overwritten. On an object store the files are first claimed in the run marker of the
version they go into (as a run claims its objects before writing them), so the next run
accepts the prefix as ours and removes them with their version.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from etl.base.errors import BadInputError, ConfigError, EtlError, StorageError
from etl.base.pause import pause
from etl.contract.images import is_image
from etl.contract.schema import load_schema
from etl.formats.shards import read_shard
from etl.output.layout import MANIFEST, PRODUCER, REPORT_FILES, SUCCESS
from etl.output.lock import read_settled
from etl.output.manifest import dataset_dir, load_manifest
from etl.output.ownership import REPORT_GENERATOR, report_is_ours
from etl.output.remote import markers, read_pointer
from etl.storage import fs
from etl.storage.object_store import Conflict, Store
from etl.tools.report.dataset_stats import describe_features, load_stats
from etl.tools.report.drift import compare
from etl.tools.report.html import render
from etl.tools.report.stats import SAMPLE_IMAGES, SplitStats, caption, label_feature

BATCH = 1024
REPORT_FORMAT = 1
JSON_NAME, HTML_NAME = REPORT_FILES


def command(args: argparse.Namespace) -> int:
    """The CLI entry: build, compare, write, and print where the files went.

    Made consistent with a run publishing the output meanwhile (etl.output.lock.read_settled):
    a read that a publish replaced the output under is done again on the new version, and an
    output caught half-published is exit 4 ("another run is publishing OUT"), never a false
    count mismatch (exit 3). The write is inside the settled read, so a report written just
    as the output was replaced is written again beside the new data."""

    def make() -> tuple[dict[str, Any], list[str], bool]:
        report, samples = build(args.path)
        reused = bool(getattr(args, "against", None)) and add_drift(report, args.against)
        target = args.out or report["dataset_dir"]
        return report, write(report, samples, target, beside_data=not args.out,
                             output=args.path), reused

    report, written, reused = read_settled(args.path, make)
    if reused:
        print(f"compared with the report.json of {args.against} (made from its current data)")
    total = sum(s["num_records"] for s in report["splits"].values())
    print(f"report of {args.path}: {total} records in {len(report['splits'])} split(s), "
          f"{len(report['features'])} feature(s)")
    for path in written:
        print(f"  wrote {path}")
    if report.get("drift"):
        for line in drift_lines(report["drift"]):
            print(line)
    return 0


def add_drift(report: dict[str, Any], against: str) -> bool:
    """`report`'s drift section against the output `against`: compared with that output's own
    report.json when it describes its current data (yesterday's span usually has one), else
    with a second streaming pass over it. True when its report.json was used."""

    other = current_report(against)
    reused = other is not None
    if other is None:
        other, _ = build(against, keep_samples=False)
    report["drift"] = compare(report, other, against)
    return reused


@dataclass
class RunReport:
    """What `for_run` did with a run's output: the files written (none when the report there
    was current and kept), the drift section, and the lines a run prints about it."""

    json_path: str
    written: list[str] = field(default_factory=list)
    drift: dict[str, Any] | None = None
    lines: list[str] = field(default_factory=list)  # the first one says what happened

    @property
    def brief(self) -> str:
        """One line for a range's span: where the report is and what the drift check found."""
        if not self.written:
            return f"report {self.json_path} is current: left as it is"
        drift = self.lines[1] if len(self.lines) > 1 else ""
        return f"report {self.json_path}{'; ' + drift if drift else ''}"


def for_run(out: str, previous: str | None = None, keep_current: bool = False) -> RunReport:
    """The report of a run's published output `out`, written beside its data (`run --report`).

    `previous`: the previous span's output (a dated job). When it is published the report
    carries a `drift` section against it: its own report.json when that describes its current
    data (current_report), else a second streaming pass over it. When it is not published the
    report is written without drift and a line says so. Drift is only reported, never an error.
    `keep_current`: a report already there that describes `out`'s current data is left as it
    is (a skipped rerun then writes nothing). Errors are raised before anything is written, so
    a failed report leaves none that looks current: a retry makes it again."""
    json_path = fs.join(dataset_dir(out), JSON_NAME)
    if keep_current and current_report(out) is not None:
        return RunReport(json_path, lines=[f"report {json_path} is current: left as it is"])
    report, samples = build(out)
    notes: list[str] = []
    if previous is not None:
        if fs.exists(fs.join(previous, SUCCESS)):
            how = "its report.json" if add_drift(report, previous) else "read again"
            notes = drift_lines(report["drift"], f" (previous span; {how})")
        else:
            notes = [f"no previous span output to compare with ({previous} is not published): "
                     "report without drift"]
    written = write(report, samples, report["dataset_dir"], beside_data=True, output=out)
    return RunReport(json_path, written, report.get("drift"),
                     [f"report written: {', '.join(written)}", *notes])


def drift_lines(drift: dict[str, Any], how: str = "") -> list[str]:
    """The drift section as printed: a headline, then one `  - finding` line each."""
    if not drift["flagged"]:
        return [f"no drift against {drift['against']}{how} over the thresholds"]
    return [f"drift against {drift['against']}{how}: {len(drift['findings'])} finding(s)",
            *(f"  - {finding}" for finding in drift["findings"])]


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


# ---- writing ---------------------------------------------------------------------------------
def write(report: dict[str, Any], samples: dict[tuple[str, str], list[np.ndarray]],
          target: str, beside_data: bool, output: str) -> list[str]:
    """Write report.json and report.html into `target`; never over a file that is not ours."""

    paths = [fs.join(target, name) for name in REPORT_FILES]
    for path in paths:
        if fs.exists(path) and not report_is_ours(path):
            raise ConfigError(f"refusing to overwrite {path}: it is not a report written by "
                              f"{PRODUCER}; move it away or pass --out DIR")
        if not fs.is_remote(path) and fs.isdir(path):
            raise ConfigError(f"refusing to write {path}: it is a directory")
    if beside_data and fs.is_remote(target):
        _claim(output, target)
    body = json.dumps(report, indent=1, default=_json_default, allow_nan=False).encode()
    page = render(report, samples).encode()
    for path, data in zip(paths, (body, page), strict=True):
        try:
            with fs.guarded(path):
                fs.write_bytes(path, data)
        except OSError as e:
            raise StorageError(f"cannot write {path}: {fs.first_line(e)}") from e
    return paths


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON: {type(o).__name__}")


def _claim(output: str, target: str) -> None:
    """Add the report files to the run marker of the version they go into (gs://), so the
    next run's output check accepts them and removes them with their version."""
    store = Store()
    pointer = read_pointer(store, output)
    version = target.rstrip("/").rsplit("/", 1)[-1]
    if pointer is None or pointer.version != version:
        raise ConfigError(f"{output}: no current version to write the report beside; pass "
                          "--out DIR")
    for marker in markers(store, output):
        if marker.version != version:
            continue
        wanted = sorted(set(marker.objects) | set(REPORT_FILES))
        if wanted != marker.objects:
            marker.objects = wanted
            try:
                marker.save(store, output)
            except Conflict as e:
                raise StorageError(f"{marker.url} changed while the report claimed its files "
                                   "(a run at work?); try again") from e
        return
    raise ConfigError(f"{output}: version {version} has no run marker of {PRODUCER} to claim "
                      "the report files in; pass --out DIR to write them elsewhere")
