"""`infer-schema --sql-url URL --query Q`: a schema from a database's declared column types,
against a real PostgreSQL server (tests/postgres_server.py) and a DuckDB file made here: the
exact schema, the NULL counts in the summary, the job it writes converting every row through
`run`, no password in anything printed or written, one-line errors with the documented codes."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pytest
import yaml

from tests.helpers import cli, records_by_id

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TABLE = """
CREATE TABLE infer_me (
  id bigint PRIMARY KEY, i integer, big bigint, d float8, t text, b bytea, flag boolean,
  day date, ts timestamp, ints integer[]
)"""
ROWS = 40
ENV = "ETL_TEST_INFER_PASSWORD"


def rows() -> list[tuple[Any, ...]]:
    """NULLs in i (every 4th row), t and b (every 5th), flag (every 6th), ints (every 7th)."""
    t0 = dt.datetime(2022, 5, 6, 7, 8, 9, 123456)
    return [(k, None if k % 4 == 1 else 10 * k, 2**40 + k, k / 8 - 1.5,
             None if k % 5 == 2 else f"text {k}", None if k % 5 == 3 else bytes([k, 0, 255]),
             None if k % 6 == 4 else k % 2 == 0, dt.date(2000, 1, 1) + dt.timedelta(days=k),
             t0 + dt.timedelta(seconds=k), None if k % 7 == 5 else list(range(k % 3)))
            for k in range(ROWS)]


NULLS = {"i": 10, "t": 8, "b": 8, "flag": 6, "ints": 5}  # of the 40 rows, as rows() puts them

EXPECTED = {
    "name": "infer_me",
    "kind": "example",
    "features": {
        "id": {"dtype": "int64", "shape": []},
        "i": {"dtype": "int32", "shape": [], "default": -1},
        "big": {"dtype": "int64", "shape": []},
        "d": {"dtype": "float64", "shape": [], "encoding": "raw"},
        "t": {"dtype": "bytes", "shape": [], "default": ""},
        "b": {"dtype": "bytes", "shape": [], "default": ""},
        "flag": {"dtype": "int64", "shape": [], "default": -1},
        "day": {"dtype": "date"},
        "ts": {"dtype": "timestamp", "unit": "us"},
        "ints": {"dtype": "int32", "shape": [-1], "required": False},
    },
}

NULL_LINE = "  NULLs in the sample: i 10 of 40, t 8 of 40, b 8 of 40, flag 6 of 40, ints 5 of 40"


@pytest.fixture(scope="module")
def table(postgres) -> str:
    postgres.table("infer_me", TABLE, rows())
    assert sum(r[1] is None for r in rows()) == NULLS["i"]
    assert sum(r[6] is None for r in rows()) == NULLS["flag"]
    assert sum(r[9] is None for r in rows()) == NULLS["ints"]
    return "SELECT * FROM infer_me"


def no_password(password: str, *texts: str) -> None:
    for text in texts:
        assert password not in text


def test_postgres_schema_from_declared_types_then_run(postgres, table, tmp_path):
    env = {**os.environ, ENV: postgres.password}
    schema, job = tmp_path / "schema.yaml", tmp_path / "job.yaml"
    done = cli("infer-schema", "--sql-url", postgres.url(with_password=False), "--query", table,
               "--password-env", ENV, "--key", "id", "-o", str(schema), "--job", str(job),
               env=env)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(schema.read_text()) == EXPECTED
    shown = postgres.url(with_password=False)
    lines = done.stdout.splitlines()
    assert lines[:3] == [f"wrote {schema}", f"wrote {job}",
                         f"infer-schema: 10 features from all 40 rows of the query on {shown} "
                         "(sql)"]
    assert NULL_LINE in lines
    assert ("  defaults (a run fills and counts them): i -1 fills 10 of 40 sampled values, t '' "
            "fills 8 of 40 sampled values, b '' fills 8 of 40 sampled values, flag -1 fills 6 of "
            "40 sampled values") in lines
    assert "# review: NULL in 10 of 40 sampled rows: default -1 lies below every sampled" \
        in schema.read_text()
    written = yaml.safe_load(job.read_text())
    assert written["source"] == {"format": "sql", "url": shown, "query": table,
                                 "password_env": ENV, "key": "id"}
    no_password(postgres.password, done.stdout, done.stderr, schema.read_text(), job.read_text())

    ran = cli("run", str(job), "--runner=FnApiRunner", env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    no_password(postgres.password, ran.stdout, ran.stderr)
    got = records_by_id(tmp_path / written["output"])
    assert sorted(got) == list(range(ROWS))
    for k, i, big, d, t, b, flag, day, ts, ints in rows():
        r = got[k]
        assert (r["i"], r["big"], r["d"]) == (-1 if i is None else i, big, d)
        assert (r["t"], r["b"]) == ((t or "").encode(), b or b"")
        assert r["flag"] == (-1 if flag is None else int(flag))
        assert r["day"] == (day - dt.date(1970, 1, 1)).days
        assert r["ts"] == (ts - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        assert r["ints"] == (ints or [])


def test_password_in_the_url_is_never_shown(postgres, table, tmp_path):
    done = cli("infer-schema", "--sql-url", postgres.url(), "--query", table, "--sample", "5")
    assert done.returncode == 0, done.stderr
    assert f"from the first 5 rows of the query on {postgres.url(with_password=False)}." \
        in done.stdout.replace("\n# ", " ")
    no_password(postgres.password, done.stdout, done.stderr)
    schema, job = tmp_path / "s.yaml", tmp_path / "j.yaml"
    done = cli("infer-schema", "--sql-url", postgres.url(), "--query", table, "-o", str(schema),
               "--job", str(job))
    assert done.returncode == 0, done.stderr
    text = job.read_text()
    assert "# review: the password given in --sql-url is not written here" in text
    source = yaml.safe_load(text)["source"]
    assert source["url"] == postgres.url(with_password=False) and "password_env" not in source
    no_password(postgres.password, done.stdout, done.stderr, schema.read_text(), text)


def test_nulls_where_no_default_fits_are_required_and_counted(postgres, tmp_path):
    query = postgres.table("holes", "CREATE TABLE holes (id int, d float8, day date, small smallint)",
                           [(1, 0.5, dt.date(2020, 1, 1), -32768), (2, None, None, None),
                            (3, 1.5, dt.date(2020, 1, 3), 3)])
    done = cli("infer-schema", "--sql-url", postgres.url(), "--query", query)
    assert done.returncode == 0, done.stderr
    got = yaml.safe_load(done.stdout)["features"]
    assert got == {"id": {"dtype": "int32", "shape": []},
                   "d": {"dtype": "float64", "shape": [], "encoding": "raw"},
                   "day": {"dtype": "date"},
                   "small": {"dtype": "int16", "shape": []}}
    assert ("  required, but values missing in the sample (a run rejects and counts those "
            "records): d (1 of 3), day (1 of 3), small (1 of 3)") in done.stderr.splitlines()
    assert "  NULLs in the sample: d 1 of 3, day 1 of 3, small 1 of 3" in done.stderr.splitlines()
    assert "COALESCE(d, 'NaN') in the query with allow_nan: true" in " ".join(
        line.strip("# ") for line in done.stdout.splitlines())


@pytest.mark.parametrize(("how", "code", "says"), [
    ("password", 2, "password authentication failed for user \"etl\""),
    ("table", 2, "relation \"no_such_table\" does not exist"),
])
def test_errors_are_one_line(postgres, table, how, code, says):
    env = {**os.environ, ENV: "wrong" if how == "password" else postgres.password}
    query = "SELECT * FROM no_such_table" if how == "table" else table
    done = cli("infer-schema", "--sql-url", postgres.url(with_password=False), "--query", query,
               "--password-env", ENV, env=env)
    assert done.returncode == code
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {postgres.url(with_password=False)}"), lines
    assert says in lines[0]
    no_password(postgres.password, done.stderr)


def test_duckdb_file(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    db = tmp_path / "f.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE TABLE t (id bigint, x double, s varchar, n integer, xs integer[])")
        conn.execute("INSERT INTO t SELECT i, i / 4, 'v' || i, CASE WHEN i % 3 = 0 THEN NULL "
                     "ELSE i END, CASE WHEN i % 5 = 0 THEN NULL ELSE [i, i] END "
                     "FROM range(30) r(i)")
    schema, job = tmp_path / "s.yaml", tmp_path / "j.yaml"
    done = cli("infer-schema", "--sql-url", f"duckdb://{db}", "--query", "SELECT * FROM t",
               "--key", "id", "-o", str(schema), "--job", str(job))
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(schema.read_text())["features"] == {
        "id": {"dtype": "int64", "shape": []},
        "x": {"dtype": "float64", "shape": [], "encoding": "raw"},
        "s": {"dtype": "bytes", "shape": []},
        "n": {"dtype": "int32", "shape": [], "default": -1},
        "xs": {"dtype": "int32", "shape": [-1], "required": False}}
    assert "  NULLs in the sample: n 10 of 30, xs 6 of 30" in done.stdout.splitlines()
    written = yaml.safe_load(job.read_text())
    assert written["source"]["url"] == f"duckdb://{db}"
    ran = cli("run", str(job), "--runner=FnApiRunner")
    assert ran.returncode == 0, ran.stderr[-3000:]
    got = records_by_id(tmp_path / written["output"])
    assert sorted(got) == list(range(30))
    assert [got[i]["n"] for i in range(6)] == [-1, 1, 2, -1, 4, 5]
    assert [got[i]["x"] for i in range(3)] == [0.0, 0.25, 0.5]
    assert [got[i]["xs"] for i in range(3)] == [[], [1, 1], [2, 2]]


def test_flags_go_with_sql_url(tmp_path):
    done = cli("infer-schema", "--query", "SELECT 1")
    assert (done.returncode, done.stderr.strip()) == (
        2, "error: --query, --password-env and --key go with --sql-url")
    done = cli("infer-schema", "--sql-url", f"duckdb://{tmp_path}/x.duckdb")
    assert (done.returncode, done.stderr.strip()) == (
        2, "error: --sql-url needs --query (an SQL SELECT whose rows are the records)")
    done = cli("infer-schema")
    assert (done.returncode, done.stderr.strip()) == (
        2, "error: give SOURCE files, or --sql-url URL --query Q for a database")
