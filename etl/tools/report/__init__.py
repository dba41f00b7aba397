"""`report OUT [--against OUT2] [--out DIR]`: statistics, plots and sample images of an output.

The numbers are etl.stats's: the statistics document of the output (etl.stats.document.build:
from the stats.json its run gathered, else one streaming pass over its shards with bounded
memory) and, with `--against`, the drift section (etl.stats.drift). This package renders and
writes them: `report.json` (the numbers) and `report.html` (one self-contained page, html.py)
beside the data — the output's current dataset dir (etl.output.manifest.dataset_dir) — or into
`--out DIR`.

Beside the data the two files are allowed unlisted by `verify` and by the next run's output
check when they carry our marker (etl.output.ownership.report_is_ours). A report file that is not ours
is never overwritten. On an object store the files are first claimed in the run marker of the
version they go into (as a run claims its objects before writing them), so the next run
accepts the prefix as ours and removes them with their version.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from etl.base.errors import ConfigError, StorageError
from etl.output.layout import PRODUCER, REPORT_FILES, SUCCESS
from etl.output.lock import read_settled
from etl.output.manifest import dataset_dir
from etl.output.ownership import report_is_ours
from etl.output.remote import markers, read_pointer
from etl.stats.document import JSON_NAME, build, current_report
from etl.stats.drift import compare
from etl.storage import fs
from etl.storage.object_store import Conflict, Store
from etl.tools.report.html import render


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






















# ---- writing ---------------------------------------------------------------------------------
def write(report: dict[str, Any], samples: dict[tuple[str, str], list[np.ndarray]],
          target: str, beside_data: bool, output: str) -> list[str]:
    """Write report.json and report.html into `target`; never over a file that is not ours."""

    paths = [fs.join(target, name) for name in REPORT_FILES]
    for path in paths:
        if fs.exists(path) and not report_is_ours(path):
            raise ConfigError(f"refusing to overwrite {path}: it is not a report written by "
                              f"{PRODUCER}; move it away or pass --out DIR")
        if fs.local_path(path) is not None and fs.isdir(path):
            raise ConfigError(f"refusing to write {path}: it is a directory")
    if beside_data and fs.local_path(target) is None:  # a store: its run marker lists them
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
