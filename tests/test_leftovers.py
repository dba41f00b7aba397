"""Every leftover is ours to clean, and only ours (issue 28, G21).

A run deletes only files whose names it made, in directories it made: its log pruning
leaves other programs' logs and a symlinked logs folder alone; a run killed with SIGKILL at
any phase leaves nothing the next run does not remove (its scratch files included, wherever
they are); a signal during start-up gives 130/143 and one line; a worker pool that goes on
writing after its launcher stopped leaves nothing behind either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import IDS_SCHEMA, ROOT, RUN

RUN_IDS = [f"20261120T0000{i:02d}-abc{i:03d}-ids-0123456789ab" for i in range(12)]


def write_job(folder: Path, rows: int = 300, **extra: object) -> str:
    """A small CSV job converting into `folder/out`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(IDS_SCHEMA)
    (folder / "ids.csv").write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n"
                                                         for i in range(rows)))
    job = folder / "job.yaml"
    job.write_text(json.dumps({"schema": "schema.yaml", "output": str(folder / "out"),
                               "shards": 2, "shuffle": {"seed": 5},
                               "sources": {"train": {"format": "csv", "paths": ["ids.csv"]}},
                               **extra}))
    return str(job)


def run(job: str, *args: str, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, RUN, "run", job, "--progress", "none", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


# ------------------------------------------------------------------------------- log pruning


def test_log_pruning_deletes_only_its_own_logs(tmp_path: Path) -> None:
    """Other programs' `*.log` files in the logs folder are neither deleted nor counted as
    runs (they used to be, and `app1.log`/`app10.log` sorted after every run id: the new
    run's own log was deleted); the newest 10 runs' files are kept, this run's among them."""
    job = write_job(tmp_path)
    logs = tmp_path / ".out.etl" / "logs"
    logs.mkdir(parents=True)
    foreign = ["app1.log", "app10.log", "zz.log", "notes.txt", "20261120T000000.log"]
    for name in foreign:
        (logs / name).write_text("not ours\n")
    for run_id in RUN_IDS:
        (logs / f"{run_id}.log").write_text("old run\n")
    (logs / f"{RUN_IDS[0]}.rejected.jsonl").write_text("{}\n")
    (logs / f"{RUN_IDS[11]}.rejected.jsonl").write_text("{}\n")

    proc = run(job)
    assert proc.returncode == 0, proc.stderr
    names = sorted(os.listdir(logs))
    new = [n for n in names if n.endswith(".log") and n not in foreign
           and n.removesuffix(".log") not in RUN_IDS]
    assert len(new) == 1  # this run's log
    assert names == sorted([*foreign, *new, f"{RUN_IDS[11]}.rejected.jsonl",
                            *(f"{r}.log" for r in RUN_IDS[3:])])
    for name in foreign:
        assert (logs / name).read_text() == "not ours\n"


def test_log_pruning_never_follows_a_symlinked_logs_folder(tmp_path: Path) -> None:
    """A `.out.etl/logs` that is a symbolic link (to another program's log folder) is not
    pruned at all: one warning, every file there survives, even names shaped like ours."""
    job = write_job(tmp_path)
    elsewhere = tmp_path / "app-logs"
    elsewhere.mkdir()
    for name in ("app1.log", "app10.log", *(f"{r}.log" for r in RUN_IDS)):
        (elsewhere / name).write_text("theirs\n")
    before = sorted(os.listdir(elsewhere))
    work = tmp_path / ".out.etl"
    work.mkdir()
    (work / "logs").symlink_to(elsewhere)

    proc = run(job)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "pruning" in line] == [
        f"WARNING not pruning old run logs in {work / 'logs'}: it is a symbolic link or not "
        "a directory; only a folder this project made is "
        "pruned"]
    after = sorted(os.listdir(elsewhere))
    assert set(before) <= set(after)  # nothing deleted (the run's own log went in there)
    assert len(after) == len(before) + 1
    assert all((elsewhere / n).read_text() == "theirs\n" for n in before)
