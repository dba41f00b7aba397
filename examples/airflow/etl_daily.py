"""Airflow DAGs that run our job once a day through the Beam provider's operator.

`etl_daily` converts yesterday's span on this machine (Beam's local FnApiRunner);
`etl_daily_dataflow` (defined when ETL_DATAFLOW_PROJECT is set) submits the same job to Dataflow.

Each run converts the day that has just ended: the DAG's data interval is the day
[D 00:00 UTC, D+1 00:00 UTC), the run starts at D+1 00:00 and passes `--date D`.
The command the operator builds is

    ETL_PYTHON ETL_RUN_PIPELINE run [--report] ETL_JOB --runner=... --date=D [--output=ETL_OUTPUT] ...

The operator puts `py_options` before `py_file` and appends every pipeline option as
`--key=value`, so the CLI's positional `run JOB` comes from `py_options=[run_pipeline.py, "run"]`
and `py_file` is the job file (keep it a local path: the operator would download a gs:// one
itself, away from the files it names relative to itself). `etl_daily` adds `--report` there
(argparse takes the option before the positional job): each day's run writes the span's
report.json/report.html beside its data with drift against the day before, and a retry of a
day whose data is published but whose report failed only makes the report.

Settings (environment of the Airflow scheduler and workers, read when the DAG file is parsed):
  ETL_PYTHON        the Python that has our package (default: <repo>/.venv/bin/python, else this one)
  ETL_RUN_PIPELINE  run_pipeline.py (default: the one in this checkout)
  ETL_JOB           the job file, with {date} placeholders (default: <repo>/examples/daily.yaml)
  ETL_OUTPUT        optional output override, may hold {date} (default: the job's own output)
  ETL_DATAFLOW_PROJECT, ETL_DATAFLOW_REGION (default us-central1), ETL_DATAFLOW_TEMP (gs://...)

Reruns are safe: a span whose output is published and current is skipped by the CLI (exit 0),
and a second run of a span while one is running exits 4 (the span's lock), which fails the task.

When a quality check blocks a day (a `block:` check of the job's `checks:` fails, exit 6), the
task fails at once, without retries, and its log holds the CLI's lines:

    error: span D blocked by N quality check(s): nothing published (...); the run is ...
      blocked: features.label.distinct.min, split train: measured 1, must be at least 2

Nothing of that day is published; the days before stay as they are. A retry would change
nothing: a rerun of the same inputs (same job, schema and input files) stays blocked without
running again; only a person publishes it. Look at OUT.quarantine/RUN_ID/report.html (the
failed checks on top), then, with the Python that has our package:
  - publish the day as it is: `run_pipeline.py quarantine release OUT` (or
    `run_pipeline.py run ETL_JOB --date D --accept`, which releases it too), then clear the
    failed task: its rerun finds the day published and current (exit 0) and writes its report;
  - or fix the day's input and clear the task: the new inputs are converted and checked again;
  - or throw the blocked run away: `run_pipeline.py quarantine drop OUT`.
OUT is the day's output (the job's `output` or ETL_OUTPUT, with D filled in). The day's run
history (`run_pipeline.py history`) says `blocked`, then `released`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from typing import Any

from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.google.cloud.operators.dataflow import DataflowConfiguration
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.timetables.interval import CronDataIntervalTimetable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

PYTHON = os.environ.get("ETL_PYTHON") or (_VENV_PYTHON if os.path.exists(_VENV_PYTHON) else sys.executable)
RUN_PIPELINE = os.environ.get("ETL_RUN_PIPELINE") or os.path.join(REPO, "run_pipeline.py")
JOB = os.environ.get("ETL_JOB") or os.path.join(REPO, "examples", "daily.yaml")
OUTPUT = os.environ.get("ETL_OUTPUT") or None  # None: the option is left out of the command

# The finished day: the start of the run's data interval (with the interval timetable below).
SPAN = "{{ data_interval_start | ds }}"
# Dataflow job names: [a-z]([-a-z0-9]*[a-z0-9])?, one per span and not per attempt (see below).
DATAFLOW_JOB_NAME = "etl-{{ data_interval_start | ds_nodash }}"

# The CLI's exit code for a span a `block:` quality check stopped (etl.base.errors.EXIT_BLOCKED).
EXIT_BLOCKED = 6

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "etl",
    # a transient failure (storage 5xx past our own retries, a lost worker) gets two more tries;
    # a failed try published nothing, and a span published meanwhile is skipped (exit 0).
    # A blocked span (exit 6) is not retried: see EtlRunOperator
    "retries": 2,
    "retry_delay": dt.timedelta(minutes=10),
    "retry_exponential_backoff": True,
}


def _daily(dag_id: str, max_active_runs: int, description: str) -> DAG:
    # An explicit data-interval timetable: Airflow 3 reads a bare "@daily" as a trigger at
    # midnight whose ds is the day that *starts* (create_cron_data_intervals=False), which would
    # convert a day with no data yet.
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,  # missed days: `run JOB --from D1 --to D2` or `airflow dags backfill`
        max_active_runs=max_active_runs,
        default_args=DEFAULT_ARGS,
        tags=["etl"],
    )


def _options(**extra: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"date": SPAN, "output": OUTPUT}
    options.update(extra)
    return options


class EtlRunOperator(BeamRunPythonPipelineOperator):
    """The Beam provider's operator, except that a span blocked by a quality check (our exit 6)
    fails the task for good (AirflowFailException: no retry). The check lines are already in
    the task log above (the operator logs the command's output); retrying would only log them
    again after the retry delay, since a rerun of the same inputs stays blocked without running.
    Every other failure is raised as it is, for the DAG's retries."""

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except AirflowException as e:
            # the hook's message: "Apache Beam process failed with return code N"
            code = re.search(r"return code (-?\d+)", str(e))
            if code is None or int(code.group(1)) != EXIT_BLOCKED:
                raise
            raise AirflowFailException(
                f"exit {EXIT_BLOCKED}: the span is blocked by a quality check (the lines above say "
                "which) and quarantined, nothing was published; not retried: a rerun of the same "
                "inputs stays blocked. Release it with `run_pipeline.py quarantine release OUT` "
                "(or `run_pipeline.py run JOB --date D --accept`) and clear this task") from e


def _convert(runner: str, hours: int, *run_flags: str, **kwargs: Any) -> BeamRunPythonPipelineOperator:
    """The one task of a DAG: `run_pipeline.py run [FLAGS] JOB --date=SPAN ...` on `runner`
    (our positional `run JOB` can only go through py_options + py_file: the operator puts every
    pipeline option after py_file as --key=value; our own flags go before JOB)."""
    return EtlRunOperator(
        task_id="convert",
        py_interpreter=PYTHON,
        py_options=[RUN_PIPELINE, "run", *run_flags],
        py_file=JOB,
        runner=runner,
        execution_timeout=dt.timedelta(hours=hours),
        **kwargs,
    )


with _daily("etl_daily", 1, "yesterday's span -> TFRecords on this machine (Beam local runner)") as etl_daily:
    # one run at a time: the local runner holds a span's data in memory; --report: the day's
    # report beside its data, with drift against the previous day's output (never fails a run)
    _convert("FnApiRunner", 4, "--report", pipeline_options=_options())

if os.environ.get("ETL_DATAFLOW_PROJECT"):
    with _daily("etl_daily_dataflow", 3, "yesterday's span -> TFRecords on Dataflow") as etl_daily_dataflow:
        _convert(
            "DataflowRunner", 12,
            pipeline_options=_options(temp_location=os.environ.get("ETL_DATAFLOW_TEMP")),
            # The job name is the span's, without the provider's random suffix: while a job of
            # that name is active, Dataflow refuses to create another, so a retry (or a second
            # trigger of the day) cannot start a twin. Our span lock refuses it even earlier
            # (exit 4). check_if_running is not set: the Python operator never reads it (only
            # the Java one does, to wait for a running job of the same name).
            dataflow_config=DataflowConfiguration(
                job_name=DATAFLOW_JOB_NAME,
                append_job_name=False,
                project_id=os.environ["ETL_DATAFLOW_PROJECT"],
                location=os.environ.get("ETL_DATAFLOW_REGION", "us-central1"),
            ),
        )
