"""Text sources on public data shipped in PyPI packages (vega_datasets, palmerpenguins,
scikit-learn): each case runs `run_pipeline.py run` as a user does and reads the output back
with `etl.open_records`, comparing every value with what pandas/NumPy read from the same file;
the refusals assert the exit code and the one-line message the user sees."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import etl
from tests.helpers import cli

pytestmark = pytest.mark.slow  # real data sets end to end: CLI runs and Beam pipelines

vega = pytest.importorskip("vega_datasets")
penguins_pkg = pytest.importorskip("palmerpenguins")
sklearn = pytest.importorskip("sklearn")

VEGA = Path(vega.__file__).parent / "_data"
PENGUINS = Path(penguins_pkg.__file__).parent / "data" / "penguins.csv"
DIABETES = Path(sklearn.__file__).parent / "datasets" / "data" / "diabetes_target.csv.gz"


def run_job(tmp_path: Path, features: dict[str, Any], source: dict[str, Any],
            **job: Any) -> tuple[int, str, Path]:
    """Writes schema + job, runs it: (exit code, the last stderr line, output dir)."""
    (tmp_path / "s.yaml").write_text(json.dumps(
        {"name": "t", "kind": "example", "features": features}))
    out = tmp_path / "out" / "t"
    (tmp_path / "job.yaml").write_text(json.dumps(
        {"schema": "s.yaml", "source": source, "output": str(out), **job}))
    proc = cli("run", str(tmp_path / "job.yaml"), "--runner=FnApiRunner")
    lines = proc.stderr.strip().splitlines()
    return proc.returncode, (lines[-1] if lines else ""), out


def records(out: Path) -> dict[str, list[Any]]:
    """Every record of the output's train split, feature -> values (shuffled order)."""
    recs = etl.open_records(str(out))
    batch = recs[np.arange(len(recs))]
    return {k: [v.decode() if isinstance(v, bytes) else v for v in np.asarray(a).tolist()]
            for k, a in batch.items()}


def refused(code: int, last: str, out: Path, *said: str) -> None:
    """Exit 2, one `error:` line holding `said`, nothing published."""
    assert code == 2, last
    assert last.startswith("error: ") and all(s in last for s in said), last
    assert not out.exists() or not any(out.glob("*.tfrecord*"))


# ---- JSON Lines: strings never rewritten ------------------------------------------------------
DATES = ["1970-01-01", "2010-01-01T00:00:00Z", "2010-01-01 12:30:00+02:00", "2010-01-01T00:00"]


def test_jsonl_70k_date_like_strings_come_back_byte_identical(tmp_path: Path) -> None:
    want = {i: DATES[i % 4] if i % 5 else f"{1970 + i % 60}-0{1 + i % 9}-1{i % 10}"
            for i in range(70_000)}  # two 64k-line blocks, dates in both
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"i": i, "d": d}) + "\n"
                                              for i, d in want.items()))
    code, last, out = run_job(tmp_path, {"i": {"dtype": "int64", "shape": []},
                                         "d": {"dtype": "string", "shape": []}},
                              {"format": "jsonl", "paths": ["d.jsonl"]})
    assert code == 0, last
    got = records(out)
    assert dict(zip(got["i"], got["d"], strict=True)) == want


def test_seattle_weather_as_jsonl_keeps_dates_and_numbers(tmp_path: Path) -> None:
    """seattle-weather's dates ("2012/01/01") written the ISO way ("2012-01-01"), as most
    JSON exports hold them: Arrow's JSON reader would take those for timestamps."""
    frame = pd.read_csv(VEGA / "seattle-weather.csv", dtype={"date": str, "weather": str})
    frame["date"] = frame["date"].str.replace("/", "-")
    assert frame["date"].iloc[0] == "2012-01-01"
    with open(tmp_path / "w.jsonl", "w") as fh:
        for row in frame.to_dict("records"):
            fh.write(json.dumps(row) + "\n")
    code, last, out = run_job(tmp_path, {
        "date": {"dtype": "string", "shape": []},
        "weather": {"dtype": "string", "shape": []},
        "precipitation": {"dtype": "float32", "shape": []},
    }, {"format": "jsonl", "paths": ["w.jsonl"]})
    assert code == 0, last
    got = records(out)
    assert len(got["date"]) == len(frame) == 1461
    by_date = {d: (w, p) for d, w, p in zip(got["date"], got["weather"], got["precipitation"],
                                             strict=True)}
    assert by_date == {d: (w, float(np.float32(p))) for d, w, p in
                       zip(frame["date"], frame["weather"], frame["precipitation"], strict=True)}


def test_cars_json_array_is_read_element_by_element(tmp_path: Path) -> None:
    """vega's cars.json is one pretty-printed JSON array (406 objects, nulls among the
    numbers): every element is a record, its strings (the "1970-01-01" years) exact."""
    cars = json.loads((VEGA / "cars.json").read_text())
    complete = [c for c in cars if c["Horsepower"] is not None]
    assert (len(cars), len(complete)) == (406, 400)
    code, last, out = run_job(tmp_path, {
        "Name": {"dtype": "string", "shape": []},
        "Year": {"dtype": "string", "shape": []},
        "Horsepower": {"dtype": "int64", "shape": []},
        "Acceleration": {"dtype": "float32", "shape": []},
    }, {"format": "jsonl", "paths": [str(VEGA / "cars.json")]}, max_bad_fraction=0.05)
    assert code == 0, last
    got = records(out)
    assert sorted(zip(got["Name"], got["Year"], got["Horsepower"], got["Acceleration"],
                      strict=True)) == sorted(
        (c["Name"], c["Year"], c["Horsepower"], float(np.float32(c["Acceleration"])))
        for c in complete)


# ---- CSV: header: false, encodings, null markers ----------------------------------------------
def test_headerless_diabetes_target_keeps_all_442_rows(tmp_path: Path) -> None:
    code, last, out = run_job(tmp_path, {"target": {"dtype": "float32", "shape": [],
                                                    "source": "column_0"}},
                              {"format": "csv", "paths": [str(DIABETES)], "header": False})
    assert code == 0, last
    want = np.loadtxt(gzip.open(DIABETES), dtype=np.float64).astype(np.float32)
    assert len(want) == 442
    assert sorted(records(out)["target"]) == sorted(want.tolist())


PENGUIN_FEATURES = {
    "species": {"dtype": "string", "shape": []},
    "island": {"dtype": "string", "shape": []},
    "bill_length_mm": {"dtype": "float32", "shape": []},
    "sex": {"dtype": "string", "shape": []},
}


def penguins(**read: Any) -> pd.DataFrame:
    return pd.read_csv(PENGUINS, keep_default_na=False, na_values=["NA"], **read)


def same_penguins(got: dict[str, list[Any]], frame: pd.DataFrame) -> None:
    """Every complete row of `frame` exactly once, and nothing else."""
    frame = frame.dropna(subset=["bill_length_mm", "sex"])
    want = sorted(zip(frame["species"], frame["island"],
                      frame["bill_length_mm"].astype(np.float32).tolist(), frame["sex"],
                      strict=True))
    assert sorted(zip(got["species"], got["island"], got["bill_length_mm"], got["sex"],
                      strict=True)) == want


def test_penguins_na_markers_are_missing_and_counted(tmp_path: Path) -> None:
    frame = penguins()
    complete = int(frame[["bill_length_mm", "sex"]].notna().all(axis=1).sum())
    assert (len(frame), complete) == (344, 333)
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": [str(PENGUINS)],
                               "null_values": ["", "NA"]}, max_bad_fraction=0.05)
    assert code == 0, last
    same_penguins(records(out), frame)
    # without the marker, "NA" is a sex label and an unparsable number: nothing is invented
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": [str(PENGUINS)]}, max_bad_fraction=0.05)
    assert code == 0, last
    got = records(out)
    assert len(got["sex"]) == 342 and got["sex"].count("NA") == 9


@pytest.mark.parametrize("codec", ["latin-1", "cp1252"])
def test_penguins_in_an_8bit_encoding(tmp_path: Path, codec: str) -> None:
    text = PENGUINS.read_text().replace("Adelie", "Adélie")  # the French spelling, é = 0xE9
    (tmp_path / "p.csv").write_bytes(text.encode(codec))
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": ["p.csv"], "encoding": codec,
                               "null_values": ["NA"]}, max_bad_fraction=0.05)
    assert code == 0, last
    got = records(out)
    same_penguins(got, pd.read_csv(tmp_path / "p.csv", encoding=codec, keep_default_na=False,
                                   na_values=["NA"]))
    assert got["species"].count("Adélie") == 146
    # read as UTF-8 (the default), the Adélie rows are refused as not UTF-8, not mangled
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": ["p.csv"], "null_values": ["NA"]},
                              max_bad_fraction=0.6)
    assert code == 0, last
    assert "Adélie" not in records(out)["species"] and len(records(out)["species"]) == 333 - 146


def test_penguins_with_a_utf8_bom(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_bytes(b"\xef\xbb\xbf" + PENGUINS.read_bytes())
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": ["p.csv"], "null_values": ["NA"]},
                              max_bad_fraction=0.05)
    assert code == 0, last
    same_penguins(records(out), penguins())


# ---- CSV headers that cannot name features ----------------------------------------------------
def test_semicolon_penguins_refused_then_read_with_the_delimiter(tmp_path: Path) -> None:
    rows = list(csv.reader(open(PENGUINS)))
    with open(tmp_path / "p.csv", "w", newline="") as fh:
        csv.writer(fh, delimiter=";").writerows(rows)
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES, {"format": "csv", "paths": ["p.csv"]})
    refused(code, last, out, f"{tmp_path / 'p.csv'}: the header is one column",
            "it looks like ';'-separated: set delimiter: ';'")
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": ["p.csv"], "delimiter": ";",
                               "null_values": ["NA"]}, max_bad_fraction=0.05)
    assert code == 0, last
    same_penguins(records(out), penguins())


def test_duplicate_header_names_refused_then_renamed(tmp_path: Path) -> None:
    lines = PENGUINS.read_text().splitlines(keepends=True)
    (tmp_path / "p.csv").write_text(lines[0].replace("island", "species") + "".join(lines[1:]))
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES, {"format": "csv", "paths": ["p.csv"]})
    refused(code, last, out, "duplicate column names 'species' (columns 1, 2): rename them with "
                             "'columns:'")
    names = lines[0].strip().split(",")
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": ["p.csv"], "columns": names,
                               "null_values": ["NA"]}, max_bad_fraction=0.05)
    assert code == 0, last
    same_penguins(records(out), penguins())


def test_trailing_delimiter_refused_then_named(tmp_path: Path) -> None:
    lines = PENGUINS.read_text().splitlines()
    (tmp_path / "p.csv").write_text("".join(line + ",\n" for line in lines))
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES, {"format": "csv", "paths": ["p.csv"]})
    refused(code, last, out, "the header ends with the delimiter, so column 9 has no name",
            "the last one e.g. '_trailing'")
    names = [*lines[0].split(","), "_trailing"]
    code, last, out = run_job(tmp_path, PENGUIN_FEATURES,
                              {"format": "csv", "paths": ["p.csv"], "columns": names,
                               "null_values": ["NA"]}, max_bad_fraction=0.05)
    assert code == 0, last
    same_penguins(records(out), penguins())



def test_jsonl_timestamps_with_offsets_in_a_named_zone(tmp_path: Path) -> None:
    """pyarrow.json infers timestamps from these strings (and drops their offsets); the
    reader hands them over as text, so the feature's rule decides: an offset is converted,
    naive text is read in the feature's zone (Europe/Paris, UTC+2 in June). All three are
    the same instant, 2020-06-01T10:00:00Z; the string feature keeps its text."""
    lines = [{"t": "2020-06-01T12:00:00+02:00", "s": "2020-06-01T12:00:00+02:00"},
             {"t": "2020-06-01 12:00:00", "s": "1970-01-01"},
             {"t": "2020-06-01T10:00:00Z", "s": "x"}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, last, out = run_job(
        tmp_path, {"t": {"dtype": "timestamp", "unit": "s", "timezone": "Europe/Paris",
                         "shape": []},
                   "s": {"dtype": "string", "shape": []}},
        {"format": "jsonl", "paths": ["d.jsonl"]}, shuffle=False)
    assert code == 0, last
    got = records(out)
    assert got["t"] == [1591005600] * 3
    assert sorted(got["s"]) == sorted(x["s"] for x in lines)
