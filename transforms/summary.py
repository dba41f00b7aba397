"""Run a job and print what users want to see: records per split, shards, time, a sample."""

from __future__ import annotations

from etl import fs
from etl.config import load_job
from etl.manifest import dataset_dir
from etl.quiet import native_stderr_quiet
from etl.spans import Span
from transforms.backfill import check_inputs, not_selected, skip_if_current


def run_and_report(job_path: str, output: str | None, beam_args: list[str], sample: bool,
                   break_lock: bool = False, lock_stale_after: float | None = None,
                   debug: bool = False, span: Span | None = None, force: bool = False,
                   allow_missing: bool = False, only: str = "all", verbose: bool = False) -> int:
    """One span (or a job without placeholders). Without `debug`, worker tracebacks go to the
    run's log file only (see run_job). A skipped span prints one line saying why: exit 0."""
    job = load_job(job_path, output=output, span=span)
    label = f"{job.span} ({job.output})" if job.span else job.output
    left_out = not_selected(job, only) if only != "all" else ""
    if left_out:
        print(f"Skipped {label}: {left_out}")
        return 0
    skipped = check_inputs(job, allow_missing) or skip_if_current(job, beam_args, force)
    if skipped:
        print(f"Skipped {label}: {skipped}")
        return 0
    from transforms.job import run_job  # noqa: PLC0415 - Beam: only when something runs

    stale = {} if lock_stale_after is None else {"lock_stale_after": lock_stale_after}
    result = run_job(job, beam_args, force=force, break_lock=break_lock,
                     capture_stderr=not debug, **stale)
    if getattr(result, "skipped", ""):
        print(f"Skipped {label}: {result.skipped}")
        return 0
    if result.launched:
        print(result.launched[0].upper() + result.launched[1:])
        return 0
    print(f"Wrote {result.output}{f' (span {job.span})' if job.span else ''} "
          f"in {result.seconds:.1f}s")
    for split, info in result.splits.items():
        print(f"  {split:<12} {info['num_records']:>10,} records in {info['shards']} shard(s)")
    if result.rejected["num_records"]:
        print(f"  rejected     {result.rejected['num_records']:>10,} records "
              f"(see {result.output}/rejected/): {result.rejected['by_reason']}")
    first = next(iter(result.splits))
    if sample:
        from etl.inspect_data import inspect  # noqa: PLC0415 - imports TensorFlow

        print(f"Sample record ({first}):")
        shard = result.manifest["splits"][first]["shards"][0]["path"]
        with native_stderr_quiet(not verbose):  # TensorFlow's start-up lines
            texts = list(inspect([fs.join(dataset_dir(result.output), shard)], limit=1))
        for text in texts:
            print(text)
    print(f"Read it back: etl.make_dataset({result.output!r}, split={first!r})")
    return 0
