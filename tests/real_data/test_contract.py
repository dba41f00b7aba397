"""The data contract on public datasets (vega_datasets, palmerpenguins): dates, missing
values, Parquet date32/timestamp/decimal, `encoding: raw` on CSV text, thousands separators.
Each test converts with the real job runner, reads back through `open_records` (and
`make_dataset` once) and compares every value with pandas/pyarrow reading the same file."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import os
import textwrap

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import etl
from cli.run import run_job
from etl.base.errors import BadInputError
from etl.contract.dates import to_strings
from etl.job.config import load_job
from etl.output.manifest import load_manifest, verify
from tests.helpers import cli

pytestmark = pytest.mark.slow  # real data sets end to end: CLI runs and Beam pipelines

vega = pytest.importorskip("vega_datasets")
penguins_pkg = pytest.importorskip("palmerpenguins")
VEGA = os.path.join(os.path.dirname(vega.__file__), "_data")
PENGUINS = os.path.join(os.path.dirname(penguins_pkg.__file__), "data", "penguins.csv")
EPOCH = np.datetime64("1970-01-01", "D")


def _write(path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def _job(tmp_path, schema: str, source: str, name: str = "out", extra: str = "") -> str:
    _write(tmp_path / "schema.yaml", schema)
    return _write(tmp_path / "job.yaml", f"""\
        schema: schema.yaml
        source: {source}
        output: {name}
        shuffle: false
        {extra}
        """)


def _run(job: str) -> str:
    out = run_job(load_job(job), ["--runner=FnApiRunner"]).output
    verify(out)
    return out


def _column(out: str, name: str) -> np.ndarray:
    records = etl.open_records(out, split="train")
    return np.array([records[i][name] for i in range(len(records))])


def _days(values: pd.Series) -> list[int]:
    return ((values.values.astype("datetime64[D]") - EPOCH).astype(np.int64)).tolist()


# ---- cars.json: missing numbers and a date column, through the CLI ------------------------
def test_cars_json_missing_values_counted_and_year_dates(tmp_path) -> None:
    rows = json.load(open(os.path.join(VEGA, "cars.json")))
    (tmp_path / "cars.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = pd.DataFrame(rows)
    job = _job(tmp_path, """\
        name: cars
        features:
          name: {dtype: string, source: Name}
          mpg: {dtype: float32, source: Miles_per_Gallon, default: nan, allow_nan: true}
          horsepower: {dtype: int64, source: Horsepower, default: 0}
          cylinders: {dtype: int64, source: Cylinders}
          year: {dtype: date, source: Year}
          origin: {dtype: string, source: Origin}
        """, "{format: jsonl, paths: [cars.jsonl]}")
    proc = cli("run", job, "--runner=FnApiRunner", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  missing      horsepower: 6 value(s), 6 filled with default 0" in lines
    assert "  missing      mpg: 8 value(s), 8 filled with default 'nan'" in lines
    out = str(tmp_path / "out")
    manifest = load_manifest(out)
    assert manifest["missing_values"] == {
        "horsepower": {"missing": 6, "defaulted": 6, "default": 0},
        "mpg": {"missing": 8, "defaulted": 8, "default": "nan"},
    }
    assert manifest["rejected"]["num_records"] == 0
    assert int(df["Horsepower"].isna().sum()) == 6 and int(df["Miles_per_Gallon"].isna().sum()) == 8

    assert _column(out, "year").tolist() == _days(pd.to_datetime(df["Year"]))
    assert _column(out, "horsepower").tolist() == df["Horsepower"].fillna(0).astype(int).tolist()
    mpg = _column(out, "mpg")
    want = df["Miles_per_Gallon"].to_numpy(np.float64).astype(np.float32)
    assert np.array_equal(mpg, want, equal_nan=True)
    assert [n.decode() for n in _column(out, "name")] == df["Name"].tolist()
    schema = etl.load_schema(os.path.join(out, "schema.yaml"))
    assert to_strings(_column(out, "year"), schema.feature("year")).tolist() == [
        y[:10] for y in df["Year"]]


# ---- seattle-weather.csv: a date column in a format of its own, float64 raw from text ---------
def test_seattle_weather_csv_dates_and_raw_float64(tmp_path) -> None:
    path = os.path.join(VEGA, "seattle-weather.csv")
    with open(path, newline="") as fh:
        cells = list(csv.DictReader(fh))
    job = _job(tmp_path, """\
        name: weather
        features:
          date: {dtype: date, format: "%Y/%m/%d"}
          precipitation: {dtype: float64, encoding: raw}
          temp_max: {dtype: float32}
          weather: {dtype: string}
        """, f"{{format: csv, paths: [{path}]}}")
    out = _run(job)
    assert load_manifest(out)["missing_values"] == {}
    df = pd.read_csv(path)
    assert len(df) == len(cells) == 1461
    assert _column(out, "date").tolist() == _days(pd.to_datetime(df["date"], format="%Y/%m/%d"))
    # raw float64: exactly the float Python's float() gives for each cell's text
    precipitation = _column(out, "precipitation")
    assert precipitation.dtype == np.float64
    assert precipitation.tolist() == [float(c["precipitation"]) for c in cells]
    assert _column(out, "temp_max").tolist() == df["temp_max"].astype(np.float32).tolist()


def test_penguins_csv_raw_int32_is_the_number_not_its_text(tmp_path) -> None:
    job = _job(tmp_path, """\
        features:
          year: {dtype: int32, encoding: raw}
          species: {dtype: string}
        """, f"{{format: csv, paths: [{PENGUINS}]}}")
    out = _run(job)
    years = _column(out, "year")
    assert years.dtype == np.int32
    assert years.tolist() == pd.read_csv(PENGUINS)["year"].tolist()  # 2007..2009, not 825243191
    batch = next(iter(etl.make_dataset(out, split="train", batch_size=4, shuffle_buffer=0)))
    assert batch["year"].numpy().tolist() == years[:4].tolist()


# ---- Parquet: date32, timestamp[ms, tz=UTC], decimal128 ---------------------------------------
def _weather_parquet(tmp_path) -> tuple[str, pd.DataFrame]:
    df = pd.read_csv(os.path.join(VEGA, "seattle-weather.csv"))
    day = pd.to_datetime(df["date"], format="%Y/%m/%d")
    stamp = day + pd.to_timedelta(np.arange(len(df)) * 1250, unit="ms")  # some whole seconds
    table = pa.table({
        "date": pa.array(day.dt.date, pa.date32()),
        "seen": pa.array(stamp.dt.tz_localize("UTC"), pa.timestamp("ms", "UTC")),
        "precipitation": pa.array([decimal.Decimal(str(v)) for v in df["precipitation"]],
                                  pa.decimal128(6, 1)),
        "wind": pa.array([decimal.Decimal(str(v)) for v in df["wind"]], pa.decimal128(6, 1)),
    })
    path = str(tmp_path / "weather.parquet")
    pq.write_table(table, path, row_group_size=500)
    return path, table.to_pandas()


def test_parquet_date32_timestamp_decimal_map_exactly(tmp_path) -> None:
    path, df = _weather_parquet(tmp_path)
    job = _job(tmp_path, """\
        features:
          date: {dtype: date}
          seen: {dtype: timestamp, unit: ms}
          seen_us: {dtype: timestamp, source: seen}
          precipitation: {dtype: string}
        """, f"{{format: parquet, paths: [{path}]}}")
    out = _run(job)
    table = pq.read_table(path)
    assert _column(out, "date").tolist() == table["date"].cast(pa.int32()).to_pylist()
    ms = table["seen"].cast(pa.int64()).to_pylist()
    assert _column(out, "seen").tolist() == ms
    assert _column(out, "seen_us").tolist() == [v * 1000 for v in ms]
    assert [b.decode() for b in _column(out, "precipitation")] == [
        str(v) for v in table["precipitation"].to_pylist()]  # the exact decimal text


def test_parquet_timestamp_into_a_coarser_unit_rejects_what_it_would_truncate(tmp_path) -> None:
    path, _ = _weather_parquet(tmp_path)
    job = _job(tmp_path, """\
        features:
          seen: {dtype: timestamp, unit: s}
        """, f"{{format: parquet, paths: [{path}]}}", extra="max_bad_fraction: 1.0")
    out = _run(job)
    ms = np.array(pq.read_table(path)["seen"].cast(pa.int64()).to_pylist())
    whole = ms % 1000 == 0
    manifest = load_manifest(out)
    assert manifest["rejected"]["by_reason"] == {"unparsable_date": int((~whole).sum())}
    assert _column(out, "seen").tolist() == (ms[whole] // 1000).tolist()
    first = json.loads(open(os.path.join(out, "rejected", "rejected.jsonl")).readline())
    assert first["reason"] == ("'2012-01-02 00:00:01.250000+00:00' is more precise than unit s "
                               "(it would be truncated); declare unit: ms or finer "
                               "(timestamp[ms, tz=UTC] input)")


def test_parquet_decimal_into_numbers(tmp_path) -> None:
    """decimal128(6, 1) -> float32 only where float32 holds it exactly; wind speeds like 4.7
    have no exact binary value, so they are rejected (not rounded): declare bytes."""
    path, df = _weather_parquet(tmp_path)
    job = _job(tmp_path, """\
        features:
          wind: {dtype: float32}
        """, f"{{format: parquet, paths: [{path}]}}", extra="max_bad_fraction: 1.0")
    out = _run(job)
    winds = pq.read_table(path)["wind"].to_pylist()
    exact = [decimal.Decimal(float(np.float32(float(w)))) == w for w in winds]
    assert load_manifest(out)["rejected"]["by_reason"] == {"out_of_range": exact.count(False)}
    assert _column(out, "wind").tolist() == [float(w) for w, e in zip(winds, exact,
                                                                        strict=True) if e]


def test_parquet_date32_declared_int64_is_refused_in_one_line(tmp_path) -> None:
    path, _ = _weather_parquet(tmp_path)
    job = _job(tmp_path, """\
        features:
          date: {dtype: int64}
        """, f"{{format: parquet, paths: [{path}]}}")
    proc = cli("run", job, "--runner=FnApiRunner", cwd=str(tmp_path))
    assert proc.returncode == 2
    first = proc.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: {path}: column 'date' is date32[day], not a number for "
                            "dtype int64: declare dtype: date (stored as int64 days since "
                            "1970-01-01)")
    assert "Error" not in proc.stderr and "Traceback" not in proc.stderr


# ---- thousands separators --------------------------------------------------------------------
def test_thousands_separators_are_refused_with_a_hint(tmp_path) -> None:
    rows = json.load(open(os.path.join(VEGA, "cars.json")))
    with open(tmp_path / "cars.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "weight"])
        for r in rows:
            w.writerow([r["Name"], f"{r['Weight_in_lbs']:,}"])
    job = _job(tmp_path, """\
        features:
          weight: {dtype: int64}
        """, "{format: csv, paths: [cars.csv]}")
    with pytest.raises(BadInputError) as e:
        _run(job)
    assert f"{len(rows)} of {len(rows)} records rejected" in str(e.value)
    assert ("cars.csv:2: feature 'weight': cannot parse '3,504' as int64 (looks like a "
            "thousands separator: remove the commas in the source, or declare dtype: bytes to "
            "keep the text) [unparsable_number]") in str(e.value)


def test_date_written_as_iso_text_reads_back_through_make_dataset(tmp_path) -> None:
    """A timestamp column of JSON strings with offsets: stored in UTC microseconds."""
    stamps = ["2010-01-01T00:00:00Z", "2010-01-01 12:30:00+02:00", "2010-06-01T08:00:00.5-04:00"]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"t": s}) + "\n" for s in stamps))
    job = _job(tmp_path, """\
        features:
          t: {dtype: timestamp}
        """, "{format: jsonl, paths: [t.jsonl]}")
    out = _run(job)
    want = [int((pd.Timestamp(s).tz_convert("UTC") - pd.Timestamp(0, tz="UTC"))
                / pd.Timedelta(1, "us")) for s in stamps]
    assert _column(out, "t").tolist() == want
    assert want[1] == int(dt.datetime(2010, 1, 1, 10, 30, tzinfo=dt.timezone.utc).timestamp()
                          * 10**6)
