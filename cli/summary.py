"""What users see of a run: a table of records, shards and bytes per split, what was read and
rejected, time, rate, a sample; with `report`, the dataset report beside the published data and
its drift against the previous span (cli.ranges.report_span). The run itself: cli.one_span."""

from __future__ import annotations

from typing import Any

from cli.ranges import report_span
from etl.base.quiet import native_stderr_quiet
from etl.base.units import format_size
from etl.formats.shards import adapter_for
from etl.job.config import JobConfig
from etl.output.layout import REJECTED_FILE
from etl.output.manifest import dataset_dir
from etl.output.place import place_for
from etl.storage import fs


def print_result(job: JobConfig, result: Any, output: str | None, sample: bool, verbose: bool,
                 report: bool) -> int:
    """The summary of a run_job result (skipped, launched or published), and its report."""
    label = f"{job.span} ({job.output})" if job.span else job.output
    if getattr(result, "skipped", ""):
        print(f"Skipped {label}: {result.skipped}")
        if report:
            print_report(job, output, not verbose, keep_current=True)
        return 0
    if result.launched:
        print(result.launched[0].upper() + result.launched[1:])
        if report:
            print("No report: nothing was published by this run (make it later with "
                  "`report OUT`)")
        return 0
    print(f"Wrote {result.output}{f' (span {job.span})' if job.span else ''} "
          f"in {result.seconds:.1f}s")
    folder = result.output
    version = place_for(result.output).version_dir(result.run_id) if result.run_id else None
    if version is not None:  # gs://: the version this run published
        folder = version
        print(f"  published    version {result.run_id}: {folder}")
    for line in summary_table(result.manifest, result.seconds):
        print(line)
    if result.rejected["num_records"]:
        print(f"  rejected     {result.rejected['num_records']:>10,} records "
              f"(see {fs.join(folder, REJECTED_FILE)}): {result.rejected['by_reason']}")
    for line in missing_lines(result.manifest):
        print(line)
    first = next(iter(result.splits))
    if sample:
        from etl.tools.inspect_output import inspect  # noqa: PLC0415 - imports TensorFlow

        print(f"Sample record ({first}):")
        shard = result.manifest["splits"][first]["shards"][0]["path"]
        with native_stderr_quiet(not verbose):  # TensorFlow's start-up lines
            texts = list(inspect([fs.join(dataset_dir(result.output), shard)], limit=1))
        for text in texts:
            print(text)
    print(read_back_line(result.manifest, result.output, first))
    if report:
        print_report(job, output, not verbose)
    return 0


def read_back_line(manifest: dict[str, Any], output: str, split: str) -> str:
    """The reader that reads what was published: make_dataset reads TFRecord shards only, so
    an ArrayRecord output names open_records (a Grain RandomAccessDataSource)."""
    if not adapter_for(manifest.get("format")).tf_data:  # etl.formats.shards
        return (f"Read it back: etl.open_records({output!r}, split={split!r}) "
                "(random access; a Grain RandomAccessDataSource)")
    return f"Read it back: etl.make_dataset({output!r}, split={split!r})"


def print_report(job: JobConfig, output: str | None, quiet: bool,
                  keep_current: bool = False) -> None:
    """The span's report and drift lines; ReportFailed (raised on) says the data is published."""
    made = report_span(job, output, keep_current, quiet)
    first = made.lines[0]
    if keep_current and made.written:
        first = f"report was missing or stale, made again: {', '.join(made.written)}"
    print(first[0].upper() + first[1:])
    for line in made.lines[1:]:
        print(line)


def summary_table(manifest: dict[str, Any], seconds: float) -> list[str]:
    """Per split: records, shards, bytes written; then the totals: records read, written and
    rejected, the input's bytes, time and rate (records read per second)."""
    lines = []
    splits = manifest["splits"]
    for split, info in splits.items():
        lines.append(f"  {split:<12} {info['num_records']:>10,} records in "
                     f"{len(info['shards'])} shard(s), {format_size(_bytes(info)):>9}")
    read = sum(int(i.get("read", 0)) for i in manifest.get("inputs", []))
    written = sum(int(v["num_records"]) for v in splits.values())
    rejected = int(manifest.get("rejected", {}).get("num_records", 0))
    shards = sum(len(v["shards"]) for v in splits.values())
    input_bytes = sum(int(f.get("num_bytes", 0)) for f in manifest.get("input_files", []))
    rate = f", {read / seconds:,.0f} records/s" if seconds > 0 else ""
    lines.append(f"  {'total':<12} {written:>10,} records in {shards} shard(s), "
                 f"{format_size(sum(_bytes(v) for v in splits.values())):>9}")
    lines.append(f"  read {read:,} records ({format_size(input_bytes)} of input), written {written:,}, "
                 f"rejected {rejected:,} in {seconds:.1f}s{rate}")
    return lines


def missing_lines(manifest: dict[str, Any]) -> list[str]:
    """One line per feature that had missing values (the manifest's `missing_values`): how
    many were filled with its default, how many records it made rejected."""
    lines = []
    for name, info in (manifest.get("missing_values") or {}).items():
        missing, filled = int(info.get("missing", 0)), int(info.get("defaulted", 0))
        if not missing:
            continue
        parts = []
        if filled:
            default = info.get("default")
            parts.append(f"{filled:,} stored as an empty list" if default == [] else
                         f"{filled:,} filled with default {default!r}")
        if "default" not in info:
            parts.append("no default: records rejected (missing_required)")
        elif missing > filled:
            parts.append(f"{missing - filled:,} in records rejected for another reason")
        lines.append(f"  {'missing':<12} {name}: {missing:,} value(s), {'; '.join(parts)}")
    return lines


def _bytes(split: dict[str, Any]) -> int:
    return int(split.get("num_bytes") or sum(int(s.get("num_bytes", 0)) for s in split["shards"]))
