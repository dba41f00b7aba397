"""Every message that quotes user data is bounded (issue 20, A).

A 10 MB field that fails to convert used to be copied whole into the error line, the run
history (_runs.jsonl) and the rejected record's reason. Values now go through one helper,
`etl.base.errors.quote`: repr-like text of at most QUOTE_LIMIT (200) characters, and a longer value
cut there and followed by `… (N bytes)`. The history's `error` and a BadRecord's `reason` are
also cut to 1,000 characters whatever built them (a safety net: `etl.base.errors.bounded`). The
dead-letter record keeps its raw row excerpt (200 characters).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from etl.base.errors import QUOTE_LIMIT, BadRecord, bounded, quote
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.output.manifest import verify
from etl.schedule import history
from tests.helpers import IDS_SCHEMA, cli

BIG = 10_000_000
X198 = "x" * 198  # what fits of "xxx…" in 200 characters with its two quotes
CUT = f"'{X198}'… ({BIG} bytes)"


def test_quote() -> None:
    assert quote("abc") == "'abc'"
    assert quote(b"ab") == "b'ab'"
    assert quote(2**70) == "1180591620717411303424" and quote(None) == "None"
    assert quote("x" * BIG) == CUT
    assert quote("x" * 198) == f"'{X198}'"  # 200 characters: whole
    assert quote("x" * 199) == f"'{X198}'… (199 bytes)"
    assert quote("é" * 300) == "'" + "é" * 198 + "'… (600 bytes)"  # UTF-8 bytes
    assert quote(b"\x00" * 300) == "b'" + "\\x00" * 49 + "'… (300 bytes)"  # escapes fit too
    assert quote("9" * 300, plain=True) == "9" * 200 + "… (300 bytes)"
    assert quote(list(range(100)), 20) == "[0, 1, 2, 3, 4, 5, 6… (390 bytes)"
    assert quote("x" * 100, 10) == "'xxxxxxxx'… (100 bytes)"
    assert all(len(quote(v)) <= QUOTE_LIMIT + len(f"… ({BIG} bytes)")
               for v in ("\u2028" * BIG, b"\xff" * BIG, ["x" * BIG], "x" * BIG))


def example(**features: dict) -> Encoder:
    return Encoder(schema_from_dict({"name": "t", "kind": "example", "features": features}))


@pytest.mark.parametrize("feature,cell,reason", [
    ({"dtype": "int64", "shape": []}, "x" * BIG, f"cannot parse {CUT} as int64"),
    ({"dtype": "float32", "shape": []}, "9" * BIG, "value " + "9" * 200 + f"… ({BIG} bytes) "
     "overflows float32"),
    ({"dtype": "int64", "shape": [], "vocabulary": ["a", "b"]}, "x" * BIG,
     f"{CUT} not in vocabulary (expected one of 'a', 'b')"),
], ids=["unparsable_number", "out_of_range", "not_in_vocabulary"])
def test_encoder_reasons_quote_a_bounded_value(feature, cell, reason) -> None:
    out = example(v=feature).encode({"v": pa.array(["a" if "vocabulary" in feature else "1",
                                                    cell], pa.large_string())},
                                    source="d.csv", lines=np.array([2, 3]))
    assert [(b.line, b.feature, b.reason) for b in out.bad] == [(3, "v", reason)]


def test_a_list_where_a_value_is_due_is_quoted_bounded() -> None:
    out = example(v={"dtype": "int64", "shape": []}).encode(
        {"v": [1, ["x" * BIG]]}, source="d.jsonl", lines=np.array([1, 2]))
    assert [(b.code, b.reason) for b in out.bad] == [
        ("wrong_type", "expected a single value for shape [], found "
                       f"['{'x' * 58}… ({BIG + 4} bytes)")]


def test_a_bad_record_reason_is_bounded_whatever_built_it() -> None:
    bad = BadRecord("f.csv", "invalid_json", "r" * 5000, line=2)
    assert bad.reason == "r" * 970 + "… (5000 bytes)"
    assert BadRecord.from_json(bad.to_json()) == bad  # bounded once: read back unchanged
    assert bounded(bounded("r" * BIG, 1000), 1000) == "r" * 970 + f"… ({BIG} bytes)"
    assert BadRecord("f.csv", "invalid_json", "r" * 1000).reason == "r" * 1000


def project(folder: Path, max_bad: float) -> str:
    (folder / "s.yaml").write_text(IDS_SCHEMA)
    with open(folder / "d.csv", "w") as fh:  # the second row: 10 MB in the int64 column
        fh.write("id,a,b\n1,1.5,2\n" + "x" * BIG + ",3,4\n5,6.5,7\n")
    (folder / "job.yaml").write_text(json.dumps({
        "schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"]},
        "output": "out/day", "shards": 1, "max_bad_fraction": max_bad}))
    return str(folder / "job.yaml")


@pytest.mark.slow
def test_a_10mb_field_in_the_cli_error_and_the_history(tmp_path: Path) -> None:
    proc = cli("run", project(tmp_path, 0.0))
    assert proc.returncode == 3, proc.stderr[:2000]
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert len(line) < 1000, len(line)
    csv, logs = tmp_path / "d.csv", tmp_path / "out" / ".day.etl" / "logs"
    run = r"\d{8}T\d{6}-[0-9a-f]{6}-[0-9a-f]{12}"
    assert re.fullmatch(
        re.escape("error: 1 of 3 records rejected (33.33% > max_bad_fraction 0.00%): "
                  f"unparsable_number 1; nothing published. First: {csv}:3: feature 'id': "
                  f"cannot parse {CUT} as int64 [unparsable_number]; all of them: {logs}/")
        + run + re.escape(".rejected.jsonl (full log: ") + re.escape(f"{logs}/") + run
        + re.escape(".log)"), line), line
    [entry] = history.read(str(tmp_path / "out"))
    assert entry["status"] == "failed" and entry["exit_code"] == 3
    assert entry["error"] == line.removeprefix("error: ")
    assert os.path.getsize(tmp_path / "out" / history.RUNS_FILE) < 2000
    # the run's own dead-letter file beside its log: reason bounded too
    [dead] = [p for p in os.listdir(logs) if p.endswith(".rejected.jsonl")]
    [doc] = [json.loads(x) for x in (logs / dead).read_text().splitlines()]
    assert doc["reason"] == f"cannot parse {CUT} as int64"


@pytest.mark.slow
def test_a_10mb_field_allowed_through_is_published_with_a_bounded_reason(tmp_path: Path) -> None:
    proc = cli("run", project(tmp_path, 1.0))
    assert proc.returncode == 0, proc.stderr[:2000]
    out = tmp_path / "out" / "day"
    assert verify(str(out))["records"] == 2
    [doc] = [json.loads(x) for x in (out / "rejected" / "rejected.jsonl").read_text().splitlines()]
    assert doc == {"code": "unparsable_number", "count": 1, "feature": "id", "line": 3,
                   "raw": "id='" + "x" * 193 + "...",
                   "reason": f"cannot parse {CUT} as int64", "source": str(tmp_path / "d.csv")}
    assert os.path.getsize(out / "rejected" / "rejected.jsonl") < 1000
