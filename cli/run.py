"""Run one job file end to end: preflight, lock, run the Beam pipeline, check, publish.

Before any work: inputs exist and are readable, the output is not refused (etl.output.guard:
only an empty directory or a previous output of ours is ever replaced), its location is
writable and has room. Then the output's lock is taken (etl.output.lock), leftovers of dead
runs are cleared, and the pipeline writes into this run's own directory in the work dir
`.{name}.etl/` beside the output; only after every count and checksum is in, the manifest is
written and the result is published, `_SUCCESS` last (etl.output.publish). A failed run leaves the
previous output untouched. Every failure leaves as one EtlError with a clean message naming
the run's log file, which holds the full traceback.

Before any of that, a rerun whose output is published and current (the same job, span,
schema and input bytes: etl.schedule.idempotence) is skipped: no lock, no pipeline. Every run, skipped
or failed too, adds one entry to the run history beside the outputs (etl.schedule.history).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NoReturn

from cli.lean_imports import without_unused_extras

with without_unused_extras():  # Beam's import without what no run uses (cli/lean_imports.py)
    import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
    TestOptions,
)
from apache_beam.utils.shared import Shared

from etl.base import signals
from etl.base.errors import BadInputError, BlockedError, ConfigError, EtlError, LockedError
from etl.base.inflight import InFlight
from etl.base.pause import pause
from etl.base.runners import is_local
from etl.base.worker_errors import (
    describe_unexpected,
    fds_ran_out,
    naming_log,
    original_error,
    storage_error,
    too_many_open_files,
)
from etl.contract.schema import Schema, load_schema
from etl.job.config import DEFAULT_SPLIT_BYTES, JobConfig, input_places
from etl.job.read_plan import ReadPlan, needs_scan, plan_units
from etl.output import guard, quarantine
from etl.output.accounting import check_threshold
from etl.output.finalize import first_rejected
from etl.output.layout import MANIFEST, REJECTED_FILE
from etl.output.lock import DEFAULT_STALE_AFTER, RunInfo, lock_lost
from etl.output.manifest import record_run
from etl.output.origin import KEY as ORIGIN_KEY
from etl.output.origin import OtherJobsOutput, check_same_job, job_origin
from etl.output.place import HeldPlace, OutputPlace, place_for
from etl.output.remote import check_buckets
from etl.quality import gate
from etl.run.progress import ProgressConfig, Tally
from etl.schedule import history, idempotence, input_pin
from etl.schedule.fingerprint import with_fingerprints
from etl.schedule.run_log import RunLog
from etl.shuffle import strategy_for
from etl.sources import sql_source, sql_url
from etl.storage import fs, scratch
from transforms import beam_fixes, early_read
from transforms import progress_feed as live
from transforms.convert import ConvertSettings, ConvertToShards, held_store
from transforms.early_read import EarlyRead, EarlyReads
from transforms.staging import pipeline_options  # Beam options + our package for workers

log = logging.getLogger(__name__)
# a stopped run's writers end at their next batch; an upload in its last retries may take longer
WRITERS_WAIT_SECONDS = 60
LOCAL_RUNNER = "FnApiRunner"  # DirectRunner in Beam 2.77 first tries to download Prism


@dataclass
class JobResult:
    output: str
    splits: dict[str, dict[str, Any]]
    rejected: dict[str, Any]
    seconds: float
    manifest: dict[str, Any]
    launched: str = ""  # a dry run or template build: what was done instead of a conversion
    skipped: str = ""  # why nothing ran (output published and current); "" when it ran
    run_key: str = ""  # names what the run was made from (etl.schedule.idempotence)
    run_id: str = ""  # this attempt


@dataclass
class Attempt:
    """What one run_job call has learnt so far, for its history entry (also when it fails)."""

    started: float
    span: str
    run_key: str = ""
    run_id: str = ""
    runner: str = ""
    dataflow_job_id: str = ""
    accepted: bool = False  # the output passed preflight: a failure may be recorded beside it
    published: bool = False  # the new output is in place (a later signal does not undo it)
    counts: dict[str, int] | None = field(default=None)
    rebuilt_reason: str = ""  # a current output found damaged (etl.schedule.idempotence.damage)
    accept: bool = False  # run --accept: failed block checks publish (etl.quality.gate)
    checks: list[dict[str, Any]] | None = None  # failed and warned checks, for the history


def default_beam_args(beam_args: list[str], one_read_task: bool = False) -> list[str]:
    """Our local default never downloads anything and uses every core: FnApiRunner with one
    worker thread per CPU (stage 1 reads several files at once, stage 2 writes several shards
    at once; the heavy work releases the GIL). A run with `one_read_task` (one input read
    whole: no second reader to give a worker) runs its bundles on the calling thread instead
    (`in_memory`: no gRPC servers, no idle workers polling), and its shards are written by a
    thread per core inside the one worker (`shard_threads`). Every explicit option wins."""
    args = list(beam_args)
    given = _given(args)
    if "runner" not in given:
        args.append(f"--runner={LOCAL_RUNNER}")
    if _given(args).get("runner") == LOCAL_RUNNER:
        if one_read_task and not {"direct_running_mode", "direct_num_workers"} & given.keys():
            args.append("--direct_running_mode=in_memory")
            return args
        if "direct_running_mode" not in given:
            args.append("--direct_running_mode=multi_threading")
        if "direct_num_workers" not in given:
            args.append(f"--direct_num_workers={max(os.cpu_count() or 1, 1)}")
    return args


def one_read_task(job: JobConfig, read_plan: ReadPlan, options: PipelineOptions) -> bool:
    """Whether stage 1 has one task: one input unit, read whole with the split these
    (default) options give it."""
    return len(read_plan.units) == 1 and not needs_scan(read_plan.units,
                                                        read_split_bytes(job, options))


def shard_threads(options: PipelineOptions) -> int:
    """Threads writing shards inside one worker: a thread per core where the local runner
    runs every bundle on one thread (`in_memory`), else 1 (each worker writes one shard at a
    time, as Beam's parallelism intends)."""
    if is_local(options.view_as(StandardOptions).runner) \
            and options.view_as(DirectOptions).direct_running_mode == "in_memory":
        return max(os.cpu_count() or 1, 1)
    return 1


def read_streams(options: PipelineOptions) -> int:
    """Parse streams of a unit read whole (transforms/prefetch.read_in_streams): a stream per
    core where one worker runs every bundle (the same case as `shard_threads`), else 1."""
    return shard_threads(options)


def _given(args: list[str]) -> dict[str, Any]:
    """The runner options set explicitly in `args` (`--x=v` or `--x v`, parsed by argparse
    as Beam does; an explicit value equal to Beam's default still counts as given)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in ("runner", "direct_running_mode", "direct_num_workers"):
        parser.add_argument(f"--{name}", default=None)
    known, _ = parser.parse_known_args(args)
    return {k: v for k, v in vars(known).items() if v is not None}


def shares_process(options: PipelineOptions | list[str]) -> bool:
    """Whether every stage runs in this process (the local runner's in-memory and
    multi-threaded modes), so stage 2 can read spills stage 1 held in memory."""
    if isinstance(options, list):
        options = PipelineOptions(options)
    runner = options.view_as(StandardOptions).runner
    return (runner == LOCAL_RUNNER
            and options.view_as(DirectOptions).direct_running_mode in ("in_memory",
                                                                        "multi_threading"))


def plan_reads(job: JobConfig, sources: dict[str, dict[str, Any]] | None = None) -> ReadPlan:
    """Every input file of the job, with its stable identity (etl.job.read_plan); `sources`:
    the job's sources as this run's readers get them (sql_source.held), when they differ."""
    return plan_units(job.sources if sources is None else sources, job.base_dir, job.path)


def run_job(job: JobConfig, beam_args: list[str] | None = None, *, force: bool = False,
            break_lock: bool = False, lock_stale_after: float = DEFAULT_STALE_AFTER,
            capture_stderr: bool = False, progress: ProgressConfig | None = None,
            accept: bool = False, early: EarlyRead | None = None) -> JobResult:
    """Convert `job`; raises only EtlError (exit code in `.exit_code`) for failures.

    An output published and current is left as it is (JobResult.skipped says why, and its
    splits and manifest are the published ones); `force` rebuilds it anyway.
    `capture_stderr` (the command line without --debug): while the pipeline runs, file
    descriptor 2 goes to the run's log file, because Beam's workers print each failing
    bundle's traceback straight to stderr (threads and worker processes alike).
    `progress` (default: none): a live bar or periodic lines while the pipeline runs, on the
    config's stream (a duplicate of the real stderr: fd 2 may go to the log meanwhile); it
    stops before run_job returns (transforms/progress_feed.py).
    `accept` (`run --accept`): a span blocked by a quality check publishes (a run of it
    waiting in quarantine is released), and the history says it was accepted.
    `early`: the first read task, being read since before Beam was imported
    (transforms/early_read.py): the pipeline takes it when it runs in this process and reads
    what that read would read; else it is cancelled."""
    attempt = Attempt(time.time(), idempotence.span_label(job), accept=accept)
    try:
        refuse_template_of_snapshot(job, beam_args or [])
        # a database source's one version of the data, held from its fingerprint to the
        # pipeline's last read (etl.sources.sql_source): files need nothing held
        with sql_source.held(job.sources, job.base_dir, job.path,
                             _sql_schema(job)) as sources:
            result = _run(job, beam_args or [], attempt, sources, force=force,
                          break_lock=break_lock, lock_stale_after=lock_stale_after,
                          capture_stderr=capture_stderr, progress=progress, early=early)
    except BaseException as e:
        failure = _as_interrupted(e, attempt)
        record_history(job, attempt, failure=failure)
        if failure is e:
            raise
        raise failure from e
    record_history(job, attempt, result=result)
    return result


def refuse_template_of_snapshot(job: JobConfig, beam_args: list[str]) -> None:
    """A classic template runs after its launcher has exited, and a PostgreSQL source's
    snapshot lives only in the launcher's open transaction (sql_source.held): its readers
    would all fail. A direct run or the Flex Template (whose launcher waits for the job)
    holds it while the job runs."""
    if not PipelineOptions(beam_args).view_as(GoogleCloudOptions).template_location:
        return
    for name, cfg in job.sources.items():
        if isinstance(cfg, dict) and cfg.get("format") == "sql" \
                and sql_url.dialect_named(cfg.get("url")) == "postgresql":
            where = "source" if name == "*" else f"sources.{name}"
            raise ConfigError(f"{job.path}: {where} reads PostgreSQL in a snapshot the launcher "
                              "holds while the job runs; a classic template (--template_location) "
                              "runs after its launcher exits: run the job directly, or through "
                              "the Flex Template (templates/)")


def _sql_schema(job: JobConfig) -> Schema | None:
    """The schema a database source's columns are checked against at launch (None: no such
    source, the schema is loaded later as always)."""
    if not any(isinstance(c, dict) and c.get("format") == "sql" for c in job.sources.values()):
        return None
    return load_schema(job.schema_path)


def _as_interrupted(e: BaseException, attempt: Attempt) -> BaseException:
    """A signal is what stopped the run, whatever the runner made of it (a bundle that saw
    the cancel flag fails with Cancelled inside the runner's own error); its message says
    whether the output changed."""
    if isinstance(e, KeyboardInterrupt) or (signals.received() is not None
                                            and not isinstance(e, EtlError)):
        return signals.as_interrupted(
            e, signals.PUBLISHED if attempt.published else signals.UNCHANGED)
    return e


def record_history(job: JobConfig, attempt: Attempt, result: JobResult | None = None,
                   failure: BaseException | None = None) -> None:
    """One history entry for this run (etl.schedule.history). A failure is recorded when the output
    passed preflight, or before that when a local history is there already: a misconfigured
    or refused first run creates nothing beside a folder the project does not own, and a
    config error never waits for a store. A run refused because the output holds another
    job's dataset adds nothing: that history is the other job's. Never fails the run."""
    root = history.history_root(job.output)
    status, reason, code, error, counts = "ok", "", 0, "", attempt.counts
    if result is not None and result.skipped:
        status, reason, counts = "skipped", result.skipped, {"read": 0, "written": 0, "rejected": 0}
    elif result is not None and result.launched:
        status, reason = "launched", result.launched
    elif failure is not None:
        status = "blocked" if isinstance(failure, BlockedError) else "failed"
        if isinstance(failure, BlockedError):
            attempt.checks = failure.checks or attempt.checks
        if isinstance(failure, EtlError):
            code = failure.exit_code
        elif isinstance(failure, signals.Interrupted):
            status, code = "interrupted", failure.exit_code
        elif isinstance(failure, KeyboardInterrupt):
            status, code = "interrupted", 130
        elif isinstance(failure, SystemExit):
            code = failure.code if isinstance(failure.code, int) else 1
        else:
            code = 1
        error = fs.first_line(failure) if str(failure) else type(failure).__name__
    if isinstance(failure, OtherJobsOutput):
        return  # the output's history is the other job's: a refused run adds nothing to it
    try:
        if failure is not None and not attempt.accepted and not history.exists_on_disk(root):
            return  # nothing known about the output yet: no storage call, nothing created
        history.append(root, history.entry(
            run_id=attempt.run_id or None, run_key=attempt.run_key or None,
            span=attempt.span or None, start=history.iso(attempt.started),
            end=history.iso(time.time()), status=status, skipped_reason=reason or None,
            exit_code=code, error=error or None, counts=counts, output=job.output,
            runner=attempt.runner or None, dataflow_job_id=attempt.dataflow_job_id or None,
            rebuilt_reason=attempt.rebuilt_reason or None, checks=attempt.checks or None,
            accepted=attempt.accept or None))
    except Exception as e:  # noqa: BLE001 - the run's own outcome matters more
        # a failed run (a full disk, a dead store) reports its own error in one line
        log.log(logging.INFO if failure is not None else logging.WARNING,
                "could not add the run to the history in %s: %s", root, e)


@dataclass
class _RunPlan:
    """What a run knows before it takes the lock: its inputs (pinned and fingerprinted), its
    identity, and whether the published output is current and intact (skip)."""

    schema: Schema
    read_plan: ReadPlan
    pinned: dict[str, Any]
    inputs: list[dict[str, Any]]
    ident: idempotence.Identity
    run_id: str
    published: dict[str, Any] | None
    skip: bool
    origin: dict[str, Any] = field(default_factory=dict)  # the job the manifest names
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # as the readers get them


def _plan_run(job: JobConfig, runner: Any, given: PipelineOptions, attempt: Attempt,
              force: bool, sources: dict[str, dict[str, Any]],
              early: EarlyRead | None = None) -> _RunPlan:
    """Refuse an output another job published (etl.output.origin: before the inputs are read
    for their fingerprints); list, check, pin and fingerprint the inputs; name the run;
    decide the skip (a current output that is damaged is rebuilt, and the attempt says why)."""
    schema = load_schema(job.schema_path)
    published = None if force else idempotence.published_manifest(job.output)
    origin = job_origin(job, schema.name)
    check_same_job(job.output, published, origin)  # another job's output: refused, unless --force
    read_plan = plan_reads(job, sources)
    check_worker_access(job, read_plan.inputs, runner, given)  # before building for workers
    guard.check_inputs_readable([i["path"] for i in read_plan.inputs])
    # every input's content fingerprint: the skip check, the run key and the manifest;
    # pinned first, so that a change before the last read is seen (etl.schedule.input_pin)
    try:
        pinned = input_pin.pins(i["path"] for i in read_plan.inputs)
        known = early.fingerprints_for(pinned) if early is not None else {}  # taken meanwhile
        read_plan = ReadPlan(read_plan.units, with_fingerprints(read_plan.inputs, known))
    except FileNotFoundError as e:  # gone since it was listed
        raise ConfigError(f"input {e.filename} does not exist") from e
    except OSError as e:
        raise user_error(e) from e
    inputs = read_plan.inputs
    ident = idempotence.identity(job, schema.sha256(), inputs)
    attempt.run_key = ident.run_key
    run_id = attempt.run_id = idempotence.new_run_id(ident.run_key)
    skip = published is not None and idempotence.stale_reason(published, ident, inputs) is None
    damaged = idempotence.damage(job.output, job.verify == "full") if skip else None
    if damaged:  # current by its manifest, but not intact: heal it
        skip = False
        attempt.rebuilt_reason = idempotence.DAMAGED.format(damaged)
        log.warning("%s; rebuilding it", attempt.rebuilt_reason)
    return _RunPlan(schema, read_plan, pinned, inputs, ident, run_id, published, skip, origin,
                    sources)


def _run(job: JobConfig, beam_args: list[str], attempt: Attempt,
         sources: dict[str, dict[str, Any]], *, force: bool,
         break_lock: bool, lock_stale_after: float, capture_stderr: bool,
         progress: ProgressConfig | None = None, early: EarlyRead | None = None) -> JobResult:
    """run_job's work; `attempt` collects what the history entry needs as it goes."""
    beam_fixes.apply()  # before the first options view (transforms/beam_fixes.py)
    args = default_beam_args(beam_args)
    given = PipelineOptions(args)
    fs.use_options(given)  # the launcher's own reads use the user's file-system options
    check_buckets(input_places(job.sources, job.base_dir))  # before they are matched
    runner = given.view_as(StandardOptions).runner
    if early is not None and not shares_process(given):  # its blocks would stay here
        early.cancel()
        early = None
    attempt.runner = str(getattr(runner, "__name__", runner) or "")
    plan = _plan_run(job, runner, given, attempt, force, sources, early)

    def skipped() -> JobResult:
        assert plan.published is not None
        return JobResult(job.output, _split_counts(plan.published), plan.published["rejected"],
                         time.time() - attempt.started, plan.published,
                         skipped=idempotence.SKIPPED, run_key=plan.ident.run_key,
                         run_id=plan.run_id)

    guard.recover_scratch(lock_stale_after)  # dead processes' scratch in the temp dir
    dead_runs = place_for(job.output).has_leftover_runs()
    if plan.skip and not dead_runs:
        return skipped()  # no lock, no pipeline
    args = default_beam_args(beam_args, one_read_task(job, plan.read_plan, given))
    options = pipeline_options(args)
    temp_root = job.temp_location or options.view_as(GoogleCloudOptions).temp_location
    preflight(job, plan.inputs, temp_root)
    attempt.accepted = True
    if job.checks is not None:  # a rerun of a quarantined run: blocked, or --accept releases it
        released = _quarantined(job, plan, attempt, lock_stale_after, break_lock)
        if released is not None:
            return released
    strategy = strategy_for(job.shuffle.via, runner)  # chosen once: asked below, not re-looked up
    info = RunInfo.current(plan.run_id)
    with ExitStack() as stack:
        # from the lock to its release a signal is only recorded, except while the pipeline
        # runs (signals.interruptible in _convert): a Ctrl-C never leaves a run directory
        # half made or half removed, nor the lock behind
        stack.enter_context(signals.deferred())
        place = _take_output(stack, job, plan, info, temp_root, lock_stale_after, break_lock,
                             force)
        if place is None:
            result = skipped()  # current: only a dead run's leftovers were to be cleared
        else:
            run_log = stack.enter_context(RunLog(place.log_file))
            run_log.note(f"run {plan.run_id} pid {info.pid}: job {job.path} -> {job.output}; "
                         f"beam args {args}; shuffle via {strategy.NAME}; {len(plan.inputs)} input "
                         f"file(s), {sum(i['num_bytes'] for i in plan.inputs)} bytes")
            result = _convert(job, plan, options, strategy, place, run_log, attempt,
                              capture_stderr, progress, early)
    # a signal that came while the run cleaned up, after it succeeded
    signals.raise_pending(signals.PUBLISHED if attempt.published else signals.UNCHANGED)
    return result


def _quarantined(job: JobConfig, plan: _RunPlan, attempt: Attempt, stale: float,
                 break_lock: bool) -> JobResult | None:
    """A span whose very run (same run key) waits in quarantine is not run again: it stays
    blocked (exit 6), or with --accept that run is released and published."""
    if not attempt.accept:
        blocked = gate.still_blocked(job, plan.ident.run_key)
        if blocked is not None:
            attempt.checks = blocked.checks
            raise blocked
        return None
    manifest = gate.accept_quarantined(job, plan.ident.run_key, stale, break_lock)
    if manifest is None:
        return None
    attempt.published = True
    attempt.run_id = str(manifest.get("run_id") or attempt.run_id)
    return JobResult(job.output, _split_counts(manifest), manifest["rejected"],
                     time.time() - attempt.started, manifest, run_key=plan.ident.run_key,
                     run_id=attempt.run_id)


def _take_output(stack: ExitStack, job: JobConfig, plan: _RunPlan, info: RunInfo,
                 temp_root: str | None, lock_stale_after: float,
                 break_lock: bool, force: bool = False) -> HeldPlace | None:
    """Lock the output (held until `stack` closes), clear dead runs' leftovers, check the
    output again under the lock and make this run's directory (etl.output.place); None when,
    locked, the output turns out current after all (a dead run's leftovers were all that stood
    in the way)."""
    place = place_for(job.output)
    with same_run_named(place, plan.ident.run_key):
        held = stack.enter_context(place.hold(info, lock_stale_after, break_lock, temp_root,
                                              _protected(job, plan.inputs)))
    pause("lock")  # tests: a signal once the lock is held, before the run dir exists
    held.clear_leftovers(plan.run_id)
    if job.checks is not None:  # a dead blocked run's quarantine entry, cut short
        quarantine.remove_incomplete(job.output)

    def still_wanted() -> bool:
        now = idempotence.published_manifest(job.output)
        if not force:  # another job may have published since the plan looked
            check_same_job(job.output, now, plan.origin)
        return not (plan.skip and idempotence.stale_reason(now, plan.ident, plan.inputs) is None)

    return held if held.start_run(still_wanted) else None


class _SharedStores:
    """This run's stores that its DoFns share in this process through Beam `Shared` handles,
    each dropped when the run ends: the held spills, the live progress tally, the busy writers.
    A handle is None where its store is not used (stages elsewhere, no progress display)."""

    def __init__(self, settings: ConvertSettings, held: bool, progress: ProgressConfig | None,
                 options: PipelineOptions, early: EarlyRead | None = None) -> None:
        # this run's held spills: shared by its DoFns in this process, dropped when it ends
        self.held_handle = Shared() if held else None
        self.spills = held_store(self.held_handle, settings)
        # this run's live progress tally: shared like the held spills, when every stage runs
        # here (elsewhere the runner's metrics are polled: transforms/progress_feed.py)
        self.tally_handle = Shared() if progress is not None and shares_process(options) else None
        self.tally = self.tally_handle.acquire(Tally) if self.tally_handle else None
        # this run's busy writers, when they run here: the clean-up waits for them to stop
        self.writers_handle = Shared() if shares_process(options) else None
        self.writers = self.writers_handle.acquire(InFlight) if self.writers_handle else None
        # the launcher's early read of the first task, for the read step to take over
        self.early_handle = Shared() if early is not None else None
        self.early = self.early_handle.acquire(lambda: EarlyReads(early)) \
            if self.early_handle else None

    def release(self, failure: BaseException | None, run_log: RunLog) -> None:
        """After a failure, wait a while for the busy writers; drop the held spills."""
        if self.writers is not None and failure is not None:
            busy = self.writers.wait_idle(WRITERS_WAIT_SECONDS)
            if busy:
                run_log.note(f"{busy} writers still busy after {WRITERS_WAIT_SECONDS} s; "
                             "what they leave is removed by the next run")
        if self.spills is not None:
            self.spills.release()
        if self.early is not None:  # not taken (the run failed first): its read stops
            self.early.cancel()


def _convert(job: JobConfig, plan: _RunPlan, options: PipelineOptions, strategy: ModuleType,
             place: HeldPlace, run_log: RunLog, attempt: Attempt, capture_stderr: bool,
             progress: ProgressConfig | None, early: EarlyRead | None = None) -> JobResult:
    """Run the pipeline into the run's directory, check what was read against the pins,
    publish; whatever happens, stop the progress display and remove the run's directory,
    then report a failure in one line (its traceback goes to the run's log)."""
    started, run_id, tmp, log_file = attempt.started, plan.run_id, place.tmp, place.log_file
    held = shares_process(options) and strategy.HOLDS_SPILLS and job.shuffle.keeps_in_memory
    settings = convert_settings(job, plan.schema, plan.read_plan, options, strategy.NAME, tmp,
                                held, plan.sources)
    plan.read_plan.save(settings.read_plan)
    early = _early_kept(early, settings, plan)
    stores = _SharedStores(settings, held, progress, options, early)
    bytes_total = sum(u.num_bytes for u in plan.read_plan.units)
    reporter: live.Reporter | None = None
    failure: BaseException | None = None
    submitted = None
    p: beam.Pipeline | None = None
    try:
        with signals.interruptible():  # the pipeline and the publish: a signal acts
            reporter = live.start(progress, stores.tally, bytes_total)
            with run_log.stderr_captured(capture_stderr):
                p = new_pipeline(options, tmp)
                _ = p | "Convert" >> ConvertToShards(settings, stores.held_handle,
                                                     stores.tally_handle, stores.writers_handle,
                                                     stores.early_handle)
                submitted = p.run()
                if reporter is not None and stores.tally is None:  # poll the runner's metrics
                    reporter.attach(live.MetricsFeed(submitted, bytes_total))
                attempt.dataflow_job_id = announce_job(submitted, options, run_log) or ""
                submitted.wait_until_finish()
            if early is not None:
                run_log.note(f"{early.task.path}: read from the run's start "
                             f"({'taken' if early.taken else 'not taken'} by the read step)")
            result = _check_then_publish(job, plan, settings, options, place, attempt, reporter)
    except BaseException as e:  # noqa: BLE001 - reported below, after the clean-up
        failure = _changed_input(e, plan.pinned)
        if isinstance(e, KeyboardInterrupt) and submitted is not None:
            cancel_remote_job(submitted, options, run_log)
    finally:
        if reporter is not None:  # before anything else is printed: the summary, an error
            reporter.stop(final=failure is None)
        stores.release(failure, run_log)
        if p is not None and fs.local_path(tmp) is None:  # its temp folder: Beam's run removes it, a
            shutil.rmtree(p.local_tempdir, ignore_errors=True)  # failure before it does not
        _clean_up(place, run_log)  # first: frees the space a full disk needs for the log
    place.prune_logs()  # this run's log is always kept
    if failure is not None:
        _raise_run_failure(failure, run_log, attempt, log_file, run_id)
    run_log.note(result.launched or f"published {job.output} in {time.time() - started:.1f}s")
    return result


def _early_kept(early: EarlyRead | None, settings: ConvertSettings,
                plan: _RunPlan) -> EarlyRead | None:
    """The early read when it read what this run's read step would (transforms/early_read.py:
    the same settings, every input pinned as it was before it began), else None (cancelled)."""
    if early is None or early.task is None:  # fingerprints only
        return None
    source = settings.sources.get(early.task.source)
    ident = early_read.identity(settings.schema_yaml, source or {}, settings.base_dir,
                                settings.reading, settings.reading.split_bytes)
    return early if source is not None and early.keep_if(ident, plan.pinned) else None


def _check_then_publish(job: JobConfig, plan: _RunPlan, settings: ConvertSettings,
                        options: PipelineOptions, place: HeldPlace, attempt: Attempt,
                        reporter: live.Reporter | None) -> JobResult:
    """After the pipeline: the lock still ours, what was read unchanged, then the checks and
    the publish (a launch-only run: nothing ran, nothing to check or publish)."""
    if reporter is not None:
        reporter.stage("checking")
    place.verify()
    launched = launch_only(options)
    if launched:  # nothing ran: nothing to check or publish
        result = JobResult(job.output, {}, {"num_records": 0}, time.time() - attempt.started,
                           {}, launched)
    else:
        input_pin.check_unchanged(plan.pinned)  # what was read is what was fingerprinted
        rejected_at = place.log_file.removesuffix(".log") + ".rejected.jsonl"
        fields = {**plan.ident.manifest_fields(), "run_id": plan.run_id,
                  ORIGIN_KEY: plan.origin}
        result = _check_and_publish(job, settings, plan.run_id, attempt.started, rejected_at,
                                    place, fields, reporter, attempt)
    if reporter is not None:
        reporter.stage("done")
    return result


def _raise_run_failure(failure: BaseException, run_log: RunLog, attempt: Attempt,
                       log_file: str, run_id: str) -> NoReturn:
    """The failure logged, then raised as the user sees it: an interruption when a signal
    came, as it is for an interrupt or a blocked span, else in one line (`user_error`)."""
    run_log.failure(failure)
    if signals.received() is not None and not isinstance(failure, KeyboardInterrupt):
        # what the signal left of the run (a bundle that saw the cancel flag, a runner
        # that swallowed the interrupt and failed on its own): the signal is the cause
        raise signals.as_interrupted(failure, signals.PUBLISHED if attempt.published
                                     else signals.UNCHANGED) from failure
    if not isinstance(failure, Exception) or isinstance(failure, BlockedError):
        raise failure  # KeyboardInterrupt, SystemExit; a blocked span's lines and checks
    raise user_error(failure, log_file, run_id) from failure

def new_pipeline(options: PipelineOptions, tmp: str) -> beam.Pipeline:
    """A Beam pipeline whose local temp folder is this run's: Beam makes an empty
    `$TMPDIR/beam-pipeline-temp*` per pipeline and removes it when `run` returns, so a run
    killed with SIGKILL left one for good. Moved at once into the run's directory (a remote
    run: a scratch folder the next run's sweep knows, etl.storage.scratch)."""
    p = beam.Pipeline(options=options)
    made = getattr(p, "local_tempdir", None)  # Beam 2.77; another version may have none
    if isinstance(made, str):
        p.local_tempdir = scratch.make("pipeline", fs.local_path(tmp))
        shutil.rmtree(made, ignore_errors=True)
    return p


def convert_settings(job: JobConfig, schema: Schema, read_plan: ReadPlan,
                     options: PipelineOptions, via: str, tmp: str, held: bool,
                     sources: dict[str, dict[str, Any]] | None = None) -> ConvertSettings:
    """What the pipeline is told: the job's sections (its shuffle with the strategy `via` it
    runs with, spills held in this process's memory only when `held`; its reads cut for this
    runner), its schema, and where this run spills and stages."""
    split_bytes = read_split_bytes(job, options)
    return ConvertSettings(
        schema_yaml=schema.to_yaml(), sources=sources or job.sources, base_dir=job.base_dir,
        fractions=job.fractions, splits=tuple(job.splits),
        shuffle=dataclasses.replace(job.shuffle, via=via,
                                    spill_in_memory=job.shuffle.spill_in_memory if held else 0),
        sharding=job.sharding, shard_format=job.shard_format,
        reading=dataclasses.replace(job.reading, split_bytes=split_bytes), stats=job.stats,
        shard_threads=shard_threads(options),
        read_streams=read_streams(options),
        spill_dir=fs.join(tmp, "spill"), staging_dir=fs.join(tmp, "staging"),
        read_plan=fs.join(tmp, "read_plan.json"),
        spread_files=needs_scan(read_plan.units, split_bytes) > 1,
        # one file read whole: read it where it was listed (a stage less on a local run)
        spread_reads=not one_read_task(job, read_plan, options),
    )


def _changed_input(failure: BaseException, pinned: dict[str, Any]) -> BaseException:
    """A run that failed while an input changed under it (a truncated file read to a torn
    last record, a replaced object) failed because of the change: say that."""
    if not isinstance(failure, Exception) or isinstance(failure, input_pin.InputChanged):
        return failure
    try:
        input_pin.check_unchanged(pinned)
    except input_pin.InputChanged as changed:
        return changed
    except Exception:  # noqa: BLE001 - the store is down too: the run's own error stands
        return failure
    return failure


def cancel_remote_job(submitted: Any, options: PipelineOptions, run_log: RunLog) -> None:
    """A signal while a job runs elsewhere (Dataflow): cancel it, so nothing keeps running
    and billing after the launcher is gone (best effort: its console link is in the log)."""
    if is_local(options.view_as(StandardOptions).runner) or not hasattr(submitted, "cancel"):
        return
    try:
        submitted.cancel()
        run_log.note("cancelled the submitted job after a signal")
        log.warning("cancelled the submitted job %s", getattr(submitted, "job_id", lambda: "")())
    except Exception as e:  # noqa: BLE001 - the signal's own exit matters more
        run_log.note(f"could not cancel the submitted job: {e}")
        log.warning("could not cancel the submitted job (cancel it in the console): %s", e)


def read_split_bytes(job: JobConfig, options: PipelineOptions) -> int:
    """The job's `split_bytes`, or when it sets none: whole files on a local runner with at most
    two workers, DEFAULT_SPLIT_BYTES elsewhere. One reader of a whole file already keeps two
    cores busy (a prefetch thread reads, the encoder runs beside it), so on two cores split
    reads only add readers' buffers (benchmarks/README.md: "Split reads on two cores")."""
    if job.reading.split_bytes is not None:
        return job.reading.split_bytes
    if is_local(options.view_as(StandardOptions).runner):
        workers = options.view_as(DirectOptions).direct_num_workers or 1
        if workers <= 2:
            return 0
    return DEFAULT_SPLIT_BYTES


def announce_job(result: Any, options: PipelineOptions, run_log: RunLog) -> str | None:
    """A job running elsewhere (Dataflow): say which one, and where to watch it, before
    waiting for it (Beam logs this only at INFO level, which the console does not show).
    Returns its id (for the run history), None for a local run."""
    job_id = getattr(result, "job_id", None)
    if not callable(job_id) or is_local(options.view_as(StandardOptions).runner) \
            or launch_only(options):  # a template build's result has no job to ask
        return None
    ident = job_id()
    if not ident:  # a dry run or template build: nothing submitted
        return None
    cloud = options.view_as(GoogleCloudOptions)
    line = (f"submitted job {ident}; watch it at https://console.cloud.google.com/dataflow/"
            f"jobs/{cloud.region}/{ident}?project={cloud.project}")
    run_log.note(line)
    log.warning(line)
    return str(ident)


@contextmanager
def same_run_named(place: OutputPlace, run_key: str) -> Iterator[None]:
    """A LockedError while taking the output's lock says so when the holder is this very run
    (same run key: same job, span and inputs) submitted again, e.g. by a retrying scheduler."""
    try:
        yield
    except LockedError as e:
        holder = place.lock_holder()
        if holder is None or not idempotence.same_run(holder.run_id, run_key):
            raise
        raise LockedError(f"{e}; it is the same run (run key {run_key}: same job, span and "
                          "inputs) submitted again: let that one finish") from e


def launch_only(options: PipelineOptions) -> str:
    """What a run that converts nothing did instead: a Dataflow dry run (the job translated,
    not submitted) or a template build (`--template_location`); '' for a real run."""
    template = options.view_as(GoogleCloudOptions).template_location
    if template:
        return f"template written to {template}; nothing ran or was published"
    if options.view_as(TestOptions).dry_run:
        return "dry run: the job was translated, not submitted; nothing was published"
    return ""


def check_worker_access(job: JobConfig, inputs: list[dict[str, Any]], runner: Any,
                        options: PipelineOptions | None = None) -> None:
    """Off the local runner, workers run on other machines: every input and the output must be
    on storage they reach (gs://...), not on this machine's disk. Unless the workers are on
    this host (`workers_on_this_host`): a portable worker pool started here reads local
    paths as the launcher does."""
    if is_local(runner):
        return
    if options is not None and workers_on_this_host(options):
        log.info("workers of runner %s run on this host (%s): local inputs and output allowed",
                 runner, _environment(options))
        return
    local = [i["path"] for i in inputs if not _workers_reach(i["path"])]
    if local:
        raise ConfigError(f"{job.path}: runner {runner} runs on other machines, which cannot "
                          f"read {len(local)} local input file(s), e.g. {local[0]}; copy the "
                          "inputs to a bucket (gs://...) and point the job's paths there")
    if not fs.reachable_elsewhere(job.output):
        raise ConfigError(f"{job.path}: runner {runner} runs on other machines, which cannot "
                          f"write the local output {job.output}; use a gs:// output")


_THIS_HOST = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def _workers_reach(path: str) -> bool:
    """Whether workers elsewhere can read an input: a bucket's object, or a database server's
    query (etl.sources.sql_source: workers connect to it themselves; a DuckDB or SQLite file
    is on this machine's disk)."""
    return fs.reachable_elsewhere(path) or path.startswith("sql:postgresql://")


def workers_on_this_host(options: PipelineOptions) -> bool:
    """A portable runner whose SDK workers run on this machine: `--environment_type=LOOPBACK`
    (in the launcher) or `PROCESS` (started here), or `EXTERNAL` with a worker pool at a
    loopback address (`--environment_config=localhost:PORT`, as the README's rehearsal of a
    Dataflow job starts it). Dataflow and DOCKER workers never read this machine's disk."""
    if "Dataflow" in str(options.view_as(StandardOptions).runner):
        return False
    kind, config = _environment(options)
    if kind in ("LOOPBACK", "PROCESS"):
        return True
    if kind == "EXTERNAL":
        host = config.rsplit(":", 1)[0] if ":" in config else config
        return host.lower() in _THIS_HOST or host == socket.gethostname()
    return False


def _environment(options: PipelineOptions) -> tuple[str, str]:
    portable = options.view_as(PortableOptions)
    return ((portable.environment_type or "").upper(), str(portable.environment_config or ""))


def preflight(job: JobConfig, inputs: list[dict[str, Any]], temp_root: str | None) -> None:
    """Everything that can be known to fail before any work: unreadable inputs, a refused
    output, an unwritable output location, too little free space (the inputs' total size on
    the output's file system, or on a local temp location)."""
    guard.check_inputs_readable([i["path"] for i in inputs])
    place = place_for(job.output)
    place.check(_protected(job, inputs))
    check_buckets([("temp location", temp_root or "")])  # a missing one: exit 2
    place.check_room(sum(i["num_bytes"] for i in inputs), temp_root)


def _protected(job: JobConfig, inputs: list[dict[str, Any]]) -> list[str]:
    """What the output must never contain: every input, the job file and the schema file."""
    extra = [os.path.abspath(p) for p in (job.path, job.schema_path)
             if fs.local_path(p) is not None and os.path.exists(p)]
    return [i["path"] for i in inputs] + extra


def _clean_up(place: HeldPlace, run_log: RunLog) -> None:
    """Remove the run's directory, unless it still holds the previous output of a publish
    that could not be rolled back (then it is put back first, or kept for the next run)."""
    pause("clean-up")
    if place.keep_run_dir():
        return
    try:
        place.remove_run_dir()  # local: its marker last, a leftover is still known as ours
    except Exception as e:  # noqa: BLE001 - a leftover is removed by the next run
        run_log.note(f"could not remove {place.tmp}: {e}")
        log.warning("could not remove %s (the next run removes it): %s", place.tmp, e)


def user_error(exc: BaseException, log_file: str | None = None,
               run_id: str | None = None) -> EtlError:
    """What a user sees of a failure: our error (found again inside what the runner raised),
    a storage error naming the path, or an unexpected error in one line; naming the log only
    when it holds something (etl.base.worker_errors.naming_log). A run whose lock was taken over
    while it was stopped failed because of that, whatever broke next (its run dir removed
    under it): exit 4 naming the taker (etl.output.lock.lock_lost). An unexpected failure whose
    log shows gRPC out of file descriptors is `ulimit -n`'s (exit 5)."""

    err = original_error(exc)
    if run_id and not isinstance(err, LockedError):  # one that says more is kept
        err = lock_lost(run_id) or err
    if err is None and isinstance(exc, OSError) and exc.errno is not None:
        err = storage_error(exc)
    if err is None and fds_ran_out(log_file):
        err = too_many_open_files()
    if err is None:
        err = EtlError(f"unexpected error: {describe_unexpected(exc)}")
    return naming_log(err, log_file)


def empty_inputs(manifest: dict[str, Any], read: int, allow_empty: bool) -> None:
    """A span that read no record is an upstream failure far more often than a quiet day:
    refused (exit 2, nothing published) unless the job says `allow_empty: true`."""
    if read:
        return
    names = [str(i.get("path")) for i in manifest.get("inputs", [])]
    shown = ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")
    if not allow_empty:
        raise ConfigError(f"no records read from the input{'s' if len(names) != 1 else ''} "
                          f"({shown or 'none'}); nothing published. If an empty span is "
                          "expected, set allow_empty: true in the job file")
    log.warning("publishing 0 records: the inputs (%s) hold none (allow_empty: true)", shown)


def _split_counts(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: {"num_records": v["num_records"], "shards": len(v["shards"])}
            for k, v in manifest["splits"].items()}


def _check_and_publish(job: JobConfig, settings: ConvertSettings, run_id: str,
                       started: float, rejected_at: str, place: HeldPlace,
                       fields: dict[str, Any] | None = None,
                       reporter: live.Reporter | None = None,
                       attempt: Attempt | None = None) -> JobResult:
    """The finalize step left the manifest in staging (the run's one result): check the bad-
    record threshold, then publish. A run that rejected more than allowed keeps its
    dead-letter records at `rejected_at` (beside the run log) so the user can see them all."""
    staging = settings.staging_dir
    manifest = json.loads(fs.read_bytes(fs.join(staging, MANIFEST)))
    rejected = manifest["rejected"]
    read = sum(i["read"] for i in manifest["inputs"])
    try:
        check_threshold(rejected, read, first_rejected(staging), job.acceptance.max_bad_fraction,
                        rejected_at)
    except BadInputError:
        fs.write_bytes(rejected_at, fs.read_bytes(fs.join(staging, REJECTED_FILE)))
        raise
    empty_inputs(manifest, read, job.acceptance.allow_empty)
    for note in manifest["notes"]:
        log.warning(note)
    if fields:  # what the run was made from: the next run compares it (etl.schedule.idempotence)
        manifest = record_run(staging, fields)
    if attempt is not None:
        attempt.counts = {"read": read,
                          "written": sum(v["num_records"] for v in manifest["splits"].values()),
                          "rejected": int(rejected["num_records"])}
    if job.checks is not None:  # quality gates: a failed block check quarantines (exit 6)
        checked = gate.apply(job, staging, manifest, run_id, attempt is not None and attempt.accept)
        if attempt is not None:
            attempt.checks = [r.to_json() for r in checked.blocked + checked.warned]
    if reporter is not None:
        reporter.stage("publishing")
    place.publish(staging)  # local: renames; gs://: a new version, then the pointer
    if attempt is not None:
        attempt.published = True
    return JobResult(job.output, _split_counts(manifest), rejected, time.time() - started,
                     manifest, run_key=str(manifest.get("run_key") or ""), run_id=run_id)
