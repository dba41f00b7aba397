"""`format: sql` against a real PostgreSQL server (tests/postgres_server.py starts it), and
DuckDB and SQLite files made here: exact values for every mapped type, NULLs, byte-identical
shards with and without `split_by` and after the table's physical order changes, one snapshot
while another connection writes, no password in anything a run writes or prints, one-line
errors, spans skipped and rebuilt from the rows' fingerprint."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etl.read.random_access import open_records
from tests.helpers import as_python, cli

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


def records_by_id(out: Path) -> dict[int, dict[str, Any]]:
    found = {}
    for split in ("train", "test"):
        records = open_records(str(out), split)
        for i in range(len(records)):
            r = {k: as_python(v) for k, v in records[i].items()}
            found[r["id"]] = r
    return found


@pytest.fixture(scope="module")
def kinds(postgres) -> str:
    with postgres.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS kinds")
        conn.execute(TYPES_TABLE)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO kinds VALUES (" + ", ".join(["%s"] * 18) + ")",
                            type_rows())
    return "SELECT * FROM kinds"


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
