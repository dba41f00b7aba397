"""`format: sql` against what users do today (issue 31): COPY the query to a CSV file, then
convert the CSV; and against ADBC's raw Arrow fetch of the same query (the floor).

    python -m benchmarks.sql_bench [--rows 10000000] [--repeat 3] [--workdir DIR]
                                   [--shards 8] [--split-rows N]

A throwaway PostgreSQL (tests.postgres_server.start_server: initdb + pg_ctl on loopback, fsync
off) gets a table `events(id bigint primary key, x float8, s text, label int)` of --rows rows
(`INSERT ... SELECT g, random(), md5(g::text), g % 10 FROM generate_series(1, N) g`, then
VACUUM ANALYZE); the query is `SELECT id, x, s, label FROM events`, the schema id int64,
x float64 (encoding raw), s bytes, label int64. Variants, each run --repeat times, alternating
order between rounds; medians:

- ours:       run_pipeline.py run on a job with `format: sql`, `key: id`, no split_by
- ours_split: the same with `split_by: id` and `split_rows` = ceil(N / 6) (6 ranges)
- copy_csv:   COPY (query) TO STDOUT (FORMAT csv, HEADER) through psycopg into a file (in this
              process), then run_pipeline.py run on a CSV job of that file; both parts timed,
              the sum reported with each part
- adbc_raw:   ADBC's Arrow stream of the query, in this process: `cur.execute(q); for b in
              cur.fetch_record_batch(): pass` (rows counted); the floor for reading the rows

Wall seconds; CPU seconds are user+sys of our CLI's process tree (os.wait4: children included)
or of this process for the in-process parts. The server's own CPU is in neither (pg_ctl
daemonizes it); it is the `server CPU s` column: the postmaster's and its reaped backends'
user+sys seconds (/proc) over the variant. Each CLI run must have written N records (the
manifest's counts) and `ours` and `ours_split` must have written byte-identical shards
(sha256 of each file), shown as `identical`. The server is stopped and the scratch (a new
directory in --workdir, or a temporary one) deleted even on failure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("ours", "ours_split", "copy_csv", "adbc_raw")
QUERY = "SELECT id, x, s, label FROM events"
PASSWORD_ENV = "ETL_SQL_BENCH_PASSWORD"  # the child reads the password from here, never argv
SCHEMA = """\
name: sql_bench
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float64, shape: [], encoding: raw}
  s: {dtype: bytes, shape: []}
  label: {dtype: int64, shape: []}
"""
SEED = 42
RANGES = 6


def load_table(server: Any, rows: int) -> None:
    """`events` with `rows` rows, vacuumed and analyzed (visibility map set, stats fresh)."""
    with server.connect() as conn:
        conn.execute("CREATE TABLE events(id bigint primary key, x float8, s text, label int)")
        conn.execute("INSERT INTO events SELECT g, random(), md5(g::text), g %% 10 "
                     "FROM generate_series(1, %s) g", (rows,))
        conn.execute("VACUUM ANALYZE events")


def write_job(workdir: str, name: str, source: dict[str, Any], shards: int) -> str:
    """A job file (JSON is YAML) under WORKDIR/NAME/ whose output is WORKDIR/NAME/out."""
    folder = os.path.join(workdir, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "schema.yaml"), "w", encoding="utf-8") as fh:
        fh.write(SCHEMA)
    job = {"schema": "schema.yaml", "sources": {"train": source}, "output": "out",
           "shards": shards, "shuffle": {"seed": SEED}, "compression": "none"}
    path = os.path.join(folder, "job.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(job, fh)
    return path


def run_cli(job: str, env: dict[str, str]) -> tuple[float, float]:
    """`run_pipeline.py run JOB --force`: wall and user+sys seconds of its process tree."""
    out = os.path.join(os.path.dirname(job), "out")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, os.path.join(REPO, "run_pipeline.py"), "run", job, "--force",
           "--progress", "none", "--runner=FnApiRunner"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=os.path.dirname(job), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")  # small: --progress none
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{job}: exit {proc.returncode}: {err.strip()[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def written(job: str) -> tuple[int, dict[str, str]]:
    """Records the run's manifest counts, and sha256 of each shard file by name."""
    out = os.path.join(os.path.dirname(job), "out")
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    records = sum(s["num_records"] for s in manifest["splits"].values())
    digests = {}
    for name in sorted(os.listdir(out)):
        if name.endswith(".tfrecord"):
            h = hashlib.sha256()
            with open(os.path.join(out, name), "rb") as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
            digests[name] = h.hexdigest()
    return records, digests


def copy_to_csv(server: Any, path: str) -> tuple[float, float]:
    """COPY (QUERY) TO STDOUT as CSV with a header, through psycopg, into `path`."""
    t0, c0 = time.monotonic(), time.process_time()
    with server.connect() as conn, open(path, "wb") as fh:
        with conn.cursor().copy(f"COPY ({QUERY}) TO STDOUT (FORMAT csv, HEADER)") as copy:
            for data in copy:
                fh.write(data)
    return time.monotonic() - t0, time.process_time() - c0


def adbc_raw(server: Any) -> tuple[float, float, int]:
    """ADBC's Arrow stream of QUERY with its defaults, each batch dropped: wall, CPU, rows."""
    from adbc_driver_postgresql import dbapi  # noqa: PLC0415

    t0, c0 = time.monotonic(), time.process_time()
    rows = 0
    with dbapi.connect(server.url(with_password=True), autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.execute(QUERY)
            for batch in cur.fetch_record_batch():
                rows += batch.num_rows
    return time.monotonic() - t0, time.process_time() - c0, rows


def server_cpu(server: Any) -> float:
    """User+sys seconds of the server's postmaster and every backend it has reaped (a client's
    backend exits when the client disconnects): read before and after a variant, the server's
    share of it. Background processes still alive (checkpointer, walwriter) are not in it."""
    with open(os.path.join(server.datadir, "data", "postmaster.pid"), encoding="ascii") as fh:
        pid = fh.readline().strip()
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime..cstime


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(rows: int, got: dict[str, dict[str, list[float]]], identical: bool,
          counts: dict[str, set[int]]) -> str:
    """The markdown table of medians, the ratios against copy_csv and adbc_raw, and the checks."""
    rate = {v: rows / median(got[v]["wall"]) for v in VARIANTS}
    lines = [f"{rows:,} rows, medians of {len(got['ours']['wall'])}; "
             f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
             "",
             "| variant | wall s | CPU s | server CPU s | records/s | ours records/s x "
             "| records written |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for v in VARIANTS:
        ratio = f"{rate['ours'] / rate[v]:.2f}" if v != "ours" else ""
        wrote = ", ".join(f"{c:,}" for c in sorted(counts[v])) if v in counts else "-"
        lines.append(f"| {v} | {median(got[v]['wall']):.2f} | {median(got[v]['cpu']):.2f} | "
                     f"{median(got[v]['server']):.2f} | {rate[v]:,.0f} | {ratio} | {wrote} |")
        if v == "copy_csv":
            for part in ("copy", "csv_run"):
                lines.append(f"| - {part} | {median(got[v][part + '_wall']):.2f} | "
                             f"{median(got[v][part + '_cpu']):.2f} | | | | |")
    lines += ["",
              f"ours vs copy_csv: {rate['ours'] / rate['copy_csv']:.2f}x records/s (goal >= 1)",
              f"ours vs adbc_raw: {rate['ours'] / rate['adbc_raw']:.2f}x records/s "
              "(goal: within 2x, i.e. >= 0.50)",
              f"identical: {'yes' if identical else 'NO'} (ours and ours_split shards, sha256)",
              "records: " + (f"all {rows:,}" if all(c == {rows} for c in counts.values())
                             else "WRONG")]
    return "\n".join(lines)


def bench(server: Any, rows: int, repeat: int, workdir: str, shards: int,
          split_rows: int) -> tuple[str, bool]:
    """Every variant `repeat` times (order reversed every other round): the table, and
    whether every check held."""
    base = {"format": "sql", "url": server.url(with_password=False),
            "password_env": PASSWORD_ENV, "query": QUERY, "key": "id"}
    jobs = {"ours": write_job(workdir, "ours", base, shards),
            "ours_split": write_job(workdir, "ours_split",
                                    {**base, "split_by": "id", "split_rows": split_rows}, shards)}
    csv = os.path.join(workdir, "events.csv")
    jobs["copy_csv"] = write_job(workdir, "copy_csv", {"format": "csv", "paths": [csv]}, shards)
    env = {**os.environ, PASSWORD_ENV: server.password,
           "PYTHONPATH": REPO + (os.pathsep + os.environ["PYTHONPATH"]
                                 if os.environ.get("PYTHONPATH") else "")}
    got: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
    counts: dict[str, set[int]] = {}
    digests: dict[str, list[dict[str, str]]] = {"ours": [], "ours_split": []}

    def add(variant: str, **values: float) -> None:
        for k, x in values.items():
            got[variant].setdefault(k, []).append(x)

    for r in range(repeat):
        for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            print(f"[{rows:,} rows] {v} run {r + 1}/{repeat} ...", file=sys.stderr, flush=True)
            time.sleep(0.3)  # the previous variant's backends reaped (outside any timing)
            before = server_cpu(server)
            if v == "adbc_raw":
                wall, cpu, n = adbc_raw(server)
                counts.setdefault(v, set()).add(n)
                time.sleep(0.3)
                add(v, wall=wall, cpu=cpu, server=server_cpu(server) - before)
                continue
            if v == "copy_csv":
                cw, cc = copy_to_csv(server, csv)
                rw, rc = run_cli(jobs[v], env)
                os.remove(csv)
                time.sleep(0.3)
                add(v, wall=cw + rw, cpu=cc + rc, server=server_cpu(server) - before,
                    copy_wall=cw, copy_cpu=cc, csv_run_wall=rw, csv_run_cpu=rc)
            else:
                wall, cpu = run_cli(jobs[v], env)
                time.sleep(0.3)
                add(v, wall=wall, cpu=cpu, server=server_cpu(server) - before)
            n, shas = written(jobs[v])
            counts.setdefault(v, set()).add(n)
            if v in digests:
                digests[v].append(shas)
            shutil.rmtree(os.path.join(os.path.dirname(jobs[v]), "out"), ignore_errors=True)
    first = digests["ours"][0]
    identical = bool(first) and all(d == first for ds in digests.values() for d in ds)
    ok = identical and all(c == {rows} for c in counts.values())
    return table(rows, got, identical, counts), ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sql_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000_000, help="rows in the events table")
    p.add_argument("--repeat", type=int, default=3, help="runs per variant (medians)")
    p.add_argument("--workdir", help="scratch (default: a new temporary directory); deleted")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--split-rows", type=int,
                   help=f"ours_split's split_rows (default: ceil(rows / {RANGES}))")
    args = p.parse_args(argv)
    if min(args.rows, args.repeat, args.shards, 1 if args.split_rows is None else args.split_rows) < 1:
        p.error("--rows, --repeat, --shards and --split-rows must be at least 1")
    sys.path.insert(0, REPO)
    from tests.postgres_server import start_server, stop_server  # noqa: PLC0415

    made = args.workdir and not os.path.exists(args.workdir)  # then it goes too, at the end
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="sql-bench-", dir=args.workdir)
    server = None
    try:
        server = start_server()
        t0 = time.monotonic()
        load_table(server, args.rows)
        print(f"[{args.rows:,} rows] table loaded in {time.monotonic() - t0:.1f} s",
              file=sys.stderr, flush=True)
        text, ok = bench(server, args.rows, args.repeat, workdir, args.shards,
                         args.split_rows or math.ceil(args.rows / RANGES))
        print(text, flush=True)
        return 0 if ok else 1
    finally:
        shutil.rmtree(args.workdir if made else workdir, ignore_errors=True)
        if server is not None:
            stop_server(server)


if __name__ == "__main__":
    sys.exit(main())
