"""Run one span from the command line (`run JOB`, `demo`): the checks that need no Beam (left
out by --only, no dated inputs, already current), then run_job, then its summary (cli.summary).
A range of spans goes through cli.ranges instead, with the same Request per span.

Beam is imported only once a span really runs, so a daily rerun that has nothing to do
decides so in a fraction of a second."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TextIO

from cli.gc_imports import importing
from cli.lean_imports import (
    cloud_io_needed,
    pandas_unused,
    unused_by,
    without_pandas,
    without_unused_extras,
)
from cli.ranges import (
    Request,
    check_inputs,
    load_request,
    not_selected,
    record_interrupted,
    runner_of,
    skip_if_current,
)
from cli.summary import print_report, print_result
from etl.base import signals
from etl.base.pause import pause
from etl.base.runners import is_local
from etl.job.config import JobConfig, input_places
from etl.job.spans import Span
from etl.output.remote import check_buckets
from etl.run.progress import DEFAULT_EVERY, resolve
from transforms import early_read


@dataclass(frozen=True)
class Display:
    """What the command line shows of a run: `progress` (auto, bar, lines, none) drawn on
    `progress_stream` (the real stderr: a duplicate taken before a run sends fd 2 to its log
    file), a `sample` record after the summary, every library's lines when `verbose`."""

    sample: bool = False
    verbose: bool = False
    progress: str = "none"
    progress_every: float = DEFAULT_EVERY
    progress_stream: TextIO | None = None


def run_and_report(request: Request, display: Display, only: str = "all") -> int:
    """One span (or a job without placeholders). Without --debug (`request.capture_stderr`),
    worker tracebacks go to the run's log file only (see run_job). A skipped span prints one
    line saying why: exit 0. `request.report` (`run --report`): after the data is published, or
    when the span is skipped as current, its report (etl.tools.report.for_run); a failing
    report raises ReportFailed (the report error's exit code) saying the data was published."""
    started = time.time()
    job = load_request(request)
    runner = runner_of(list(request.beam_args))
    # from before the early read's first pa.array to the end (cli/lean_imports.py)
    with without_pandas(request.owns_process and pandas_unused(job.sources.values(), runner)):
        return _run_loaded(job, request, display, only, started, runner)


def _run_loaded(job: JobConfig, request: Request, display: Display, only: str, started: float,
                runner: str | None) -> int:
    early = None
    try:
        ran = _before_run(job, request, only, display.verbose)
        if ran is not None:
            return ran
        # the inputs are read while Beam is imported (transforms/early_read.py)
        early = early_read.start(job) if is_local(runner) else None
        pause("imports")  # tests: a signal while Beam is imported (about 1.5 s)
        # cli.main turned the GC on after the job's imports; Beam's clients: cli/lean_imports.py
        cloud_io = cloud_io_needed(request.owns_process, [job], request.beam_args)
        with importing(), without_unused_extras(unused_by(runner, cloud_io=cloud_io)):
            from cli.run import run_job  # noqa: PLC0415 - Beam: only when something runs
    except KeyboardInterrupt as e:  # before run_job: nothing of this run can be published
        if early is not None:
            early.cancel()
        stopped = signals.as_interrupted(e, signals.UNCHANGED)
        record_interrupted(job, started, stopped)
        raise stopped from None

    stale = ({} if request.lock_stale_after is None
             else {"lock_stale_after": request.lock_stale_after})
    shown = resolve(display.progress, display.progress_stream, display.progress_every)
    try:
        result = run_job(job, list(request.beam_args), force=request.force,
                         break_lock=request.break_lock, capture_stderr=request.capture_stderr,
                         progress=shown, accept=request.accept, early=early, **stale)
    finally:
        if early is not None:  # not taken: the run did not read here, or ended first
            early.cancel()
    try:
        return print_result(job, result, request.output, display.sample, display.verbose,
                            request.report)
    except KeyboardInterrupt as e:  # run_job is done: say whether its output is in place
        published = not (getattr(result, "skipped", "") or result.launched)
        raise signals.as_interrupted(
            e, signals.PUBLISHED if published else signals.UNCHANGED) from None


def run_keywords(job_path: str, output: str | None, beam_args: list[str], sample: bool,
                 span: Span | None = None, debug: bool = False, verbose: bool = False,
                 only: str = "all", **request: Any) -> int:
    """run_and_report from keywords, as a script calls it (tests/test_backfill.py): `request`
    holds Request's other fields (force, allow_missing, break_lock, report, ...)."""
    return run_and_report(Request(job_path, output, span.name if span else None,
                                  tuple(beam_args), capture_stderr=not debug, **request),
                          Display(sample, verbose), only)


def _before_run(job: JobConfig, request: Request, only: str, verbose: bool) -> int | None:
    """What happens before a span runs (left out, no inputs, current): its exit code, or
    None when run_job has work to do."""
    label = f"{job.span} ({job.output})" if job.span else job.output
    check_buckets(input_places(job.sources, job.base_dir))  # before they are matched
    left_out = not_selected(job, only) if only != "all" else ""
    if left_out:
        print(f"Skipped {label}: {left_out}")
        return 0
    skipped = check_inputs(job, request.allow_missing)
    if skipped:
        print(f"Skipped {label}: {skipped}")
        return 0
    skipped = skip_if_current(job, list(request.beam_args), request.force)
    if skipped:
        print(f"Skipped {label}: {skipped}")
        if request.report:
            print_report(job, request.output, not verbose, keep_current=True)
        return 0
    return None
