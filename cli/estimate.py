"""`run JOB --estimate`: the launch estimate for the runner and machines the Beam options name,
before anything is launched (etl/job/estimate.py does the arithmetic; this reads Beam's options).

Works before the data is uploaded: with local inputs and `--runner DataflowRunner`, where a
real run is refused (workers cannot read this machine's disk), the local files are sampled
and the table is the same, with a note that the inputs must be in a bucket for the real run.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, WorkerOptions

from cli.run import default_beam_args, read_split_bytes, workers_on_this_host
from etl.base.runners import is_local
from etl.contract.schema import load_schema
from etl.job.config import JobConfig
from etl.job.estimate import estimate, lines, sample_verdict
from etl.job.read_plan import plan_units
from etl.shuffle import strategy_for
from etl.storage import fs


def estimate_lines(job: JobConfig, beam_args: list[str]) -> list[str]:
    """The estimate table for `job` run with `beam_args`; reads only sizes and samples."""
    return estimate_report(job, beam_args)[0]


def estimate_report(job: JobConfig, beam_args: list[str]) -> tuple[list[str], int]:
    """The estimate table and the exit code `run --estimate` gives: 0, or the code the real
    run would give when the sampled records already break the job's bad-record limit (the
    table's last line says so)."""
    options = PipelineOptions(default_beam_args(beam_args))
    fs.use_options(options)
    runner = options.view_as(StandardOptions).runner
    workers = options.view_as(WorkerOptions)
    local = is_local(runner)
    plan = plan_units(job.sources, job.base_dir, job.path)
    est = estimate(job, plan, load_schema(job.schema_path), runner=str(runner),
                   via=strategy_for(job.shuffle.via, runner).NAME,
                   split_bytes=read_split_bytes(job, options), local=local,
                   workers=workers.num_workers or workers.max_num_workers,
                   machine_type=workers.machine_type, disk_gb=workers.disk_size_gb)
    out = lines(est)
    failing, code = sample_verdict(est, job.acceptance.max_bad_fraction)
    on_disk = [i["path"] for i in plan.inputs if fs.local_path(i["path"]) is not None]
    if not local and on_disk and not workers_on_this_host(options):
        out.append(f"  note              {len(on_disk)} input(s) are on this machine: copy them "
                   "to a bucket (gs://...) and point the job there before the real run")
    if failing:
        out.append(failing)
    return out, code
