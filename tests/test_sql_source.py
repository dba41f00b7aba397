"""`format: sql` against a real PostgreSQL server (tests/postgres_server.py starts it), and
DuckDB and SQLite files made here: exact values for every mapped type, NULLs, byte-identical
shards with and without `split_by` and after the table's physical order changes, one snapshot
while another connection writes, no password in anything a run writes or prints, one-line
errors, spans skipped and rebuilt from the rows' fingerprint."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import ROOT, RUN, cli, records_by_id, wait_paused

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TYPES_TABLE = """
CREATE TABLE kinds (
  id bigint PRIMARY KEY, small smallint, medium integer, big bigint, r real, d float8,
  money numeric(10, 2), free numeric, t text, v varchar(10), b bytea, flag boolean,
  day date, at timestamp, atz timestamptz, ints integer[], floats float8[], words text[]
)"""

TYPES_SCHEMA = """\
name: kinds
kind: example
features:
  id: {dtype: int64, shape: []}
  small: {dtype: int16, shape: []}
  medium: {dtype: int32, shape: []}
  big: {dtype: int64, shape: []}
  r: {dtype: float32, shape: []}
  d: {dtype: float64, shape: [], encoding: raw}
  money: {dtype: bytes, shape: []}
  free: {dtype: bytes, shape: []}
  t: {dtype: bytes, shape: []}
  v: {dtype: bytes, shape: []}
  b: {dtype: bytes, shape: []}
  flag: {dtype: int64, shape: []}
  day: {dtype: date}
  at: {dtype: timestamp, unit: us}
  atz: {dtype: timestamp, unit: us}
  ints: {dtype: int32, shape: [-1]}
  floats: {dtype: float64, shape: [2], encoding: raw}
  words: {dtype: bytes, shape: [-1]}
"""


def type_rows() -> list[tuple[Any, ...]]:
    epoch = dt.datetime(2021, 3, 4, 5, 6, 7, 891011)
    return [(i, -32768 + i, 2**31 - 1 - i, -(2**62) + i * 3_000_000_007, 0.1 * i, 1 / (i + 3),
             Decimal(f"{i}.{i % 100:02d}"), Decimal(f"123456789012345678901234567890.{i:09d}"),
             f"text {i} é", f"v{i}", bytes([i % 256, 0, 255]), i % 2 == 0,
             dt.date(1969, 12, 31) + dt.timedelta(days=i), epoch + dt.timedelta(seconds=i),
             (epoch + dt.timedelta(minutes=i)).replace(tzinfo=dt.timezone.utc),
             list(range(i % 4)), [i / 7, -0.0], [f"w{j}" for j in range(i % 3)])
            for i in range(60)]


def write_job(folder: Path, url: str, query: str, schema: str, **source: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.yaml").write_text(schema)
    job = {"schema": "schema.yaml",
           "source": {"format": "sql", "url": url, "query": query, **source},
           "split": {"train": 0.75, "test": 0.25}, "output": "out", "shards": 3,
           "shuffle": {"seed": 11}, "compression": "none"}
    (folder / "job.yaml").write_text(json.dumps(job))
    return folder / "job.yaml"


def run(job: Path, *args: str, env: dict[str, str] | None = None,
        ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = cli("run", str(job), "--runner=FnApiRunner", *args, env=env)
    if ok:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def shard_digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.glob("*.tfrecord"))}


@pytest.fixture(scope="module")
def kinds(postgres) -> str:
    return postgres.table("kinds", TYPES_TABLE, type_rows())


def test_every_mapped_postgres_type_is_exact(postgres, kinds, tmp_path):
    job = write_job(tmp_path / "job", postgres.url(), kinds, TYPES_SCHEMA, key="id")
    run(job)
    got = records_by_id(tmp_path / "job" / "out")
    assert sorted(got) == list(range(60))
    epoch_us = dt.datetime(1970, 1, 1)
    for row in type_rows():
        i = row[0]
        r = got[i]
        assert (r["small"], r["medium"], r["big"]) == (row[1], row[2], row[3])
        assert r["r"] == float(np.float32(row[4]))
        assert r["d"] == row[5]
        assert r["money"] == str(row[6]).encode()
        assert r["free"] == str(row[7]).encode()
        assert (r["t"], r["v"], r["b"]) == (row[8].encode(), row[9].encode(), row[10])
        assert r["flag"] == int(row[11])
        assert r["day"] == (row[12] - dt.date(1970, 1, 1)).days
        assert r["at"] == (row[13] - epoch_us) // dt.timedelta(microseconds=1)
        assert r["atz"] == (row[14].replace(tzinfo=None) - epoch_us) // dt.timedelta(microseconds=1)
        assert r["ints"] == row[15] and r["floats"] == row[16]
        assert r["words"] == [w.encode() for w in row[17]]


# ----------------------------------------------------------------- NULLs, order, snapshot

PLAIN_SCHEMA = """\
name: plain
kind: example
features:
  id: {dtype: int64, shape: []}
  x: {dtype: float32, shape: []}
  s: {dtype: bytes, shape: [], default: none}
"""


def fill_plain(postgres, table: str, n: int) -> None:
    with postgres.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, x real, s text)")
        conn.execute(f"INSERT INTO {table} SELECT g, (g * 7 % 1000) / 8.0, "
                     f"CASE WHEN g % 5 = 0 THEN NULL ELSE 'row ' || g END "
                     f"FROM generate_series(0, {n - 1}) g")
        conn.execute(f"CREATE INDEX ON {table} (x)")


def test_a_null_without_default_is_rejected_and_counted(postgres, tmp_path):
    postgres.table("holes", "CREATE TABLE holes (id bigint, x real, s text)",
                   [(1, 1.5, "a"), (2, None, "b"), (3, 3.5, None), (4, None, None), (5, 0, "e")])
    job = write_job(tmp_path / "job", postgres.url(), "SELECT id, x, s FROM holes", PLAIN_SCHEMA,
                    key="id")
    doc = json.loads(job.read_text())
    job.write_text(json.dumps({**doc, "max_bad_fraction": 0.5}))
    run(job)
    out = tmp_path / "job" / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rejected"]["num_records"] == 2
    assert manifest["rejected"]["by_reason"] == {"missing_required": 2}
    got = records_by_id(out)
    assert {i: (r["x"], r["s"]) for i, r in got.items()} == {
        1: (1.5, b"a"), 3: (3.5, b"none"), 5: (0.0, b"e")}  # 0 stays 0, NULL s the default
    rejected = [json.loads(line) for line in (out / "rejected" / "rejected.jsonl").open()]
    assert sorted(r["record"] for r in rejected) == [2, 4]  # the key names the row


def test_shards_are_the_same_with_split_by_and_after_the_table_is_reordered(postgres, tmp_path):
    fill_plain(postgres, "ordered", 20_000)
    query = "SELECT id, x, s FROM ordered"
    whole = write_job(tmp_path / "whole", postgres.url(), query, PLAIN_SCHEMA, key="id")
    split = write_job(tmp_path / "split", postgres.url(), query, PLAIN_SCHEMA, key="id",
                      split_by="id", split_rows=3000)
    rowwise = write_job(tmp_path / "rowwise", postgres.url(), query, PLAIN_SCHEMA)
    for job in (whole, split, rowwise):
        run(job)
    digests = {job.parent.name: shard_digests(job.parent / "out") for job in (whole, split, rowwise)}
    assert len(digests["whole"]) == 6 and digests["whole"] == digests["split"]
    log = (tmp_path / "split" / "out" / "manifest.json").read_text()
    assert json.loads(log)["inputs"][0]["read"] == 20_000
    with postgres.connect() as conn:  # another physical order: by x, then rewritten
        conn.execute("CLUSTER ordered USING ordered_x_idx")
        conn.execute("VACUUM FULL ordered")
        first = [r[0] for r in conn.execute("SELECT id FROM ordered LIMIT 3")]
    assert first == [0, 1000, 2000]  # a plain SELECT now returns rows in x order
    for job in (whole, split, rowwise):
        run(job, "--force")
        assert shard_digests(job.parent / "out") == digests[job.parent.name], job.parent.name


def test_one_snapshot_while_another_connection_writes(postgres, tmp_path):
    """Paused in its first read (the pause hook), the run sees none of a DELETE, an INSERT and
    an UPDATE committed meanwhile, in all of its 5 range readers; the next run sees them all."""
    fill_plain(postgres, "moving", 5000)
    job = write_job(tmp_path / "job", postgres.url(), "SELECT id, x, s FROM moving",
                    PLAIN_SCHEMA, key="id", split_by="id", split_rows=1000)
    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, RUN, "run", str(job), "--runner=FnApiRunner", "--progress", "none"],
        cwd=ROOT, env={**os.environ, "ETL_PAUSE_AT": "read", "ETL_PAUSE_DIR": str(pause_dir)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_paused(proc, pause_dir, "read")
    with postgres.connect() as conn:
        conn.execute("DELETE FROM moving WHERE id % 10 = 3")
        conn.execute("INSERT INTO moving SELECT g, 1, 'new' FROM generate_series(5000, 5999) g")
        conn.execute("UPDATE moving SET x = -1 WHERE id < 4000")
    (pause_dir / "read.go").touch()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    out = tmp_path / "job" / "out"
    got = records_by_id(out)
    assert sorted(got) == list(range(5000))
    assert all(r["x"] == np.float32((i * 7 % 1000) / 8.0) for i, r in got.items())
    again = run(job)  # the rows changed: rebuilt, and now with every change
    assert "current" not in again.stdout
    got = records_by_id(out)
    assert sorted(got) == sorted([i for i in range(5000) if i % 10 != 3] + list(range(5000, 6000)))
    assert {r["x"] for i, r in got.items() if i < 4000} == {-1.0}


# ------------------------------------------------------------------------------ errors

def error_cases(postgres) -> list[tuple[str, str, str, dict[str, Any], int, str]]:
    """(name, url, query, source extras, exit code, what the line says)."""
    good = postgres.url()
    wrong = postgres.url().replace(postgres.password, "not-the-password")
    from tests.gcs_emulator import free_port  # noqa: PLC0415

    down = f"postgresql://etl:{postgres.password}@127.0.0.1:{free_port()}/warehouse"
    nodb = postgres.url(dbname="nosuchdb")
    reader = f"postgresql://reader:{postgres.password}@127.0.0.1:{postgres.port}/warehouse"
    q = "SELECT id, x, s FROM plain_errors"
    return [
        ("wrong password", wrong, q, {}, 2, 'password authentication failed for user "etl"'),
        ("server down", down, q, {}, 5, "Connection refused"),
        ("unknown database", nodb, q, {}, 2, 'database "nosuchdb" does not exist'),
        ("unknown table", good, "SELECT id, x, s FROM nope", {}, 2, 'relation "nope" does not exist'),
        ("unknown column", good, "SELECT id, x, zz FROM plain_errors", {}, 2,
         'column "zz" does not exist'),
        ("syntax error", good, "SELEC id FROM plain_errors", {}, 2, 'syntax error at or near "SELEC"'),
        ("permission denied", reader, q, {}, 2, "permission denied for table plain_errors"),
        ("a column the schema does not know", good, "SELECT id, x, s, 1 AS extra FROM plain_errors",
         {}, 2, "the query returns column(s) ['extra'] that no schema feature reads"),
        ("a required column missing", good, "SELECT id, s FROM plain_errors", {}, 2,
         "the query returns no column(s) ['x'], which required schema features read"),
        ("a key that is not unique", good, "SELECT id % 3 AS id, x, s FROM plain_errors",
         {"key": "id"}, 2, "key 'id' is not unique: 20 rows, 3 distinct values"),
        ("a text split column", good, q, {"split_by": "s"}, 2,
         "split_by 's' must be an integer or date column, it is string"),
        ("a type we do not map", good, "SELECT id, x, s, interval '1 day' AS x2 FROM plain_errors",
         {}, 2, "column 'x2' has type interval (month_day_nano_interval), which has no exact "
         "TFRecord form here; cast it in the query"),
    ]


@pytest.fixture(scope="module")
def error_table(postgres) -> None:
    with postgres.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS plain_errors")
        conn.execute("CREATE TABLE plain_errors AS SELECT g::bigint AS id, g::real AS x, "
                     "'s' || g AS s FROM generate_series(0, 19) g")
        conn.execute("DROP ROLE IF EXISTS reader")
        conn.execute(f"CREATE ROLE reader LOGIN PASSWORD '{postgres.password}'")


@pytest.mark.parametrize("case", range(12))
def test_errors_say_one_line_without_the_password(postgres, error_table, tmp_path, case):
    name, url, query, extra, code, says = error_cases(postgres)[case]
    job = write_job(tmp_path / "job", url, query, PLAIN_SCHEMA, **extra)
    done = run(job, ok=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, (name, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], (name, lines)
    assert "Traceback" not in done.stderr and postgres.password not in done.stderr + done.stdout
    assert "127.0.0.1" in lines[0]  # the server is named, as the URL shows it
    assert not (tmp_path / "job" / "out").exists()


# ------------------------------------------------------------------------------- spans

def test_a_span_is_current_until_one_of_its_rows_changes(postgres, tmp_path):
    with postgres.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS daily")
        conn.execute("CREATE TABLE daily (id bigint, day date, x real, s text)")
        conn.execute("INSERT INTO daily SELECT g, DATE '2026-01-01' + g % 3, g, 'r' || g "
                     "FROM generate_series(0, 299) g")
    job = write_job(tmp_path / "job", postgres.url(),
                    "SELECT id, x, s FROM daily WHERE day = '{date}'", PLAIN_SCHEMA, key="id")
    doc = json.loads(job.read_text())
    job.write_text(json.dumps({**doc, "output": "out/{date}"}))
    out = tmp_path / "job" / "out" / "2026-01-02"

    def run_id() -> str:
        return json.loads((out / "manifest.json").read_text())["run_id"]

    run(job, "--date", "2026-01-02")
    assert sorted(records_by_id(out)) == list(range(1, 300, 3))
    first = run_id()
    prints = json.loads((out / "manifest.json").read_text())["input_files"]
    assert [p["fingerprint_kind"] for p in prints] == ["rows"]
    assert prints[0]["fingerprint"].startswith("100:")
    run(job, "--date", "2026-01-02")
    assert run_id() == first  # current: skipped
    with postgres.connect() as conn:  # another day's row: this span's rows are the same
        conn.execute("UPDATE daily SET x = -5 WHERE id = 0")
    run(job, "--date", "2026-01-02")
    assert run_id() == first
    with postgres.connect() as conn:
        conn.execute("UPDATE daily SET s = 'changed' WHERE id = 4")
    run(job, "--date", "2026-01-02")
    assert run_id() != first
    assert records_by_id(out)[4]["s"] == b"changed"


def test_a_date_that_is_not_a_date_is_refused_before_any_sql(tmp_path):
    """The URL points at a closed port: had any SQL run, the run would fail with exit 5."""
    from tests.gcs_emulator import free_port  # noqa: PLC0415

    job = write_job(tmp_path / "job", f"postgresql://etl@127.0.0.1:{free_port()}/warehouse",
                    "SELECT id, x, s FROM daily WHERE day = '{date}'", PLAIN_SCHEMA)
    for bad in ("2026-13-45", "2026-01-02'; DROP TABLE daily; --"):
        done = run(job, "--date", bad, ok=False)
        assert done.returncode == 2, done.stderr
        assert "--date" in done.stderr and "Connection refused" not in done.stderr


# ------------------------------------------------------------------- DuckDB and SQLite

def test_duckdb_values_exact_and_split_by_gives_the_same_shards(tmp_path):
    import duckdb  # noqa: PLC0415

    db = tmp_path / "events.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE events (id BIGINT, x REAL, s VARCHAR, amount DECIMAL(10, 2), "
                "day DATE)")
    con.execute("INSERT INTO events SELECT g, g / 4, CASE WHEN g % 7 = 0 THEN NULL ELSE 'e' || g END, "
                "g * 1.25, DATE '2020-01-01' + g::INTEGER FROM range(0, 5000) t(g)")
    con.close()
    schema = PLAIN_SCHEMA + "  amount: {dtype: int64, shape: [], source: cents}\n  day: {dtype: date}\n"
    query = "SELECT id, x, s, CAST(amount * 100 AS BIGINT) AS cents, day FROM events"
    url = "duckdb://events.duckdb"  # relative to the job file
    whole = write_job(tmp_path / "whole", "duckdb://../events.duckdb", query, schema, key="id")
    split = write_job(tmp_path / "split", "duckdb://../events.duckdb", query, schema, key="id",
                      split_by="day", split_rows=700)
    for job in (whole, split):
        run(job)
    assert shard_digests(tmp_path / "whole" / "out") == shard_digests(tmp_path / "split" / "out")
    got = records_by_id(tmp_path / "whole" / "out")
    assert sorted(got) == list(range(5000))
    for i in (0, 1, 7, 4999):
        r = got[i]
        assert (r["x"], r["s"], r["amount"], r["day"]) == (
            i / 4, b"none" if i % 7 == 0 else f"e{i}".encode(), i * 125, 18262 + i)
    assert url  # the form the docs show


def test_sqlite_reads_in_one_transaction_and_refuses_split_by(tmp_path):
    db = tmp_path / "events.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, x REAL, s TEXT)")
        con.executemany("INSERT INTO events VALUES (?, ?, ?)",
                        [(i, i * 0.5, None if i % 4 == 0 else f"q{i}") for i in range(300)])
    plain = write_job(tmp_path / "plain", f"sqlite://{db}", "SELECT id, x, s FROM events;",
                      PLAIN_SCHEMA)
    run(plain)
    got = records_by_id(tmp_path / "plain" / "out")
    assert {i: (r["x"], r["s"]) for i, r in got.items()} == {
        i: (i * 0.5, b"none" if i % 4 == 0 else f"q{i}".encode()) for i in range(300)}
    split = write_job(tmp_path / "split", f"sqlite://{db}", "SELECT id, x, s FROM events",
                      PLAIN_SCHEMA, split_by="id")
    done = run(split, ok=False)
    assert done.returncode == 2
    assert "split_by is for PostgreSQL and DuckDB; an SQLite file is read in one piece" in done.stderr


def test_dropped_connections_are_tried_again_a_bounded_number_of_times(postgres, error_table,
                                                                       tmp_path):
    """The first two connections are closed by the network: the run connects at the third
    (after 1 + 2 s) and succeeds; a network that drops every connection fails with exit 5
    after 4 tries (1 + 2 + 4 s of waiting)."""
    from tests.tcp_proxy import DroppingProxy  # noqa: PLC0415

    with DroppingProxy(postgres.port, drop=2) as proxy:
        url = postgres.url().replace(f":{postgres.port}/", f":{proxy.port}/")
        job = write_job(tmp_path / "flaky", url, "SELECT id, x, s FROM plain_errors",
                        PLAIN_SCHEMA, key="id")
        run(job)
        assert sorted(records_by_id(tmp_path / "flaky" / "out")) == list(range(20))
        assert proxy.accepted >= 3
    with DroppingProxy(postgres.port, drop=1000) as proxy:
        url = postgres.url().replace(f":{postgres.port}/", f":{proxy.port}/")
        job = write_job(tmp_path / "dead", url, "SELECT id, x, s FROM plain_errors", PLAIN_SCHEMA)
        done = run(job, ok=False)
        assert done.returncode == 5 and proxy.accepted == 4, done.stderr
        assert "server closed the connection unexpectedly" in done.stderr.splitlines()[0]
