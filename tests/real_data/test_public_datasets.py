"""Public datasets from PyPI packages, converted as a new user would: `infer-schema`, `run`,
read back through `etl.open_records` and `etl.make_dataset`, and every value compared with an
independent reading of the same file (tests/real_data/harness.py). Nothing may be changed,
dropped or invented: a row is stored exactly or counted as rejected."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from tests.real_data import harness as h

pytestmark = pytest.mark.slow  # real data sets end to end: CLI runs and Beam pipelines

VEGA = ("vega_datasets", "_data")
SKLEARN = ("sklearn", "datasets", "data")
PENGUINS = ("palmerpenguins", "data")

# (id, package file, infer-schema flags)
DATASETS = [
    ("penguins", (*PENGUINS, "penguins.csv"), ()),
    ("penguins_raw", (*PENGUINS, "penguins-raw.csv"), ()),
    ("airports", (*VEGA, "airports.csv"), ()),
    ("seattle_weather", (*VEGA, "seattle-weather.csv"), ()),
    ("us_employment", (*VEGA, "us-employment.csv"), ()),
    ("stocks", (*VEGA, "stocks.csv"), ()),
    ("la_riots", (*VEGA, "la-riots.csv"), ()),
    ("cars", (*VEGA, "cars.json"), ()),  # a JSON array, with missing values
    ("iowa_electricity", (*VEGA, "iowa-electricity.csv"), ()),
    ("sf_temps", (*VEGA, "sf-temps.csv"), ()),  # date-times "2010/01/01 00:00:00"
    ("seattle_temps", (*VEGA, "seattle-temps.csv"), ()),  # date-times "2010/01/01 00:00"
    ("linnerud", (*SKLEARN, "linnerud_exercise.csv"), ()),  # space-separated
    ("diabetes_data", (*SKLEARN, "diabetes_data_raw.csv.gz"), ()),  # space-separated, headerless
    ("iris_sklearn", (*SKLEARN, "iris.csv"), ()),
    ("wine", (*SKLEARN, "wine_data.csv"), ()),
    ("breast_cancer", (*SKLEARN, "breast_cancer.csv"), ()),
    ("diabetes_target", (*SKLEARN, "diabetes_target.csv.gz"), ()),
]


@pytest.mark.parametrize("name,parts,flags", DATASETS, ids=[d[0] for d in DATASETS])
def test_infer_run_read_back_exactly(tmp_path: Path, name: str, parts: tuple[str, ...],
                                     flags: tuple[str, ...]) -> None:
    src = h.package_file(*parts)
    data = tmp_path / src.name
    shutil.copy(src, data)
    job, schema_path, out = h.infer(tmp_path, [data.name], *flags)
    r = h.run(job)
    assert r.returncode == 0, f"run exit {r.returncode}:\n{r.stdout}\n{r.stderr}"
    source = h.job_source(job)
    nulls = set(source.get("null_values", [""]))
    rows = h.source_rows(data, source)
    seen = h.check_exact(out, h.schema_of(schema_path), rows, nulls)
    assert seen["records"] + seen["rejected"] == len(rows)
    if name == "diabetes_target":  # headerless: its first row is a record, not a name
        assert len(rows) == 442 and seen["records"] == 442


def test_the_same_rows_as_parquet_read_back_exactly(tmp_path: Path) -> None:
    """penguins-raw.csv written to Parquet by pandas (its dates as date32), inferred and run
    from the Parquet file: every value as pyarrow reads it."""
    import pandas as pd  # noqa: PLC0415

    frame = pd.read_csv(h.package_file(*PENGUINS, "penguins-raw.csv"))
    frame["Date Egg"] = pd.to_datetime(frame["Date Egg"], format="%Y-%m-%d").dt.date
    data = tmp_path / "penguins_raw.parquet"
    frame.to_parquet(data, index=False)
    job, schema_path, out = h.infer(tmp_path, [data.name])
    r = h.run(job)
    assert r.returncode == 0, f"run exit {r.returncode}:\n{r.stdout}\n{r.stderr}"
    rows = h.source_rows(data, h.job_source(job))
    seen = h.check_exact(out, h.schema_of(schema_path), rows, set())
    assert seen["records"] + seen["rejected"] == len(rows) == 344


def test_gzip_copy_reads_like_the_plain_file(tmp_path: Path) -> None:
    """The same CSV gzip-compressed: the same records (the reader's gzip path)."""
    src = h.package_file(*VEGA, "seattle-weather.csv")
    data = tmp_path / "seattle-weather.csv.gz"
    data.write_bytes(gzip.compress(src.read_bytes(), mtime=0))
    job, schema_path, out = h.infer(tmp_path, [data.name])
    r = h.run(job)
    assert r.returncode == 0, r.stderr
    rows = h.source_rows(data, h.job_source(job))
    seen = h.check_exact(out, h.schema_of(schema_path), rows, set(h.job_source(job).get(
        "null_values", [""])))
    assert seen["records"] == len(rows) == 1461


def test_without_the_proposed_defaults_missing_values_are_rejected_and_counted(
        tmp_path: Path) -> None:
    """cars.json with infer-schema's defaults removed: every car missing MPG or horsepower is
    rejected as missing_required and counted, never stored as 0; the rest exactly."""
    import re  # noqa: PLC0415

    data = tmp_path / "cars.json"
    shutil.copy(h.package_file(*VEGA, "cars.json"), data)
    job, schema_path, out = h.infer(tmp_path, [data.name])
    text = schema_path.read_text()
    schema_path.write_text(re.sub(r"\n +(default: .*|allow_nan: true)(?=\n)", "", text))
    schema = h.schema_of(schema_path)
    assert all(f.required and f.default is None for f in schema.features)
    r = h.run(job)  # the default bad-record limit is 0: the run fails, nothing published
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("error: 14 of 406 records rejected (3.45% > max_bad_fraction "
                               "0.00%): missing_required 14; nothing published."), r.stderr
    job.write_text(job.read_text() + "max_bad_fraction: 0.05\n")
    r = h.run(job)
    assert r.returncode == 0, f"run exit {r.returncode}:\n{r.stdout}\n{r.stderr}"
    rows = h.source_rows(data, h.job_source(job))
    seen = h.check_exact(out, schema, rows, set())
    lacking = sum(1 for row in rows if row["Miles_per_Gallon"] is None
                  or row["Horsepower"] is None)
    assert (seen["records"], seen["rejected"], seen["filled"]) == (406 - lacking, lacking, 0)
    assert lacking == 14
    assert h.manifest(out)["rejected"]["by_reason"] == {"missing_required": 14}
    assert "  missing      miles_per_gallon: 8 value(s), no default: records rejected " \
           "(missing_required)" in r.stdout.splitlines()
