"""Run a job for several date spans: oldest first, one line per span, the worst exit code.

`run JOB --from D1 --to D2` converts each day of the range as its own run of the job (its own
lock, manifest and `_SUCCESS`; cli.run.run_job), continues after a failed span and
exits with the worst code of its spans. What is worst, mildest first:

    0 ok or skipped  <  4 locked  <  5 storage  <  6 blocked  <  3 bad input  <  2 bad config
    <  1 other

Codes a later retry can clear (another run holds the span; a storage hiccup) rank below those
that need a person (a span a quality check blocked, bad data, a bad job), and an unexpected
error ranks highest because nothing is known about it. A blocked span ranks lowest of those:
the run worked and kept its data in quarantine, a person only has to decide; bad input and a
bad job mean something is broken. So a script can retry later when a range exits 4 or 5: every
failed span failed for a reason that may pass.

`--only missing` runs the spans whose output has no `_SUCCESS`, `--only failed` those whose
last entry in the run history failed, `--only all` (default) every span; run_job itself still
skips a span whose published output is current (unless `--force`). `--dry-run` prints what
each span would do and why, running nothing. `--parallel N` runs up to N spans at once, each
in its own worker process (Beam's local runner is not made to run several pipelines in one
process at once); lines are still printed in span order. On two cores it gains nothing (one
local pipeline already keeps both busy; figures in benchmarks/README.md, "Parallel spans"):
it is for machines with more cores than a span's pipeline uses, or spans that wait on remote
storage.

Beam is imported only where a span really runs (run_span), so planning and dry runs are fast.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.util
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from cli.bounded_exit import bounded_exit
from cli.lean_imports import unused_by, without_unused_extras
from etl.base import signals
from etl.base.errors import (
    EXIT_BAD_INPUT,
    EXIT_BLOCKED,
    EXIT_CONFIG,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_OTHER,
    EXIT_STORAGE,
    ConfigError,
    EtlError,
)
from etl.base.pause import pause
from etl.base.quiet import native_stderr_quiet
from etl.base.runners import is_local
from etl.job.config import JobConfig, input_places, job_from_dict, load_job
from etl.job.spans import Span, fill, parse_date, placeholders, span_range, strings_in
from etl.output.layout import SUCCESS
from etl.output.place import place_for
from etl.output.remote import check_buckets
from etl.schedule import history, idempotence
from etl.storage import fs

log = logging.getLogger(__name__)
# mildest first (see the module docstring for why)
SEVERITY = (EXIT_OK, EXIT_LOCKED, EXIT_STORAGE, EXIT_BLOCKED, EXIT_BAD_INPUT, EXIT_CONFIG,
            EXIT_OTHER)
ONLY = ("missing", "failed", "all")


def worst(codes: list[int]) -> int:
    """The exit code of a range: its most severe span's (an unknown code counts as 1)."""
    rank = {c: i for i, c in enumerate(SEVERITY)}
    code = max(codes, key=lambda c: rank.get(c, rank[EXIT_OTHER]), default=EXIT_OK)
    return code if code in rank else EXIT_OTHER


def resolve_spans(date: str | None, first: str | None, last: str | None,
                  reverse: bool = False) -> list[Span] | None:
    """The spans asked for on the command line; None when none was (the job decides)."""
    if date is not None and (first is not None or last is not None):
        raise ConfigError("give --date D or --from D1 --to D2, not both")
    if (first is None) != (last is None):
        raise ConfigError("--from and --to go together (both dates included)")
    if date is not None:
        spans = [parse_date(date, "--date")]
    elif first is not None and last is not None:
        spans = span_range(parse_date(first, "--from"), parse_date(last, "--to"))
    else:
        return None
    return spans[::-1] if reverse else spans


@dataclass(frozen=True)
class Request:
    """One span's run, as a worker process receives it (plain values: picklable)."""

    job_path: str
    output: str | None
    span: str | None  # None: the job's own default (yesterday for a templated job)
    beam_args: tuple[str, ...] = ()
    force: bool = False
    allow_missing: bool = False
    break_lock: bool = False
    lock_stale_after: float | None = None
    capture_stderr: bool = True
    report: bool = False  # --report: a report beside each span's published data (report_span)
    verify_full: bool = False  # --verify-full: every byte checked before a span is skipped
    accept: bool = False  # --accept: a span a block: check fails publishes (etl.quality.gate)
    owns_process: bool = False  # the process ends after it: pandas may be left out (one span)


def load_request(req: Request) -> JobConfig:
    """The request's job, filled for its span; with --report it gathers the statistics the
    report is built from."""
    job = load_job(req.job_path, req.output, parse_date(req.span) if req.span else None,
                   req.verify_full)
    return dataclasses.replace(job, stats=True) if req.report else job


@dataclass
class Outcome:
    """What became of one span: status ok | skipped | failed, and what to print."""

    span: str | None
    status: str
    exit_code: int = EXIT_OK
    output: str = ""
    records: int = 0
    seconds: float = 0.0
    reason: str = ""  # why it was skipped, or the one-line error
    result: Any = field(default=None, repr=False)  # the JobResult of a run that published
    report: str = ""  # --report: where the span's report is and what its drift check found

    def line(self) -> str:
        """`2026-11-20  ok       1,500 records  out/daily/2026-11-20  12.3s`, and with
        --report a second line `            report out/daily/2026-11-20/report.json; ...`"""
        head = f"{self.span or '-':<10}  "
        if self.status == "ok":
            text = (f"{head}ok       {self.records:>9,} records  {self.output}  "
                    f"{self.seconds:.1f}s")
        elif self.status == "skipped":
            text = f"{head}skipped  {self.reason}"
        elif self.status == "interrupted":
            text = f"{head}interrupted (exit {self.exit_code})  {self.reason}"
        else:
            text = f"{head}failed (exit {self.exit_code})  {self.reason}"
        return text + (f"\n{'':<12}{self.report}" if self.report else "")


class ReportFailed(EtlError):
    """`run --report`: the span's data is published, only its report failed; the exit code is
    the report error's (e.g. 3 for a previous span's output that cannot be read, 5 storage)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def previous_output(job: JobConfig, output: str | None = None) -> str | None:
    """The output of the span before `job`'s (same job and `--output`, span - 1 day), which
    `run --report` compares with; None when the output holds no date placeholder (every span
    writes the same output: there is no previous one to compare with)."""
    template = output if output is not None else job.raw.get("output")
    if job.span is None or not isinstance(template, str) or not placeholders(template):
        return None
    before = Span(parse_date(job.span).date - dt.timedelta(days=1))
    return job_from_dict(job.raw, job.path, job.base_dir, output, before).output


def report_span(job: JobConfig, output: str | None, keep_current: bool, quiet: bool = True) -> Any:
    """`run --report` after a span is published (or skipped as current: `keep_current` then
    leaves a current report alone): etl.tools.report.for_run against the previous span's output,
    with TensorFlow's start-up lines hidden when `quiet`. Any failure becomes a ReportFailed
    saying the data IS published, with the error's exit code."""
    from etl.tools.report import for_run  # noqa: PLC0415 - only with --report: --dry-run stays light

    try:
        with native_stderr_quiet(quiet):  # the report decodes records with TensorFlow
            return for_run(job.output, previous_output(job, output), keep_current=keep_current)
    except EtlError as e:
        code = e.exit_code
        reason = _one_line(e)
    except Exception as e:  # noqa: BLE001 - a bug or an unmapped I/O error: still this line
        code = EXIT_OTHER
        reason = _one_line(f"unexpected {type(e).__name__}: {e}")
    span = f" of span {job.span}" if job.span else ""
    raise ReportFailed(f"the data{span} WAS published to {job.output}; only its report failed "
                       f"(rerun to make just the report): {reason}", code)


def missing_inputs(job: JobConfig) -> list[str]:
    """`sources.NAME.paths PATTERN` for each of the span's dated patterns that matches no file
    (nor a directory: image roots). Undated patterns are left to the run's own check: a
    missing fixed file is a job error, not a day without data."""
    if job.span is None:
        return []
    span = parse_date(job.span)
    entries = {"*": job.raw["source"]} if "source" in job.raw else dict(job.raw.get("sources", {}))
    missing = []
    for name, cfg in entries.items():
        for text in strings_in(cfg.get("paths") if isinstance(cfg, dict) else None):
            if not placeholders(text):
                continue
            pattern = fs.resolve(job.base_dir, fill(text, span))
            try:
                found = bool(fs.expand(pattern)) or fs.isdir(pattern)
            except OSError:
                continue  # a missing bucket: the run reports it as the storage error it is
            if not found:
                where = "source" if name == "*" else f"sources.{name}"
                missing.append(f"{where}.paths {pattern}")
    return missing


def missing_error(job: JobConfig, missing: list[str]) -> ConfigError:
    return ConfigError(f"no input files for span {job.span}: {'; '.join(missing)} matches no "
                       "file; nothing was published (pass --allow-missing to skip such spans)")


def missing_reason(job: JobConfig) -> str:
    return f"no input files for span {job.span}"


def check_inputs(job: JobConfig, allow_missing: bool) -> str:
    """'' when the span has its dated inputs. Without them: the skip reason with
    `allow_missing`, else a ConfigError naming the span and the pattern (exit 2). Nothing is
    published either way; the outcome goes to the run history like any run's."""
    started = time.time()
    missing = missing_inputs(job)
    if not missing:
        return ""
    error = None if allow_missing else missing_error(job, missing)
    _record(job, started, "failed" if error else "skipped",
            "" if error else missing_reason(job), str(error or ""),
            error.exit_code if error else EXIT_OK)
    if error is not None:
        raise error
    return missing_reason(job)


def record_interrupted(job: JobConfig, started: float, stopped: BaseException) -> None:
    """The history entry of a span stopped by a signal before run_job (which records its
    own) began: only beside a local history that exists, as run_job records a failure
    before its output is accepted (nothing created, no store waited on)."""

    root = history.history_root(job.output)
    if not history.exists_on_disk(root):
        return
    _record(job, started, "interrupted", "", str(stopped), getattr(stopped, "exit_code", 130))


def _record(job: JobConfig, started: float, status: str, reason: str, error: str,
            exit_code: int) -> None:
    """One history entry for a span that never reached run_job (which records its own)."""

    run_id = (dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-"
              + uuid.uuid4().hex[:8])
    try:
        history.append(history.history_root(job.output), history.entry(
            run_id=run_id, span=job.span, start=history.iso(started),
            end=history.iso(time.time()), status=status, skipped_reason=reason or None,
            exit_code=exit_code, error=error or None, output=job.output))
    except (OSError, EtlError) as e:  # the history is a record, not a reason to fail the span
        log.warning("could not add to the run history of %s: %s", job.output, e)


def skip_if_current(job: JobConfig, beam_args: list[str] | tuple[str, ...],
                    force: bool = False) -> str:
    """The skip reason when `job`'s local output is published and current, decided without
    importing Beam (about 1 s of start-up: a daily rerun that has nothing to do should cost
    a fraction of that); the skip is recorded in the run history as run_job records it. ""
    sends the span to run_job, which decides everything else itself (gs:// outputs, another
    runner, leftovers of a run in the output's work dir, --force)."""

    runner = runner_of(list(beam_args))
    place = place_for(job.output)
    if force or not place.read_without_a_store or not is_local(runner):
        return ""
    started = time.time()
    verdict = idempotence.verdict(job)
    if not verdict.current or place.has_leftover_runs():
        return ""
    published = idempotence.published_manifest(job.output) or {}
    run_key = str(published.get("run_key") or "")
    try:
        history.append(history.history_root(job.output), history.entry(
            run_id=idempotence.new_run_id(run_key), run_key=run_key or None,
            span=job.span, start=history.iso(started), end=history.iso(time.time()),
            status="skipped", skipped_reason=verdict.reason, exit_code=EXIT_OK, error=None,
            counts={"read": 0, "written": 0, "rejected": 0}, output=job.output,
            runner=runner or "FnApiRunner", dataflow_job_id=None))
    except (OSError, EtlError) as e:  # the history is a record, not a reason to fail the span
        log.warning("could not add to the run history of %s: %s", job.output, e)
    return verdict.reason


def runner_of(beam_args: list[str]) -> str | None:
    """`--runner` among Beam's arguments (`--runner=X` or `--runner X`), else None."""
    for i, arg in enumerate(beam_args):
        if arg.startswith("--runner="):
            return arg.split("=", 1)[1]
        if arg == "--runner" and i + 1 < len(beam_args):
            return beam_args[i + 1]
    return None


def run_span(req: Request) -> Outcome:
    """Load, check and run one span; every failure becomes a failed Outcome (never raises
    but for KeyboardInterrupt), so a range goes on with its next span."""
    started = time.time()
    span = req.span
    try:
        job = load_request(req)
        span = job.span
        check_buckets(input_places(job.sources, job.base_dir))  # else "no input files"
        skipped = check_inputs(job, req.allow_missing)
        if skipped:
            return Outcome(span, "skipped", output=job.output, reason=skipped,
                           seconds=time.time() - started)
        skipped = skip_if_current(job, req.beam_args, req.force)
        if skipped:
            outcome = Outcome(span, "skipped", output=job.output, reason=skipped,
                              seconds=time.time() - started)
            return _with_report(outcome, job, req, keep_current=True)
        with without_unused_extras(unused_by(runner_of(list(req.beam_args)))):
            from cli.run import run_job  # noqa: PLC0415 - Beam: only where a span runs

        stale = {} if req.lock_stale_after is None else {"lock_stale_after": req.lock_stale_after}
        result = run_job(job, list(req.beam_args), force=req.force, break_lock=req.break_lock,
                         capture_stderr=req.capture_stderr, accept=req.accept, **stale)
    except EtlError as e:
        return Outcome(span, "failed", e.exit_code, req.output or "", reason=_one_line(e),
                       seconds=time.time() - started)
    except Exception as e:  # noqa: BLE001 - a bug in one span: reported on its line
        return Outcome(span, "failed", EXIT_OTHER, req.output or "",
                       reason=_one_line(f"unexpected {type(e).__name__}: {e}"),
                       seconds=time.time() - started)
    skipped = getattr(result, "skipped", "")
    if skipped:
        return _with_report(Outcome(span, "skipped", output=result.output, reason=skipped,
                                    seconds=result.seconds, result=result),
                            job, req, keep_current=True)
    records = sum(int(s.get("num_records", 0)) for s in result.splits.values())
    outcome = Outcome(span, "ok", output=result.output, records=records, seconds=result.seconds,
                      result=result)
    # a launch (Dataflow dry run, template) published nothing: no report either
    return outcome if result.launched else _with_report(outcome, job, req)


def _with_report(outcome: Outcome, job: JobConfig, req: Request,
                 keep_current: bool = False) -> Outcome:
    """With --report, the span's report made after its data: the outcome's second line, or
    a failed outcome (the report error's exit code) that says the data is published."""
    if not req.report:
        return outcome
    try:
        outcome.report = report_span(job, req.output, keep_current, req.capture_stderr).brief
    except ReportFailed as e:
        outcome.status, outcome.exit_code, outcome.reason = "failed", e.exit_code, str(e)
    return outcome


def _one_line(e: BaseException | str) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


@dataclass(frozen=True)
class Decision:
    """What a span would do (dry run) or is left out of (`--only`)."""

    span: str | None
    action: str  # run | skip | fail
    reason: str
    output: str
    exit_code: int = EXIT_OK

    def line(self) -> str:
        head = f"{self.span or '-':<10}  "
        if self.action == "run":
            return f"{head}would run   {self.output}  ({self.reason})"
        if self.action == "skip":
            return f"{head}would skip  {self.reason}"
        return f"{head}would fail (exit {self.exit_code})  {self.reason}"


def published(job: JobConfig) -> bool:
    return fs.exists(fs.join(job.output, SUCCESS))


def last_failed(job: JobConfig) -> bool:
    """Whether the span's last recorded run failed (etl.schedule.history)."""

    entries = [e for e in history.read(history.history_root(job.output))
               if e.get("span") == job.span and e.get("output", job.output) == job.output]
    return bool(entries) and entries[-1].get("status") == "failed"


def not_selected(job: JobConfig, only: str) -> str:
    """Why `--only` leaves the span out; '' when it runs."""
    if only == "missing" and published(job):
        return "published (_SUCCESS present); --only missing"
    if only == "failed" and not last_failed(job):
        return "its last run did not fail; --only failed"
    return ""


def decide(job: JobConfig, only: str, force: bool, allow_missing: bool) -> Decision:
    """What a run of this span would do and why, touching nothing (the dry run)."""
    left_out = not_selected(job, only)
    if left_out:
        return Decision(job.span, "skip", left_out, job.output)
    missing = missing_inputs(job)
    if missing:
        if allow_missing:
            return Decision(job.span, "skip", missing_reason(job), job.output)
        return Decision(job.span, "fail", str(missing_error(job, missing)), job.output,
                        EXIT_CONFIG)
    if force:
        return Decision(job.span, "run", "--force", job.output)
    if not published(job):
        return Decision(job.span, "run", "not published yet", job.output)

    verdict = getattr(idempotence, "verdict", None)
    if verdict is not None:  # says why a span runs, too
        v = verdict(job)
        return Decision(job.span, "skip" if v.current else "run", v.reason, job.output)
    reason = idempotence.current_reason(job)
    if reason:
        return Decision(job.span, "skip", reason, job.output)
    return Decision(job.span, "run", "published, but its inputs, schema or job changed",
                    job.output)


def load_spans(job_path: str, output: str | None, spans: list[Span] | None,
               verify_full: bool = False) -> list[JobConfig]:
    """The job filled for every span, before anything runs: a job error (an unknown
    placeholder, a span for a job without placeholders) stops the range at once, exit 2."""
    if spans is None:
        return [load_job(job_path, output, verify_full=verify_full)]
    return [load_job(job_path, output, s, verify_full) for s in spans]


def dry_run(jobs: list[JobConfig], only: str, force: bool, allow_missing: bool,
            out: Callable[[str], None] = print) -> int:
    """Print what each span would do and why; runs and changes nothing: exit 0."""
    decisions = [decide(job, only, force, allow_missing) for job in jobs]
    for d in decisions:
        out(d.line())
    counts = {a: sum(1 for d in decisions if d.action == a) for a in ("run", "skip", "fail")}
    out(f"dry run: {counts['run']} would run, {counts['skip']} would be skipped, "
        f"{counts['fail']} would fail; nothing was run")
    return EXIT_OK


def run_range(jobs: list[JobConfig], requests: list[Request], only: str, parallel: int = 1,
              out: Callable[[str], None] = print, debug: bool = False) -> int:
    """Run the spans (one line each, in span order) and return the worst exit code.
    A signal (etl.base.signals) ends the range: no span starts after it, the spans that ran say
    so on their lines, and Interrupted goes up to the command line with what became of the
    range as its text."""
    slots: list[Outcome | None] = []  # None: the next result of the spans that run
    todo: list[Request] = []
    for job, req in zip(jobs, requests, strict=True):
        left_out = not_selected(job, only) if only != "all" else ""
        if left_out:
            slots.append(Outcome(job.span, "skipped", output=job.output, reason=left_out))
        else:
            slots.append(None)
            todo.append(req)
    outcomes: list[Outcome] = []
    taken = 0  # outcomes of `todo` printed so far
    try:
        # closed here, not when collected: a range's worker pool is shut down before its
        # summary line, and a signal meanwhile is told as the range's like any other
        with closing(_run_all(todo, parallel, debug)) as results:
            for slot in slots:
                outcome = slot
                if outcome is None:
                    outcome = next(results)
                    taken += 1
                outcomes.append(outcome)
                out(outcome.line())
    except signals.Interrupted as e:
        late = getattr(e, "outcomes", [])  # --parallel: every span's, in request order
        for outcome in late[taken:]:
            if outcome is not None:
                outcomes.append(outcome)
                out(outcome.line())
        done = sum(1 for o in outcomes if o.status != "interrupted")
        e.when = (f"after {done} of {len(slots)} span(s); no further span was started"
                  + (f" ({e.when})" if e.when else ""))
        raise
    n = {s: sum(1 for o in outcomes if o.status == s) for s in ("ok", "skipped", "failed")}
    code = worst([o.exit_code for o in outcomes])
    out(f"{len(outcomes)} span(s): {n['ok']} ok, {n['skipped']} skipped, {n['failed']} failed "
        f"(exit {code})")
    return code


def _run_all(todo: list[Request], parallel: int, debug: bool) -> Iterator[Outcome]:
    """Sequentially in this process, or up to `parallel` at once in worker processes; the
    outcomes come back in request order either way. After a signal none starts."""
    if parallel <= 1 or len(todo) <= 1:
        for i, req in enumerate(todo):
            if i:
                pause("between-spans")
            yield run_span(req)
        return
    ctx = worker_context()
    stop = ctx.Event()
    pool = ProcessPoolExecutor(max_workers=min(parallel, len(todo)), mp_context=ctx,
                               initializer=_worker_setup, initargs=(debug, stop))
    futures: list[Future[Outcome]] = []
    try:
        # the workers start here (the first waits for the fork server to import Beam): a
        # signal meanwhile is raised once they all are, so none is left half-started, unknown
        # to the pool, to fail on its own after this process went (its stop event gone)
        with signals.deferred():
            futures = [pool.submit(_worker_span, r) for r in todo]
            pause("range:workers")
        signals.raise_pending()
        for f in futures:
            outcome = f.result()
            if outcome.status == "interrupted":  # a worker got the signal first
                raise signals.Interrupted(outcome.exit_code - 128)
            yield outcome
    except GeneratorExit:  # run_range is done with the outcomes (it closes the generator)
        with signals.deferred():  # the idle workers end (each within its bounded exit)
            _stop_pool(pool, stop, futures)
        signals.raise_pending()  # a signal meanwhile: the range was stopped all the same
        raise
    except BaseException as e:  # a signal, or a failure in the pool
        _stop_pool(pool, stop, futures, getattr(e, "signum", signal.SIGINT)
                   if isinstance(e, KeyboardInterrupt) else None)
        if isinstance(e, signals.Interrupted):  # what the workers did meanwhile
            e.outcomes = [_finished(f) for f in futures]  # type: ignore[attr-defined]
        raise


def _stop_pool(pool: ProcessPoolExecutor, stop: Any, futures: list[Future[Outcome]],
               signum: int | None = None) -> None:
    """No span starts any more; the ones that run get `signum` (if any) and end; then the
    workers do."""
    stop.set()  # before the signal goes on: a worker checks it after arming
    for f in futures:
        f.cancel()
    if signum is not None:
        _forward(pool, signum)
    pool.shutdown(wait=True, cancel_futures=True)


def _finished(f: Future[Outcome]) -> Outcome | None:
    """A worker's outcome once the range stopped: None if its span never started."""
    if f.cancelled() or not f.done() or f.exception() is not None:
        return None
    outcome = f.result()
    return None if outcome.reason == NOT_STARTED else outcome


NOT_STARTED = "not started: the range was interrupted"


def _forward(pool: ProcessPoolExecutor, signum: int) -> None:
    """The signal to every worker process (a SIGTERM sent to this process alone, as a
    scheduler may send it, reaches the spans running in workers too). A worker that is
    idle ignores it; one running a span stops it cleanly (its history says so)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            os.kill(proc.pid, signum)
        except (ProcessLookupError, AttributeError, TypeError):
            pass


_stop: Any = None  # in a worker process: the range's stop event (set by _worker_setup)


def _worker_setup(debug: bool, stop: Any) -> None:
    """A worker process: logging as the command line's; signals ignored while idle (the
    parent decides: it sets `stop` and forwards the signal to the spans that run); and an
    exit that no thread can hold: a span's pipeline stopped by a signal, or a user's
    generator, may leave a non-daemon thread blocked, which Python's exit would wait for
    (and the range's pool with it) for ever."""
    global _stop  # noqa: PLW0603 - per worker process, set once by the pool's initializer
    _stop = stop
    for s in signals.HANDLED:
        signal.signal(s, signal.SIG_IGN)
    # multiprocessing runs its exit finalizers when the worker leaves its loop, before it
    # joins the threads: the grace timer starts there
    multiprocessing.util.Finalize(None, bounded_exit, args=(0,), exitpriority=0)
    _worker_logging(debug)


def _worker_span(req: Request) -> Outcome:
    """run_span in a worker: not started once the range was stopped; a signal while it runs
    ends it as an "interrupted" outcome (its history entry written by run_job; one stopped
    while it loaded its job, before its run began, has none, and says what became of its
    output as a run would: nothing was published)."""
    with signals.handled():
        try:
            if _stop is not None and _stop.is_set():
                return Outcome(req.span and str(req.span), "interrupted", 130, req.output or "",
                               reason=NOT_STARTED)
            return run_span(req)
        except KeyboardInterrupt as e:
            stopped = signals.as_interrupted(e, signals.UNCHANGED)
            return Outcome(req.span and str(req.span), "interrupted", stopped.exit_code,
                           req.output or "", reason=fs.first_line(stopped))


def worker_context() -> Any:
    """Workers forked from a fork server that imported Beam once, before any thread or
    pipeline existed: no import per worker (~2 s each), and no thread state inherited from
    this process. A forked worker also ends without the interpreter's slow teardown of Beam
    and TensorFlow (pool shutdown: benchmarks/README.md, "Parallel spans"). The fork server
    and its workers ignore SIGINT and SIGTERM from their first instruction (cli.fork_server).
    Where there is no fork server (Windows), fresh interpreters (spawn)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["cli.fork_server", "cli.run"])
    with signals.blocked():  # until cli.fork_server, first thing, ignores them
        multiprocessing.forkserver.ensure_running()
    return ctx


def _worker_logging(debug: bool) -> None:
    """A worker's console shows what the command line's does: our warnings (all on --debug)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if not debug:
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda r: r.name.split(".", 1)[0] in ("etl", "transforms", "cli", "root")
                              or r.name.startswith("apache_beam.options"))


__all__ = ["ONLY", "SEVERITY", "Decision", "Outcome", "Request", "decide", "dry_run",
           "load_request", "load_spans", "missing_inputs", "resolve_spans", "run_range",
           "run_span", "worst"]
