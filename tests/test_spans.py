"""Date spans in job files (etl.job.spans, etl.job.config): placeholders filled in source paths,
output and shuffle seed; `{span}` counted as TFX counts it; yesterday in UTC by default; a
typo'd placeholder, a bad date or a day without inputs fails with exit 2 naming it (or is
skipped with --allow-missing), and nothing is published."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from typing import Any

import pytest

from etl.base.errors import ConfigError
from etl.job.config import job_from_dict, load_job
from etl.job.spans import Span, default_span, fill, parse_date, span_range
from tests.helpers import IDS_SCHEMA, cli

D = parse_date("2026-11-21")


def tfx_span_number(year: int, month: int, day: int) -> int:
    """TFX's own formula (tfx/components/example_gen/utils.py, date_to_span_number)."""
    return (dt.datetime(year, month, day) - dt.datetime(1970, 1, 1)).days


def write_job(folder: str, doc: dict[str, Any], name: str = "job.yaml") -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "schema.yaml"), "w") as fh:
        fh.write(IDS_SCHEMA)
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        json.dump({"schema": "schema.yaml", **doc}, fh)  # JSON is YAML
    return path


def write_day(folder: str, day: str, rows: int = 20) -> None:
    os.makedirs(os.path.join(folder, "raw", day), exist_ok=True)
    with open(os.path.join(folder, "raw", day, "part.csv"), "w") as fh:
        fh.write("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n" for i in range(rows)))


def test_span_fields_and_tfx_day_count() -> None:
    assert D.name == "2026-11-21" and D.date == dt.date(2026, 11, 21) and str(D) == "2026-11-21"
    assert D.fields() == {"date": "2026-11-21", "YYYY": "2026", "MM": "11", "DD": "21",
                          "span": 20778}
    for y, m, d in [(1970, 1, 1), (2000, 2, 29), (2020, 1, 1), (2026, 11, 21), (2038, 1, 19)]:
        assert parse_date(f"{y:04d}-{m:02d}-{d:02d}").fields()["span"] == tfx_span_number(y, m, d)
    assert parse_date("1970-01-01").number == 0 and parse_date("1970-01-02").number == 1
    assert parse_date("2026-03-05").fields()["MM"] == "03"  # zero padded
    with pytest.raises(dataclasses.FrozenInstanceError):
        D.date = dt.date(2000, 1, 1)  # type: ignore[misc]


@pytest.mark.parametrize("text", ["2026-13-01", "2026-02-30", "21.11.2026", "2026-11-1",
                                  "yesterday", ""])
def test_parse_date_refuses_other_text(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--date: .* is not a date; use YYYY-MM-DD"):
        parse_date(text, "--date")


def test_default_span_is_yesterday_in_utc() -> None:
    utc = dt.timezone.utc
    assert default_span(dt.datetime(2026, 11, 22, 0, 30, tzinfo=utc)).name == "2026-11-21"
    assert default_span(dt.datetime(2026, 1, 1, 12, 0, tzinfo=utc)).name == "2025-12-31"
    assert default_span(dt.datetime(2024, 3, 1, 12, 0, tzinfo=utc)).name == "2024-02-29"
    # 22:30 on Nov 22 in New York is already Nov 23 in UTC: yesterday is Nov 22 there
    new_york = dt.timezone(dt.timedelta(hours=-5))
    assert default_span(dt.datetime(2026, 11, 22, 22, 30, tzinfo=new_york)).name == "2026-11-22"
    # ... and 00:30 on Nov 22 in Tokyo is still Nov 21 in UTC
    tokyo = dt.timezone(dt.timedelta(hours=9))
    assert default_span(dt.datetime(2026, 11, 22, 0, 30, tzinfo=tokyo)).name == "2026-11-20"
    with pytest.raises(ValueError, match="aware"):
        default_span(dt.datetime(2026, 11, 22))
    before = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)
    got = default_span().date
    after = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)
    assert got in (before, after)


def test_span_range_is_inclusive_oldest_first() -> None:
    days = span_range(parse_date("2026-02-27"), parse_date("2026-03-02"))
    assert [s.name for s in days] == ["2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"]
    assert [s.name for s in span_range(D, D)] == ["2026-11-21"]
    with pytest.raises(ConfigError, match="--from 2026-11-21 is after --to 2026-11-20"):
        span_range(D, parse_date("2026-11-20"))


def test_fill_and_unknown_placeholder() -> None:
    assert fill("raw/{YYYY}/{MM}/{DD}/x-{date}-{span}.csv", D) == \
        "raw/2026/11/21/x-2026-11-21-20778.csv"
    assert fill("raw/{a,b}/*.csv", D) == "raw/{a,b}/*.csv"  # not a placeholder: left alone
    with pytest.raises(ConfigError, match=r"job\.yaml: output: unknown placeholder \{YYY\} in "
                                          r"'out/\{YYY\}'; known: \{date\}, \{YYYY\}"):
        fill("out/{YYY}", D, "job.yaml: output")
    with pytest.raises(ConfigError, match=r"unknown placeholder \{\}"):
        fill("out/{}", D)


def test_load_job_fills_paths_output_and_seed(tmp_path: Any) -> None:
    doc = {"sources": {"train": {"format": "csv", "paths": ["raw/{date}/*.csv"]},
                       "test": {"format": "idx", "paths": {"image": "idx/{YYYY}{MM}{DD}-img",
                                                           "label": ["idx/{span}-lbl"]}}},
           "output": "out/{YYYY}/{MM}/{DD}", "shuffle": {"seed": "{span}"}}
    path = write_job(str(tmp_path), doc)
    job = load_job(path, span=D)
    base = str(tmp_path)
    assert job.span == "2026-11-21"
    assert job.sources["train"]["paths"] == ["raw/2026-11-21/*.csv"]
    assert job.sources["test"]["paths"] == {"image": "idx/20261121-img", "label": ["idx/20778-lbl"]}
    assert job.output == os.path.join(base, "out", "2026", "11", "21")
    assert job.seed == 20778
    assert job.raw == {"schema": "schema.yaml", **doc}  # as written, for the job's hash
    # another day: other paths, output and seed from the same file
    other = load_job(path, span=parse_date("2026-11-22"))
    assert (other.sources["train"]["paths"], other.seed) == (["raw/2026-11-22/*.csv"], 20779)
    # digits of the date as a seed; a placeholder that is no number is refused
    seeded = job_from_dict({**doc, "schema": "s.yaml", "shuffle": {"seed": "{YYYY}{MM}{DD}"}},
                           "j.yaml", base, span=D)
    assert seeded.seed == 20261121
    with pytest.raises(ConfigError, match=r"j\.yaml: shuffle\.seed '\{date\}' is "
                                          r"'2026-11-21' for 2026-11-21, not an integer"):
        job_from_dict({**doc, "schema": "s.yaml", "shuffle": {"seed": "{date}"}}, "j.yaml",
                      base, span=D)
    # --output on the command line is filled too (relative to the working directory)
    given = load_job(path, output="elsewhere/{date}", span=D)
    assert given.output == os.path.join(os.getcwd(), "elsewhere", "2026-11-21")


def test_templating_decides_whether_a_span_is_wanted(tmp_path: Any) -> None:
    fixed = write_job(str(tmp_path), {"source": {"format": "csv", "paths": ["ids.csv"]},
                                      "output": "out"}, "fixed.yaml")
    job = load_job(fixed)
    assert job.span is None and job.output == os.path.join(str(tmp_path), "out")
    with pytest.raises(ConfigError, match=r"fixed\.yaml: the job has no date placeholders, so "
                                          r"--date/--from would run the same inputs"):
        load_job(fixed, span=D)
    # a templated --output makes it a dated job
    assert load_job(fixed, output=str(tmp_path / "o" / "{date}"), span=D).span == "2026-11-21"
    dated = write_job(str(tmp_path), {"source": {"format": "csv", "paths": ["raw/{date}/*.csv"]},
                                      "output": "out/{date}"}, "dated.yaml")
    yesterday = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).date().isoformat()
    job = load_job(dated)  # no span given: yesterday (UTC)
    assert job.span == yesterday and job.output.endswith(os.path.join("out", yesterday))
    with pytest.raises(ConfigError, match=r"unknown placeholder \{YYY\}"):
        load_job(write_job(str(tmp_path), {"source": {"format": "csv", "paths": ["x.csv"]},
                                           "output": "out/{YYY}/{MM}"}, "typo.yaml"), span=D)


def test_unquoted_placeholder_in_a_flow_list_gets_a_hint(tmp_path: Any) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("schema: s.yaml\nsource: {format: csv, paths: [raw/{date}/x.csv]}\n"
                    "output: out/{date}\n")
    with pytest.raises(ConfigError, match=r"(?s)not valid YAML: .*must be quoted, e\.g\. paths: "
                                          r"\[\"raw/\{date\}/\*\.csv\"\]"):
        load_job(str(path), span=D)
    # block style needs no quotes
    path.write_text("schema: s.yaml\nsource:\n  format: csv\n  paths:\n    - raw/{date}/x.csv\n"
                    "output: out/{date}\n")
    assert load_job(str(path), span=D).sources["*"]["paths"] == ["raw/2026-11-21/x.csv"]


# --- through the command line (subprocesses) ---

@pytest.mark.slow
def test_cli_errors_name_the_problem_exit_2(tmp_path: Any) -> None:
    base = str(tmp_path)
    typo = write_job(base, {"source": {"format": "csv", "paths": ["raw/{date}/*.csv"]},
                            "output": "out/{YYY}"}, "typo.yaml")
    r = cli("run", typo, "--date", "2026-11-21")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {typo}: output: unknown placeholder {{YYY}} in 'out/{{YYY}}'; known: {{date}}, "
        "{YYYY}, {MM}, {DD}, {span}"]
    fixed = write_job(base, {"source": {"format": "csv", "paths": ["ids.csv"]}, "output": "o"},
                      "fixed.yaml")
    for args, message in [
        (["--date", "2026-11-21"], "the job has no date placeholders"),
        (["--from", "2026-11-20", "--to", "2026-11-21"], "the job has no date placeholders"),
    ]:
        r = cli("run", fixed, *args)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    dated = write_job(base, {"source": {"format": "csv", "paths": ["raw/{date}/*.csv"]},
                             "output": "out/{date}"}, "dated.yaml")
    for args, message in [
        (["--date", "2026-11-31"], "error: --date: '2026-11-31' is not a date; use YYYY-MM-DD"),
        (["--from", "2026-11-20"], "error: --from and --to go together"),
        (["--date", "2026-11-20", "--from", "2026-11-20", "--to", "2026-11-21"],
         "error: give --date D or --from D1 --to D2, not both"),
        (["--from", "2026-11-21", "--to", "2026-11-20"],
         "error: --from 2026-11-21 is after --to 2026-11-20"),
        (["--from", "2026-11-20", "--to", "2026-11-21", "--parallel", "0"],
         "error: --parallel must be at least 1, got 0"),
    ]:
        r = cli("run", dated, *args)
        assert r.returncode == 2 and r.stderr.startswith(message), (args, r.stderr)
    assert not os.path.exists(os.path.join(base, "out"))


@pytest.mark.slow
def test_missing_span_fails_naming_it_or_is_skipped(tmp_path: Any) -> None:
    base = str(tmp_path)
    write_day(base, "2026-11-20")
    job = write_job(base, {"source": {"format": "csv", "paths": ["raw/{date}/*.csv"]},
                           "output": "out/{date}", "shards": 1})
    pattern = os.path.join(base, "raw", "2026-11-21", "*.csv")
    r = cli("run", job, "--date", "2026-11-21")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: no input files for span 2026-11-21: source.paths {pattern} matches no file; "
        "nothing was published (pass --allow-missing to skip such spans)"]
    # nothing but the run history beside the outputs: no output, no work directory
    assert os.listdir(os.path.join(base, "out")) == ["_runs.jsonl"]
    r = cli("run", job, "--date", "2026-11-21", "--allow-missing")
    assert r.returncode == 0, r.stderr
    out = os.path.join(base, "out", "2026-11-21")
    assert r.stdout.strip().splitlines() == [
        f"Skipped 2026-11-21 ({out}): no input files for span 2026-11-21"]
    assert not os.path.exists(out)  # never an empty dataset
    # the day that has data converts, with its own output and manifest
    r = cli("run", job, "--date", "2026-11-20")
    assert r.returncode == 0, r.stderr
    out20 = os.path.join(base, "out", "2026-11-20")
    assert r.stdout.startswith(f"Wrote {out20} (span 2026-11-20) in ")
    with open(os.path.join(out20, "manifest.json")) as fh:
        manifest = json.load(fh)
    assert manifest["splits"]["train"]["num_records"] == 20
    assert os.path.exists(os.path.join(out20, "_SUCCESS"))


@pytest.mark.slow
def test_help_lists_the_exit_codes() -> None:
    r = cli("run", "--help")
    assert r.returncode == 0
    text = r.stdout
    for line in ["0  success, or skipped because the published output is current",
                 "1  other failure", "2  bad job, schema or arguments",
                 "3  bad input: more rejected records than max_bad_fraction allows",
                 "4  another run holds the span's output", "5  storage error",
                 "6  blocked by a quality check",
                 "mildest first: 0 < 4 < 5 < 6 < 3 < 2 < 1"]:
        assert line in text, line
    for option in ["--date", "--from", "--to", "--reverse", "--dry-run", "--only", "--parallel",
                   "--allow-missing", "--force"]:
        assert option in text
    top = cli("--help")
    assert "history OUT_ROOT" in top.stdout and "2  bad job, schema or arguments" in top.stdout


def test_span_is_ordered_and_frozen() -> None:
    a, b = parse_date("2026-11-20"), parse_date("2026-11-21")
    assert a < b and sorted([b, a]) == [a, b] and Span(dt.date(2026, 11, 21)) == b
