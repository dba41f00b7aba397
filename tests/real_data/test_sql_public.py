"""`format: sql` on a public dataset (palmerpenguins' penguins.csv, 344 rows, NA in five
columns) loaded into PostgreSQL and into DuckDB: every written value equals pandas' reading of
the same file, the rows with a missing measurement are rejected and counted (read = written +
rejected), a missing `sex` is the schema's default, and both databases give the same records."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd
import pytest

from tests.helpers import cli, records_by_id

pytestmark = pytest.mark.slow  # a real server and CLI runs

penguins_pkg = pytest.importorskip("palmerpenguins")
PENGUINS = os.path.join(os.path.dirname(penguins_pkg.__file__), "data", "penguins.csv")
MEASURES = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
SCHEMA = """\
name: penguins
kind: example
features:
  id: {dtype: int64, shape: []}
  species: {dtype: bytes, shape: []}
  island: {dtype: bytes, shape: []}
  bill_length_mm: {dtype: float64, shape: [], encoding: raw}
  bill_depth_mm: {dtype: float64, shape: [], encoding: raw}
  flipper_length_mm: {dtype: float64, shape: [], encoding: raw}
  body_mass_g: {dtype: float64, shape: [], encoding: raw}
  sex: {dtype: bytes, shape: [], default: unknown}
  year: {dtype: int64, shape: []}
"""
COLUMNS = "species, island, " + ", ".join(MEASURES) + ", sex, year"


def convert(folder, url: str) -> tuple[dict, dict[str, str]]:
    folder.mkdir()
    (folder / "schema.yaml").write_text(SCHEMA)
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "schema.yaml", "output": "out", "shards": 2, "compression": "none",
        "split": {"train": 0.8, "test": 0.2}, "shuffle": {"seed": 3}, "max_bad_fraction": 0.05,
        "source": {"format": "sql", "url": url, "key": "id",
                   "query": f"SELECT id, {COLUMNS} FROM penguins"}}))
    done = cli("run", str(folder / "job.yaml"), "--runner=FnApiRunner")
    assert done.returncode == 0, done.stderr[-2000:]
    out = folder / "out"
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.glob("*.tfrecord")}
    return json.loads((out / "manifest.json").read_text()), digests


def check(out, manifest: dict) -> None:
    want = pd.read_csv(PENGUINS)  # "NA" is pandas' missing value, as it is the databases' NULL
    missing = want[MEASURES].isna().any(axis=1)
    assert manifest["inputs"][0]["read"] == len(want) == 344
    rejected = manifest["rejected"]
    assert (rejected["num_records"], rejected["by_reason"]) == (
        int(missing.sum()), {"missing_required": int(missing.sum())})
    got = records_by_id(out)
    assert sorted(got) == [i for i in range(len(want)) if not missing[i]]
    for i, r in got.items():
        row = want.iloc[i]
        assert (r["species"], r["island"], r["year"]) == (
            row["species"].encode(), row["island"].encode(), int(row["year"]))
        assert [r[m] for m in MEASURES] == [float(row[m]) for m in MEASURES]  # exact float64
        assert r["sex"] == (b"unknown" if pd.isna(row["sex"]) else row["sex"].encode())
    assert np.isnan(want.loc[missing, MEASURES].to_numpy()).any(axis=1).all()


def test_penguins_through_postgresql_and_duckdb(postgres, tmp_path):
    import duckdb  # noqa: PLC0415

    with postgres.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS penguins")
        conn.execute("CREATE TABLE penguins (id bigint GENERATED ALWAYS AS IDENTITY (MINVALUE 0 "
                     "START WITH 0), species text, island text, bill_length_mm float8, "
                     "bill_depth_mm float8, flipper_length_mm float8, body_mass_g float8, "
                     "sex text, year integer)")
        with conn.cursor().copy(f"COPY penguins ({COLUMNS}) FROM STDIN "
                                "(FORMAT csv, HEADER, NULL 'NA')") as copy, \
                open(PENGUINS, "rb") as fh:
            copy.write(fh.read())
    pg_manifest, pg_shards = convert(tmp_path / "pg", postgres.url())
    check(tmp_path / "pg" / "out", pg_manifest)

    db = tmp_path / "penguins.duckdb"
    con = duckdb.connect(str(db))
    con.execute(f"CREATE TABLE penguins AS SELECT (row_number() OVER () - 1)::BIGINT AS id, * "
                f"FROM read_csv('{PENGUINS}', nullstr = 'NA', header = true)")
    con.close()
    duck_manifest, duck_shards = convert(tmp_path / "duck", f"duckdb://{db}")
    check(tmp_path / "duck" / "out", duck_manifest)
    # the same records from both (the shards differ: a unit's identity names its database)
    assert records_by_id(tmp_path / "duck" / "out") == records_by_id(tmp_path / "pg" / "out")
    assert len(pg_shards) == len(duck_shards) == 4
