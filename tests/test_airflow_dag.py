"""The scheduling examples, run as a scheduler would run them.

- examples/airflow/etl_daily.py under Airflow itself (`dag.test()` in the separate venv
  .venv-airflow that `make test` builds: Airflow never enters .venv), on the local runner over
  the bundled daily sample, twice for one day: the first run publishes the span, writes its
  report (`--report`; no previous day in the output) and logs it in _runs.jsonl, the second is
  skipped as current and leaves the current report as it is. The Dataflow DAG runs through the same
  operator with only the cloud cut off (no process started, no Dataflow API call): the command
  it would run and the job name it would wait for are checked.
- A day a `block:` quality check stops (its label column collapsed to one class): the task fails
  at its first try (exit 6 is not retried), its log holds the CLI's check lines, the day before
  stays published and current, the quarantine holds the day; a rerun stays blocked; after
  `quarantine release` the rerun of the task succeeds (the day is published and current).
- examples/schedule/: the cron line and the systemd units parse, and the commands they hold
  run our CLI with valid arguments (`--dry-run`).
"""

from __future__ import annotations

import csv
import datetime as dt
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import ROOT, RUN

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

AIRFLOW_PYTHON = os.environ.get("ETL_AIRFLOW_PYTHON") or os.path.join(ROOT, ".venv-airflow", "bin", "python")
DAG_DIR = os.path.join(ROOT, "examples", "airflow")
JOB = os.path.join(ROOT, "examples", "daily.yaml")
SCHEDULE = Path(ROOT, "examples", "schedule")
# logical date 2026-11-22 = the run at the end of the day 2026-11-21, which it converts
LOGICAL = "2026-11-22"
SPAN = "2026-11-21"
LABELS = "--labels=airflow-version=v3-3-2"

# Runs inside .venv-airflow. argv: mode (local | dataflow | steps), logical date, DAG folder, and
# for `steps` a JSON list: a date runs etl_daily for that logical date (its DAG retries kept, a
# second apart), a list is a command run between. Prints one RESULT line.
DRIVER = textwrap.dedent("""\
    import datetime as dt, json, subprocess, sys
    from unittest import mock

    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils import db

    mode, day = sys.argv[1], dt.datetime.fromisoformat(sys.argv[2]).replace(tzinfo=dt.timezone.utc)
    db.initdb()
    bag = DagBag(dag_folder=sys.argv[3])
    out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()},
           "dag_ids": sorted(bag.dag_ids), "runs": []}
    for dag in bag.dags.values():
        for task in dag.tasks:
            if mode == "steps":  # a retry would come in a second, not after the DAG's delay
                task.retry_delay = dt.timedelta(seconds=1)
            else:
                task.retries = 0  # a failure ends the test run now, not after the retry delay
    if mode == "steps":
        dag = bag.dags["etl_daily"]
        for step in json.loads(sys.argv[4]):
            if isinstance(step, list):
                done = subprocess.run(step, capture_output=True, text=True, timeout=120)
                out["runs"].append({"exit": done.returncode, "stdout": done.stdout,
                                    "stderr": done.stderr})
                continue
            logical = dt.datetime.fromisoformat(step).replace(tzinfo=dt.timezone.utc)
            run = dag.test(logical_date=logical)
            tis = run.get_task_instances()
            out["runs"].append({"state": str(run.state), "span": run.data_interval_start.date().isoformat(),
                                "tasks": {t.task_id: [str(t.state), t.try_number] for t in tis}})
    elif mode == "local":
        dag = bag.dags["etl_daily"]
        for _ in range(2):
            run = dag.test(logical_date=day)
            out["runs"].append({"state": str(run.state), "span": run.data_interval_start.date().isoformat(),
                                "tasks": {t.task_id: str(t.state) for t in run.get_task_instances()}})
    else:
        # the cloud cut off: the command is recorded instead of started, the Dataflow job is not polled
        from airflow.providers.apache.beam.hooks import beam as beam_hook
        from airflow.providers.google.cloud.hooks.dataflow import DataflowHook
        dag = bag.dags["etl_daily_dataflow"]
        task = dag.get_task("convert")
        out["dataflow_config"] = {k: getattr(task.dataflow_config, k) for k in
                                  ("job_name", "append_job_name", "project_id", "location")}
        with mock.patch.object(beam_hook, "run_beam_command") as started, \\
                mock.patch.object(DataflowHook, "wait_for_done") as waited:
            run = dag.test(logical_date=day)
        out["runs"].append({"state": str(run.state)})
        out["commands"] = [c.kwargs["cmd"] for c in started.call_args_list]
        out["waits"] = [c.kwargs for c in waited.call_args_list]
    print("RESULT " + json.dumps(out, default=str))
    """)


def airflow_python() -> str:
    """The Airflow venv's Python; its absence is a failure (CI must run these tests)."""
    if not os.access(AIRFLOW_PYTHON, os.X_OK):
        pytest.fail(f"no Airflow environment at {AIRFLOW_PYTHON}: `make test` creates it "
                    "(or `make .venv-airflow/.installed`; it installs examples/airflow/requirements.txt "
                    "into its own venv, never into .venv)", pytrace=False)
    return AIRFLOW_PYTHON


def run_driver(tmp_path: Path, mode: str, *steps: str | list[str], **settings: str) -> dict:
    """DRIVER in a fresh AIRFLOW_HOME (sqlite, no examples); returns its RESULT."""
    home = tmp_path / "airflow"
    home.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ETL_"))}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": DAG_DIR,
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
                "ETL_PYTHON": sys.executable, **settings})
    argv = [airflow_python(), str(script), mode, LOGICAL, DAG_DIR, *([json.dumps(steps)] if steps else [])]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=150 + 30 * len(steps))
    log = proc.stdout + proc.stderr
    (tmp_path / "airflow.log").write_text(log)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}:\n{log[-4000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    result["log"] = log
    assert result["import_errors"] == {}
    return result


def test_dag_runs_the_day_on_the_local_runner_and_a_rerun_is_skipped(tmp_path: Path) -> None:
    out_root = tmp_path / "out"
    result = run_driver(tmp_path, "local", ETL_OUTPUT=f"{out_root}/{{date}}")
    assert result["dag_ids"] == ["etl_daily"]  # no Dataflow DAG without ETL_DATAFLOW_PROJECT
    assert result["runs"] == [{"state": "success", "span": SPAN, "tasks": {"convert": "success"}}] * 2
    # the operator's own command line: `run --report JOB` (py_options, then py_file: argparse
    # takes the flag before the positional job), then the span as --date
    command = (f"Running command: {sys.executable} {RUN} run --report {JOB} --runner=FnApiRunner "
               f"--date={SPAN} '--output={out_root}/{{date}}' {LABELS}")
    assert result["log"].count(command) == 2

    published = out_root / SPAN
    assert (published / "_SUCCESS").exists()
    manifest = json.loads((published / "manifest.json").read_text())
    # the day's report beside its data; the day before is not in this output: no drift
    report = json.loads((published / "report.json").read_text())
    assert (published / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (report["output"], report["run_id"]) == (str(published), manifest["run_id"])
    assert {s: v["num_records"] for s, v in report["splits"].items()} == {"train": 42, "test": 8}
    assert "drift" not in report
    assert result["log"].count(f"no previous span output to compare with ({out_root}/2026-11-20 "
                               "is not published): report without drift") == 1
    # the rerun (skipped as current) kept it
    assert result["log"].count(f"Report {published}/report.json is current: left as it is") == 1
    assert manifest["span"] == SPAN
    assert {s: v["num_records"] for s, v in manifest["splits"].items()} == {"train": 42, "test": 8}
    assert [f["path"] for f in manifest["input_files"]] == [
        os.path.join(ROOT, "examples", "data", "daily", SPAN, "iris.csv")]
    # (the hidden .2026-11-21.etl beside it is the span's run directory: lock and logs)
    assert sorted(p.name for p in out_root.iterdir() if not p.name.startswith(".")) == [
        "2026-11-21", "_runs.jsonl"]

    history = [json.loads(ln) for ln in (out_root / "_runs.jsonl").read_text().splitlines()]
    assert [(h["span"], h["status"], h["exit_code"], h["output"], h["runner"]) for h in history] == [
        (SPAN, "ok", 0, str(published), "FnApiRunner"),
        (SPAN, "skipped", 0, str(published), "FnApiRunner")]
    assert history[0]["counts"] == {"read": 50, "written": 50, "rejected": 0}
    assert history[0]["run_id"] == manifest["run_id"]
    assert "current" in history[1]["skipped_reason"]


def test_dataflow_dag_command_and_job_name(tmp_path: Path) -> None:
    # the connection a Dataflow deployment has (no key: nothing here asks Google for a token)
    result = run_driver(tmp_path, "dataflow", AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT="google-cloud-platform://",
                        ETL_DATAFLOW_PROJECT="my-project-123",
                        ETL_DATAFLOW_REGION="europe-west1", ETL_DATAFLOW_TEMP="gs://bkt/tmp",
                        ETL_OUTPUT="gs://bkt/daily/{date}")
    assert result["dag_ids"] == ["etl_daily", "etl_daily_dataflow"]
    assert result["dataflow_config"] == {"job_name": "etl-{{ data_interval_start | ds_nodash }}",
                                         "append_job_name": False, "project_id": "my-project-123",
                                         "location": "europe-west1"}
    assert result["runs"] == [{"state": "success"}]
    # one submit, named after the span (no random suffix), in the given project and region
    assert result["commands"] == [[
        sys.executable, RUN, "run", JOB, "--runner=DataflowRunner",
        "--job_name=etl-20261121", "--project=my-project-123", "--region=europe-west1",
        LABELS, f"--date={SPAN}", "--output=gs://bkt/daily/{date}", "--temp_location=gs://bkt/tmp"]]
    # after our launcher exits the operator waits for the job by that name (it learns no id:
    # our launcher's 'submitted job' line is not the 'Submitted job: ID' its pattern reads)
    assert result["waits"] == [{"job_name": "etl-20261121", "location": "europe-west1",
                                "job_id": None, "project_id": "my-project-123"}]


# --- a day a quality check blocks ---------------------------------------------------------------
# What the CLI prints, as the Beam hook logs it: stdout lines at info, stderr lines at warning.
HOOK_EVENT = re.compile(r"^\S+ \[(\w+) *\] (.*?) +\[airflow\.task\.hooks\.airflow\.providers\.apache"
                        r"\.beam\.hooks\.beam\.BeamHook\]")
CHECKED_JOB = """\
schema: {root}/schemas/iris.yaml
source: {{format: csv, paths: ["data/{{date}}/iris.csv"]}}
split: {{train: 0.8, test: 0.2}}
output: "out/{{date}}"
shuffle: {{seed: 7}}
shards: 2
checks:
  block:
    features:
      label: {{drift: 0.1, distinct: {{min: 2}}}}
"""


def command_runs(log: str) -> list[tuple[str, list[tuple[str, str]], int]]:
    """Each command the operator ran: (its command line, what it printed as (level, line), its
    exit code), from the hook's lines in the captured Airflow log."""
    runs: list[tuple[str, list[tuple[str, str]], int]] = []
    command, printed, waiting = "", [], False
    for line in log.splitlines():
        m = HOOK_EVENT.match(line)
        if not m:
            continue
        level, text = m.groups()
        if text.startswith("Running command: "):
            command, printed = text[len("Running command: "):], []
        elif text == "Start waiting for Apache Beam process to complete.":
            waiting = True
        elif text.startswith("Process exited with return code: "):
            runs.append((command, printed, int(text.rsplit(" ", 1)[1])))
            waiting = False
        elif waiting:
            printed.append((level, text))
    return runs


def collapsed_day(source: Path, dest: Path) -> None:
    """The bundled day with every label Iris-setosa: one class."""
    with open(source, newline="") as fh:
        rows = list(csv.reader(fh))
    dest.parent.mkdir(parents=True)
    with open(dest, "w", newline="") as fh:
        csv.writer(fh).writerows([rows[0]] + [r[:-1] + ["Iris-setosa"] for r in rows[1:]])


def test_a_day_blocked_by_a_check_fails_its_task_until_released(tmp_path: Path) -> None:
    from etl.output.manifest import load_manifest, verify  # noqa: PLC0415 - .venv's package
    from etl.output.quarantine import entries  # noqa: PLC0415
    from etl.quality.stats import published_stats  # noqa: PLC0415

    before, day = "2026-11-20", SPAN  # the good day, and the day whose labels collapse
    bundled, data = Path(ROOT, "examples", "data", "daily"), tmp_path / "data"
    (data / before).mkdir(parents=True)
    shutil.copy(bundled / before / "iris.csv", data / before)
    collapsed_day(bundled / day / "iris.csv", data / day / "iris.csv")
    job = tmp_path / "checked.yaml"
    job.write_text(CHECKED_JOB.format(root=ROOT))
    out_before, out_day = str(tmp_path / "out" / before), str(tmp_path / "out" / day)
    cli_ = [sys.executable, RUN]
    result = run_driver(
        tmp_path, "steps",
        "2026-11-21",  # converts the good day
        LOGICAL,  # the collapsed day: blocked
        [*cli_, "quarantine", "list", out_day],
        [*cli_, "run", str(job), "--date", before],  # the day before is still current
        LOGICAL,  # cleared and run again: still blocked
        [*cli_, "quarantine", "release", out_day],
        LOGICAL,  # cleared after the release: the day is published and current
        ETL_JOB=str(job))
    assert result["dag_ids"] == ["etl_daily"]
    good, blocked, listed, current, again, released, after = result["runs"]
    # each blocked try failed the task at its first try (exit 6 is not retried), the DAG run too
    assert good == {"state": "success", "span": before, "tasks": {"convert": ["success", 1]}}
    assert blocked == again == {"state": "failed", "span": day, "tasks": {"convert": ["failed", 1]}}
    assert after == {"state": "success", "span": day, "tasks": {"convert": ["success", 1]}}

    # the check lines: the day before's label shares (exact counts from its statistics) against
    # one class, and one distinct value where two are needed
    shares = {split: dict(stats["value_counts"]) for split, stats in
              published_stats(out_before)["features"]["label"]["splits"].items()}
    checks = [f"  blocked: features.label.drift, split {split}: measured "
              f"{round(1 - shares[split][0] / sum(shares[split].values()), 6)!r}, must be at most 0.1"
              for split in ("train", "test")]
    checks += [f"  blocked: features.label.distinct.min, split {split}: measured 1, must be at least 2"
               for split in ("train", "test")]
    history = [json.loads(ln) for ln in (tmp_path / "out" / "_runs.jsonl").read_text().splitlines()]
    quarantined = history[1]["run_id"]
    where = f"{out_day}.quarantine/{quarantined}"
    head = (f"error: span {day} blocked by 4 quality check(s){{}}: nothing published (nothing is "
            f"published there); the run is quarantined in {where} (checks.json, report.html); "
            f"publish it with `run_pipeline.py quarantine release {out_day}` or `run --accept`, "
            f"or remove it with `quarantine drop {out_day}`")
    command = f"{sys.executable} {RUN} run --report {job} --runner=FnApiRunner --date={{}} {LABELS}"
    runs = command_runs(result["log"])
    assert [(c, code) for c, _, code in runs] == [
        (command.format(before), 0), (command.format(day), 6), (command.format(day), 6),
        (command.format(day), 0)]
    assert runs[1][1] == [("warning", head.format("")), *(("warning", c) for c in checks)]
    assert runs[2][1] == [("warning", head.format(f" (run {quarantined}, same inputs, job and schema: "
                                                  "still blocked, not run again)")),
                          *(("warning", c) for c in checks)]
    # why the task failed, with no retry
    assert result["log"].count("AirflowFailException: exit 6: the span is blocked by a quality check "
                               "(the lines above say which) and quarantined, nothing was published; "
                               "not retried") == 2

    # while blocked: the quarantine holds the day, the day before is current, nothing else changed
    assert listed["exit"] == 0
    assert listed["stdout"].splitlines()[0].startswith(f"{quarantined}  span {day}  blocked ")
    assert listed["stdout"].splitlines()[0].endswith(f"  {where}")
    assert listed["stdout"].splitlines()[1:] == checks
    assert (current["exit"], current["stdout"].splitlines()[0]) == (
        0, f"Skipped {before} ({out_before}): already published and current (inputs, schema and job "
           "unchanged)")
    assert load_manifest(out_before)["run_id"] == history[0]["run_id"]
    assert verify(out_before)["records"] == 50

    # released: the day publishes the quarantined run; the task's rerun skips it as current and
    # makes its report (drift against the day before)
    assert (released["exit"], released["stdout"]) == (
        0, f"released run {quarantined}: {out_day} publishes it now\n")
    assert entries(out_day) == []
    assert load_manifest(out_day)["run_id"] == quarantined and verify(out_day)["records"] == 50
    assert runs[3][1][0] == ("info", f"Skipped {day} ({out_day}): already published and current "
                                     "(inputs, schema and job unchanged)")
    report = json.loads(Path(out_day, "report.json").read_text())
    assert report["run_id"] == quarantined and "drift" in report
    assert [(h["span"], h["status"], h["exit_code"], h["run_id"] == quarantined) for h in history] == [
        (before, "ok", 0, False), (day, "blocked", 6, True), (before, "skipped", 0, False),
        (day, "blocked", 6, False), (day, "released", 0, True), (day, "skipped", 0, False)]


# --- cron and systemd -------------------------------------------------------------------------

def cron_job() -> tuple[list[str], str]:
    """The schedule fields + user, and the command, of the one job line."""
    lines = [ln for ln in (SCHEDULE / "etl-daily.cron").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "CRON_TZ=UTC"
    assert len(lines) == 2
    fields = lines[1].split(None, 6)
    return fields[:6], fields[6]


def local_command(command: str, tmp_path: Path) -> str:
    """The cron command as cron hands it to sh (\\% -> %), pointed at this checkout and tmp_path."""
    return (command.replace("\\%", "%").replace("/opt/etl", ROOT)
            .replace("/var/log/etl-daily.log", str(tmp_path / "etl-daily.log"))
            .replace("/tmp/etl-daily.lock", str(tmp_path / "etl-daily.lock")))


def test_cron_line_runs_yesterday_under_flock(tmp_path: Path) -> None:
    schedule, command = cron_job()
    assert schedule == ["15", "2", "*", "*", "*", "etl"]
    date_expr = '"$(date -u -d yesterday +%F)"'
    cmd = local_command(command, tmp_path)
    assert cmd.count(date_expr) == 1
    yesterday = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).date().isoformat()
    assert subprocess.run(["sh", "-c", f"echo {date_expr}"], capture_output=True, text=True,
                          check=True).stdout.strip() == yesterday

    # the command as written, for a day of the sample, as a dry run into tmp_path
    dry = cmd.replace(date_expr, f"{SPAN} --dry-run --output {tmp_path}/out/{{date}}")
    assert subprocess.run(["sh", "-c", dry], timeout=120).returncode == 0
    assert (tmp_path / "etl-daily.log").read_text().splitlines() == [
        f"{SPAN}  would run   {tmp_path}/out/{SPAN}  (not published yet)",
        "dry run: 1 would run, 0 would be skipped, 0 would fail; nothing was run"]

    # a run still holding the lock: the next start gives up at once and runs nothing
    with open(tmp_path / "etl-daily.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        busy = subprocess.run(["sh", "-c", dry], timeout=30)
    assert busy.returncode == 1
    assert len((tmp_path / "etl-daily.log").read_text().splitlines()) == 2


def unit_keys(path: Path) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current = ""
    for ln in path.read_text().splitlines():
        if not ln.strip() or ln.startswith("#"):
            continue
        if ln.startswith("["):
            current = ln.strip("[]")
            sections[current] = {}
        else:
            key, _, value = ln.partition("=")
            sections[current][key] = value
    return sections


def test_systemd_units(tmp_path: Path) -> None:
    service, timer = unit_keys(SCHEDULE / "etl-daily.service"), unit_keys(SCHEDULE / "etl-daily.timer")
    assert service["Service"]["Type"] == "oneshot"
    assert timer["Timer"] == {"OnCalendar": "*-*-* 02:15:00 UTC", "Persistent": "true",
                              "AccuracySec": "1min", "Unit": "etl-daily.service"}
    assert timer["Install"] == {"WantedBy": "timers.target"}
    if shutil.which("systemd-analyze"):
        # systemd's own parser, on copies pointed at this checkout (it checks ExecStart exists)
        for name in ("etl-daily.service", "etl-daily.timer"):
            (tmp_path / name).write_text((SCHEDULE / name).read_text().replace("/opt/etl", ROOT))
        check = subprocess.run(["systemd-analyze", "verify", "etl-daily.service", "etl-daily.timer"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert (check.returncode, check.stderr) == (0, "")  # unknown keys only warn on stderr
        nxt = subprocess.run(["systemd-analyze", "calendar", "--iterations=2", "*-*-* 02:15:00 UTC"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        assert len(re.findall(r"\w{3} \d{4}-\d\d-\d\d 02:15:00 UTC", nxt)) == 2  # next two starts

    # ExecStart as systemd runs it (no shell), from WorkingDirectory, as a dry run for one day
    argv = shlex.split(service["Service"]["ExecStart"].replace("/opt/etl", ROOT))
    assert argv[:4] == [os.path.join(ROOT, ".venv", "bin", "python"), "run_pipeline.py", "run",
                        "examples/daily.yaml"]
    dry = subprocess.run([sys.executable, *argv[1:], "--date", SPAN, "--dry-run",
                          "--output", f"{tmp_path}/out/{{date}}"],
                         cwd=service["Service"]["WorkingDirectory"].replace("/opt/etl", ROOT),
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == f"{SPAN}  would run   {tmp_path}/out/{SPAN}  (not published yet)"
    # without --date (as the timer starts it) the span is yesterday in UTC
    default = subprocess.run([sys.executable, *argv[1:], "--dry-run", "--output", f"{tmp_path}/out/{{date}}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    yesterday = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).date().isoformat()
    assert default.returncode == 0, default.stderr
    assert default.stdout.splitlines()[0].startswith(yesterday)
