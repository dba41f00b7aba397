#!/usr/bin/env python
"""Command line: raw data -> shuffled, sharded TFRecords, and the tools around them.

    python run_pipeline.py                         # demo: bundled digits -> out/demo
    python run_pipeline.py run JOB.yaml [--output PATH] [--sample] [--report] [--break-lock]
                               [--lock-stale-after 24h] [--debug] [Beam options...]
                               [--date D | --from D1 --to D2 [--reverse] [--parallel N]]
                               [--dry-run] [--only missing|failed|all] [--allow-missing] [--force]
                               [--estimate] [--verify-full] [--accept]
    python run_pipeline.py history OUT_ROOT        # the run history beside dated outputs
    python run_pipeline.py verify OUT [--quick]
    python run_pipeline.py spec SCHEMA.yaml
    python run_pipeline.py inspect PATH... [--limit N] [--schema SCHEMA.yaml] [--images DIR]
    python run_pipeline.py infer-schema SOURCE... [--format F] [--sample N] [--output SCHEMA.yaml]
                                       [--job JOB.yaml] [--name NAME] [--checks]
                                       [--delimiter D] [--encoding E] [--no-header]
    python run_pipeline.py infer-schema --sql-url URL --query Q [--password-env VAR] [--key COL]
                                       [--sample N] [--output SCHEMA.yaml] [--job JOB.yaml]
    python run_pipeline.py report OUT [--against OUT2] [--out DIR]
    python run_pipeline.py quarantine list|release|drop OUT [--run RUN_ID] [--all]

Arguments after our own go to Beam's PipelineOptions untouched (--runner, --direct_num_workers,
Dataflow options...). Without --runner the local FnApiRunner is used (no Prism download).

Dates: a job's source paths, output and shuffle.seed may hold {date} {YYYY} {MM} {DD} {span}
(days since 1970-01-01, as TFX counts). --date D fills them (default: yesterday in UTC);
--from D1 --to D2 runs every day of the range, oldest first, one line per span, going on after a
failed span. A span whose output is published and current is skipped (exit 0); --force rebuilds.

Exit codes (a range exits with its worst span's, mildest first: 0 < 4 < 5 < 6 < 3 < 2 < 1):
  0  success, or skipped because the published output is current (also --dry-run, and
     --estimate whose sampled records pass the job's max_bad_fraction)
  1  other failure (the message says what and where)
  2  bad job, schema or arguments (also a refused output, an output holding another job's
     dataset: --force replaces it, a span with no input files)
  3  bad input: more rejected records than max_bad_fraction allows (--estimate: in its sample),
     or unreadable rest of a file
  4  another run holds the span's output (its lock names the holder)
  5  storage error: disk full, permission, read-only, I/O, too little free space
  6  blocked by a quality check (checks: in the job): nothing published, the run quarantined
     beside the output for a person (quarantine list|release|drop OUT, or run --accept)
  130, 143  stopped by SIGINT (Ctrl-C) or SIGTERM; the line says whether the new output is in place
Errors are one line; --debug adds the full traceback, which a run's log file always holds.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any

# Python's cyclic GC rescans every live object of Beam, pyarrow and protobuf's modules again
# and again while they import (~200k objects), and once more at exit. Off while importing,
# then those objects frozen out of later scans, and frozen again before exit. Measured here:
# `import apache_beam, cli.run` 1.42 s -> 1.21 s; freezing before exit alone took the
# 1M-row benchmark CSV from 3.58 s to 3.15 s (medians of 4 runs).
gc.disable()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout
DEMO_JOB = os.path.join(HERE, "examples", "demo.yaml")


from cli.gc_imports import imports_done  # noqa: E402 - after gc.disable(): see above
from etl.base import signals  # noqa: E402
from etl.base.errors import ConfigError, EtlError  # noqa: E402
from etl.base.pause import pause  # noqa: E402
from etl.base.quiet import native_stderr_quiet  # noqa: E402
from etl.base.units import parse_duration  # noqa: E402
from etl.base.worker_errors import check_open_files  # noqa: E402

if TYPE_CHECKING:
    from cli.ranges import Request


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_pipeline.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="on failure print the full traceback (always in the run's log file), "
                             "and show every library's warnings")
    common.add_argument("--verbose", action="store_true",
                        help="also show TensorFlow's start-up lines (absl, oneDNN, CUDA), which "
                             "are hidden by default")
    writes = argparse.ArgumentParser(add_help=False)
    writes.add_argument("--break-lock", action="store_true",
                        help="take the output's lock even if its holder looks alive (only when "
                             "you know that run is gone)")
    writes.add_argument("--lock-stale-after", default=None, metavar="DURATION",
                        help="a lock or leftover run older than this is recovered even if its "
                             "holder cannot be checked (other host); default 24h")
    shows = argparse.ArgumentParser(add_help=False)
    shows.add_argument("--progress", choices=["auto", "bar", "lines", "none"], default="auto",
                       help="while the pipeline runs: a live bar (records, rate, percent, ETA, "
                            "stage), plain lines, or nothing; auto (default): a bar on a "
                            "terminal, lines otherwise (a range: one line per span)")
    shows.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                       help="seconds between plain progress lines (default 10)")
    sub = p.add_subparsers(dest="command")
    _add_run(sub, common, writes, shows)
    demo = sub.add_parser("demo", help="convert the bundled sample data (the default)",
                          parents=[common, writes, shows])
    demo.add_argument("--output", default=os.path.join("out", "demo"))
    _add_tools(sub, common)
    return p


def _add_run(sub: Any, common: argparse.ArgumentParser, writes: argparse.ArgumentParser,
             shows: argparse.ArgumentParser) -> None:
    """`run JOB`: its own options, dates and backfills; Beam's options pass through."""
    exit_codes = __doc__[__doc__.index("Exit codes"):]
    run = sub.add_parser("run", help="convert a job file (extra args go to Beam)",
                         parents=[common, writes, shows], epilog=exit_codes,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("job")
    run.add_argument("--output", help="override the job file's output")
    run.add_argument("--sample", action="store_true",
                     help="also print one decoded record (imports TensorFlow: ~4 s, ~600 MB)")
    run.add_argument("--estimate", action="store_true",
                     help="launch nothing: sample the inputs and print records, bytes to "
                          "shuffle, CPU, workers × hours, object operations and a cost range "
                          "for the runner and machines the Beam options name (exit 0)")
    run.add_argument("--report", action="store_true",
                     help="after a span is published (or skipped as current without a current "
                          "report), write its report beside the data, with drift against the "
                          "previous day's span when the output is dated; drift never fails a run")
    dates = run.add_argument_group("dates and backfills")
    dates.add_argument("--date", metavar="YYYY-MM-DD",
                       help="the span to convert (default for a job with placeholders: "
                            "yesterday in UTC)")
    dates.add_argument("--from", dest="first", metavar="YYYY-MM-DD",
                       help="first span of a range (with --to; both included)")
    dates.add_argument("--to", dest="last", metavar="YYYY-MM-DD", help="last span of a range")
    dates.add_argument("--reverse", action="store_true", help="run a range newest first")
    dates.add_argument("--dry-run", action="store_true",
                       help="print what each span would do (run, skip, fail) and why; run "
                            "nothing")
    dates.add_argument("--only", choices=["missing", "failed", "all"], default="all",
                       help="missing: spans without _SUCCESS; failed: spans whose last run "
                            "failed; all (default): every span, current ones still skipped")
    dates.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="run up to N spans of a range at once, each in its own process "
                            "(pays off with more cores than one span's pipeline keeps busy; "
                            "on 2 cores it did not)")
    dates.add_argument("--allow-missing", action="store_true",
                       help="skip a span whose inputs match no file instead of failing (exit 2)")
    dates.add_argument("--force", action="store_true",
                       help="rebuild even a span whose published output is current")
    run.add_argument("--accept", action="store_true",
                     help="publish a span even if a block: quality check fails (a run of it "
                          "waiting in quarantine is released); recorded in the history")
    dates.add_argument("--verify-full", action="store_true",
                       help="before skipping a span as current, check every byte of its output "
                            "against the manifest (default: every file there with its size, "
                            "or what the job's verify: says); a damaged output is rebuilt")


def _add_tools(sub: Any, common: argparse.ArgumentParser) -> None:
    """The commands around an output: history, verify, spec, inspect, infer-schema, report."""
    history = sub.add_parser("history", help="print the run history (_runs.jsonl) as a table",
                             parents=[common])
    history.add_argument("root", metavar="OUT_ROOT",
                         help="the folder holding the dated outputs (and _runs.jsonl)")
    verify = sub.add_parser("verify", help="check every shard against the manifest",
                            parents=[common])
    verify.add_argument("path")
    verify.add_argument("--quick", action="store_true",
                        help="read only the listing: every file there with its manifest size "
                             "and nothing else (what a rerun checks before skipping a span)")
    spec = sub.add_parser("spec", help="print the tf.io parse spec of a schema", parents=[common])
    spec.add_argument("schema")
    inspect = sub.add_parser("inspect", help="print decoded records of TFRecord files",
                             parents=[common])
    inspect.add_argument("paths", nargs="+")
    inspect.add_argument("--limit", type=int, default=5)
    inspect.add_argument("--schema")
    inspect.add_argument("--images", metavar="DIR",
                         help="also write the image features of the records shown as PNG files "
                              "into DIR")
    _add_infer_schema(sub, common)
    report = sub.add_parser("report", parents=[common],
                            help="statistics, plots and sample images of an output: report.json "
                                 "and a self-contained report.html beside the data")
    report.add_argument("path", metavar="OUT")
    report.add_argument("--against", metavar="OUT2", default=None,
                        help="compare with another output (e.g. yesterday's span) and flag drift")
    report.add_argument("--out", default=None, metavar="DIR",
                        help="write the report files here instead of beside the data")
    q = sub.add_parser("quarantine", parents=[common],
                       help="list, release (publish) or drop the runs a quality check blocked")
    q.add_argument("action", choices=["list", "release", "drop"])
    q.add_argument("output", metavar="OUT",
                   help="the job's output (a dated job: the span's output), as the job names it")
    q.add_argument("--run", default=None, metavar="RUN_ID",
                   help="which quarantined run (needed when there are several)")
    q.add_argument("--all", action="store_true", help="drop: every quarantined run of OUT")


def _add_infer_schema(sub: Any, common: argparse.ArgumentParser) -> None:
    """infer-schema: its sources (files or a database query) and what it writes."""
    infer = sub.add_parser("infer-schema", parents=[common],
                           help="write a schema (YAML) guessed from a sample of the source files")
    infer.add_argument("sources", nargs="*", metavar="SOURCE",
                       help="files, globs or an image folder (IDX: NAME=FILE per feature)")
    infer.add_argument("--sql-url", dest="sql_url", default=None, metavar="URL",
                       help="infer from a database instead: postgresql://user@host:5432/db, "
                            "duckdb:///file.duckdb or sqlite:///file.db (with --query)")
    infer.add_argument("--query", default=None, metavar="Q",
                       help="--sql-url: the SELECT whose rows are the records")
    infer.add_argument("--password-env", dest="password_env", default=None, metavar="VAR",
                       help="--sql-url: the environment variable holding the password")
    infer.add_argument("--key", default=None, metavar="COL",
                       help="--sql-url: an integer column unique per row (the job's key:)")
    infer.add_argument("--format", dest="format", default=None,
                       help="csv, jsonl, parquet, npy, npz, idx, images, text, tfrecord "
                            "(default: from the file names)")
    infer.add_argument("--sample", type=int, default=10_000, metavar="N",
                       help="records read per source to infer from (default 10000)")
    infer.add_argument("--output", "-o", default=None, metavar="SCHEMA.yaml",
                       help="write the schema here (default: standard output); never "
                            "overwrites an existing file")
    infer.add_argument("--job", default=None, metavar="JOB.yaml",
                       help="also write a job file that converts SOURCE with this schema")
    infer.add_argument("--name", default=None, help="the schema's name (default: from the files)")
    infer.add_argument("--checks", action="store_true",
                       help="also propose a checks: block (quality gates) from the sample: in "
                            "the --job file, or printed after the schema is written (needs "
                            "--output)")
    infer.add_argument("--delimiter", default=None, metavar="D",
                       help="CSV: the field delimiter (one character; 'tab' or \\t for a tab); "
                            "default: sniffed from , ; tab | and space")
    infer.add_argument("--encoding", default=None, metavar="E",
                       help="CSV: the text encoding (utf-8, utf-8-sig, latin-1, cp1252, any "
                            "Python codec); default: sniffed (a BOM, UTF-8, else cp1252/latin-1)")
    infer.add_argument("--no-header", dest="no_header", action="store_true",
                       help="CSV: the first row is data (columns named column_0, column_1, ...); "
                            "default: sniffed")



def main(argv: list[str] | None = None, *, owns_process: bool = False) -> int:
    """`owns_process`: the process ends after this call (`entry`), so a run may leave pandas
    out of it (cli.lean_imports.without_pandas)."""
    argv = sys.argv[1:] if argv is None else argv
    args, beam_args = _parser().parse_known_args(argv or ["demo"])
    args.owns_process = owns_process
    if beam_args and args.command not in ("run", "demo"):
        _parser().error(f"unrecognized arguments: {' '.join(beam_args)}")
    debug = bool(getattr(args, "debug", False))
    # the console handler keeps the real stderr even while a run sends fd 2 to its log file
    console = os.fdopen(os.dup(2), "w", buffering=1)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s", stream=console)
    if not debug:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_ours_only)
    verbose = bool(getattr(args, "verbose", False))
    if verbose and os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "2":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"  # our default, not the user's: all of it

    try:
        if args.command in ("run", "demo") and not (getattr(args, "dry_run", False)
                                                     or getattr(args, "estimate", False)):
            check_open_files()  # `ulimit -n` too low: one line now, not gRPC's errors later
        if args.command in ("run", "demo"):
            return _run_or_demo(args, beam_args, debug, verbose, console)
        return _tool(args, verbose)
    except EtlError as e:
        _report(f"error: {e}", e, debug)
        return e.exit_code
    except KeyboardInterrupt as e:  # SIGINT or SIGTERM (etl.base.signals): one line, 130 / 143
        if args.command in ("run", "demo"):  # e.g. while Beam imports: before any run began
            e = signals.as_interrupted(e, signals.UNCHANGED)
        code = getattr(e, "exit_code", 130)
        _report(f"error: {e}" if str(e) else "error: interrupted", e, debug, console)
        return code
    except Exception as e:  # noqa: BLE001 - a bug: still one line, the traceback on --debug
        _report(f"error: unexpected {type(e).__name__}: {e}".splitlines()[0]
                + ("" if debug else " (rerun with --debug for the traceback)"), e, debug)
        return 1
    return 0


def _tool(args: argparse.Namespace, verbose: bool) -> int:
    """The commands around an output (spec, inspect, infer-schema, report, history,
    verify): each imports only its own modules."""
    if args.command == "spec":
        from etl.tools.inspect_output import spec_text  # noqa: PLC0415 - per subcommand: --help stays fast

        _imports_done()
        with native_stderr_quiet(not verbose):  # TensorFlow's start-up lines
            text = spec_text(args.schema)
        print(text)
    elif args.command == "inspect":
        from etl.tools.inspect_output import inspect  # noqa: PLC0415 - per subcommand: --help stays fast

        _imports_done()
        with native_stderr_quiet(not verbose):  # TensorFlow's start-up lines
            blocks = list(inspect(args.paths, limit=args.limit, schema=args.schema,
                                  images=args.images))
        for block in blocks:
            print(block)
    elif args.command == "infer-schema":
        from etl.tools.infer.command import command as infer_command  # noqa: PLC0415 - per subcommand: --help stays fast

        _imports_done()
        return infer_command(args)
    elif args.command == "report":
        from etl.tools.report import command as report_command  # noqa: PLC0415 - per subcommand: --help stays fast

        _imports_done()
        with native_stderr_quiet(not verbose):  # TensorFlow's start-up lines
            return report_command(args)
    elif args.command == "quarantine":
        from cli.quarantine import command as quarantine_command  # noqa: PLC0415 - per subcommand: --help stays fast

        _imports_done()
        return quarantine_command(args)
    elif args.command == "history":
        from etl.schedule import history  # noqa: PLC0415 - per subcommand: --help stays fast

        _imports_done()
        entries = history.read(args.root)
        print(history.format_table(entries) if entries
              else f"no runs recorded in {args.root}")
    elif args.command == "verify":
        from etl.output.lock import read_settled  # noqa: PLC0415 - per subcommand: --help stays fast
        from etl.output.manifest import verify  # noqa: PLC0415 - per subcommand: --help stays fast

        _imports_done()
        # an output a live run is publishing is exit 4, not damage (etl.output.lock)
        report = read_settled(args.path, lambda: verify(args.path, quick=args.quick))
        print(f"OK {report['path']}: {report['records']} records "
              + ", ".join(f"{k}={v}" for k, v in report["splits"].items()))
    return 0


def _run_or_demo(args: argparse.Namespace, beam_args: list[str], debug: bool, verbose: bool,
                 console: Any) -> int:
    """`run` and `demo`."""
    stale = (None if args.lock_stale_after is None
             else parse_duration(args.lock_stale_after, "--lock-stale-after"))
    if args.command == "run":
        return _run_command(args, beam_args, stale, debug, console)
    if not os.path.exists(DEMO_JOB):
        raise ConfigError(f"the demo's job and sample data ({DEMO_JOB}) come with the "
                          "source checkout, not with an installed copy; pass a job "
                          "file: run JOB.yaml")
    from cli import ranges  # noqa: PLC0415 - per subcommand: --help stays fast
    from cli.one_span import Display, run_and_report  # noqa: PLC0415 - per subcommand: --help stays fast

    _imports_done()
    request = ranges.Request(DEMO_JOB, args.output, None, tuple(beam_args),
                             break_lock=args.break_lock, lock_stale_after=stale,
                             capture_stderr=not debug, owns_process=args.owns_process)
    return run_and_report(request, Display(True, verbose, args.progress, args.progress_every,
                                           console))


def _run_command(args: argparse.Namespace, beam_args: list[str], stale: float | None,
                 debug: bool, console: object = None) -> int:
    """`run`: one span (today's summary), a range (one line per span), or a dry run. Arguments
    and the job are checked before Beam is imported: a mistake is reported in well under 1 s."""
    from cli import ranges  # noqa: PLC0415 - per subcommand: --help stays fast
    if args.parallel < 1:
        raise ConfigError(f"--parallel must be at least 1, got {args.parallel}")
    spans = ranges.resolve_spans(args.date, args.first, args.last, args.reverse)
    jobs = ranges.load_spans(args.job, args.output, spans, args.verify_full)
    if args.dry_run:
        _imports_done()
        return ranges.dry_run(jobs, args.only, args.force, args.allow_missing)
    if args.estimate:
        from cli.estimate import estimate_report  # noqa: PLC0415 - imports Beam

        _imports_done()
        worst = 0
        for job in jobs:
            shown, code = estimate_report(job, beam_args)
            print("\n".join(shown))
            worst = ranges.worst([worst, code])
        return worst
    if args.first is None:
        from cli.one_span import Display, run_and_report  # noqa: PLC0415 - imports Beam

        _imports_done()
        display = Display(args.sample, bool(getattr(args, "verbose", False)), args.progress,
                          args.progress_every, console)  # type: ignore[arg-type]
        return run_and_report(_request(args, beam_args, stale, debug,
                                       spans[0].name if spans else None), display, args.only)
    requests = [_request(args, beam_args, stale, debug, job.span) for job in jobs]
    if args.parallel > 1:  # spans run in workers: only they need Beam
        _imports_done()
        return ranges.run_range(jobs, requests, args.only, args.parallel, debug=debug)
    from cli.lean_imports import (  # noqa: PLC0415 - only where spans run here
        cloud_io_needed,
        pandas_unused,
        unused_by,
        without_pandas,
        without_unused_extras,
    )

    runner = ranges.runner_of(beam_args)
    sources = [source for job in jobs for source in job.sources.values()]
    with without_pandas(args.owns_process and pandas_unused(sources, runner)):
        cloud_io = cloud_io_needed(args.owns_process, jobs, beam_args)
        with without_unused_extras(unused_by(runner, cloud_io=cloud_io)):
            import cli.run  # noqa: F401, PLC0415 - Beam loaded here, not per span
        _imports_done()
        return ranges.run_range(jobs, requests, args.only, args.parallel, debug=debug)


def _request(args: argparse.Namespace, beam_args: list[str], stale: float | None,
             debug: bool, span: str | None) -> Request:
    """`run`'s options for one span (cli.ranges.Request): the one-span path and every span
    of a range get the same."""
    from cli import ranges  # noqa: PLC0415 - per subcommand: --help stays fast

    return ranges.Request(args.job, args.output, span, tuple(beam_args), force=args.force,
                          allow_missing=args.allow_missing, break_lock=args.break_lock,
                          lock_stale_after=stale, capture_stderr=not debug,
                          report=args.report, verify_full=args.verify_full, accept=args.accept,
                          owns_process=args.owns_process)


def _ours_only(record: logging.LogRecord) -> bool:
    """Without --debug the console shows our own warnings (and Beam's option warnings, e.g. a
    misspelt option); the runner's worker errors and tracebacks go to the run's log file."""
    name = record.name
    return (name.split(".", 1)[0] in ("etl", "transforms", "cli", "__main__", "root")
            or name.startswith("apache_beam.options"))


def _report(line: str, exc: BaseException, debug: bool, stream: object = None) -> None:
    """The one error line (after a signal on `stream`, the terminal's own stderr: fd 2 may
    stay with the run's log while Beam's threads unwind)."""
    out = stream if stream is not None else sys.stderr
    if debug:
        traceback.print_exception(exc, file=out)  # type: ignore[arg-type]
    print(line, file=out)  # type: ignore[arg-type]
    if stream is not None:
        stream.flush()  # type: ignore[attr-defined]


def _imports_done() -> None:
    """cli.gc_imports.imports_done, under the name benchmarks.fixed_cost stamps ("imports
    done") in this checkout and in older ones."""
    imports_done()


def _main_handling_signals() -> int:
    code: int | None = None
    try:
        with signals.handled(then_ignore=True):  # the process ends after main
            code = main(owns_process=True)
    except KeyboardInterrupt:
        if code is None:
            raise
        # a signal as main returned: its outcome is told already (a published output stays
        # published), and it is what the exit code says
    assert code is not None
    return code


def entry() -> int:
    """`python run_pipeline.py ...`: main() with SIGINT/SIGTERM handled, and one line with
    exit 130 / 143 for a signal that lands before the handler is in place (while Python
    still imports our modules: run_pipeline.py raises it as a KeyboardInterrupt carrying the
    signal's number: cli.launch)."""
    try:
        pause("start")  # tests: a signal before main's handler is installed
        code = _main_handling_signals()
    except KeyboardInterrupt as e:
        stopped = signals.as_interrupted(e, signals.UNCHANGED)
        print(f"error: {stopped}", file=sys.stderr)
        code = stopped.exit_code
    gc.freeze()  # nothing left to collect that the OS will not reclaim faster at exit
    return code
