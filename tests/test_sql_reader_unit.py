"""Unit tests of the `format: sql` reader's block path (etl/sources/sql_source.py), in process on
SQLite and DuckDB files (no server, no pipeline): the survey, the positions, the ranges
`split_by` cuts, and the refusals before any row is read. PostgreSQL and the whole runs are in
tests/test_sql_source.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etl.base.errors import ConfigError
from etl.contract.schema import schema_from_dict
from etl.sources import make_reader
from etl.sources.base import Block, Split

ROWS = [(7, 1.5, "a"), (3, -2.25, None), (11, 0.1, "ccc"), (0, 1e308, "")]


def sqlite_db(tmp_path: Path, rows: list[tuple[Any, ...]] = ROWS) -> Path:
    db = tmp_path / "events.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE events (id INTEGER, x REAL, s TEXT)")
        con.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
    con.close()
    return db


def duckdb_db(tmp_path: Path, n: int) -> Path:
    import duckdb  # noqa: PLC0415 - the sql extra

    db = tmp_path / "events.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE events AS SELECT (i * 7919) % 100003 AS id, i * 0.5 AS x, "
                "DATE '2020-01-01' + CAST(i AS INTEGER) AS day FROM range(?) t(i)", [n])
    con.close()
    return db


def reader(url: str, query: str, **options: Any) -> Any:
    return make_reader({"format": "sql", "url": url, "query": query, **options}, ".", "sources.db")


def blocks(r: Any, splits: list[Split] | None = None) -> list[Block]:
    return [b for s in (splits or [Split(r.unit)]) for b in r.read_split(s)]


def test_sqlite_rows_arrive_at_their_key_with_exact_values(tmp_path: Path) -> None:
    r = reader(f"sqlite://{sqlite_db(tmp_path)}", "SELECT id, x, s FROM events;", key="id",
               block_rows=2)
    survey = r.survey()
    assert (survey["rows"], survey["key"], survey["columns"]) == (4, "id", ["id", "x", "s"])
    got = blocks(r)
    assert [b.num_rows for b in got] == [2, 2]
    positions = np.concatenate([b.positions for b in got]).tolist()
    assert sorted(positions) == [0, 3, 7, 11]
    rows = {int(p): (b.columns["x"][i].as_py(), b.columns["s"][i].as_py())
            for b in got for i, p in enumerate(b.positions)}
    assert rows == {7: (1.5, "a"), 3: (-2.25, None), 11: (0.1, "ccc"), 0: (1e308, "")}


def test_without_a_key_positions_are_ranks_in_whole_row_order(tmp_path: Path) -> None:
    shuffled = [ROWS[i] for i in (2, 0, 3, 1)]
    a = blocks(reader(f"sqlite://{sqlite_db(tmp_path)}", "SELECT x, s FROM events"))
    other = tmp_path / "other"
    other.mkdir()
    b = blocks(reader(f"sqlite://{sqlite_db(other, shuffled)}", "SELECT x, s FROM events"))

    def by_position(got: list[Block]) -> list[tuple[int, Any]]:
        return sorted((int(p), blk.columns["x"][i].as_py())
                      for blk in got for i, p in enumerate(blk.positions))

    # the order rows were inserted in (the order a scan returns) does not move a record
    assert by_position(a) == by_position(b) == [(0, -2.25), (1, 0.1), (2, 1.5), (3, 1e308)]


def test_a_key_that_repeats_or_leaves_the_range_is_refused(tmp_path: Path) -> None:
    dup = tmp_path / "dup"
    dup.mkdir()
    url = f"sqlite://{sqlite_db(dup, [*ROWS, (7, 2.0, 'again')])}"
    with pytest.raises(ConfigError, match=r"key 'id' is not unique: 5 rows, 4 distinct values"):
        reader(url, "SELECT id, x, s FROM events", key="id").survey()
    neg = tmp_path / "neg"
    neg.mkdir()
    url = f"sqlite://{sqlite_db(neg, [*ROWS, (-1, 2.0, 'x')])}"
    with pytest.raises(ConfigError, match=r"ranges over \[-1, 11\]; a key must lie in "
                                          r"\[0, 2\*\*40\)"):
        reader(url, "SELECT id, x, s FROM events", key="id").survey()


def test_columns_are_checked_against_the_schema_before_reading(tmp_path: Path) -> None:
    r = reader(f"sqlite://{sqlite_db(tmp_path)}", "SELECT id, x, s FROM events", key="id")
    schema = schema_from_dict({"features": {"x": {"dtype": "float32"}}})
    with pytest.raises(ConfigError, match=r"the query returns column\(s\) \['s'\] that no "
                                          r"schema feature reads"):
        r.prepare(schema, 1 << 20)


def test_sqlite_refuses_split_by_and_a_query_that_is_not_text() -> None:
    with pytest.raises(ConfigError, match="split_by is for PostgreSQL and DuckDB"):
        reader("sqlite:///tmp/x.sqlite", "SELECT 1", split_by="id")
    with pytest.raises(ConfigError, match=r"'query' must be an SQL SELECT, got None"):
        make_reader({"format": "sql", "url": "sqlite:///tmp/x.sqlite"}, ".", "sources.db")
    with pytest.raises(ConfigError, match="takes 'url' and 'query', not 'paths'"):
        make_reader({"format": "sql", "url": "sqlite:///x", "query": "SELECT 1", "paths": "a"},
                    ".", "sources.db")


def test_duckdb_split_by_ranges_read_every_row_once(tmp_path: Path) -> None:
    url = f"duckdb://{duckdb_db(tmp_path, 5_000)}"
    query = "SELECT id, x, day FROM events"
    whole = reader(url, query, key="id")
    split = reader(url, query, key="id", split_by="day", split_rows=700)
    ranges = split.splits(split.unit, 1 << 20)
    assert len(ranges) == 8  # ceil(5000 / 700)
    got, want = blocks(split, ranges), blocks(whole)

    def rows(bs: list[Block]) -> dict[int, float]:
        return {int(p): b.columns["x"][i].as_py() for b in bs for i, p in enumerate(b.positions)}

    assert rows(got) == rows(want)
    assert len(rows(got)) == sum(b.num_rows for b in got) == 5_000
    assert sorted(rows(got)) == sorted((i * 7919) % 100003 for i in range(5_000))
