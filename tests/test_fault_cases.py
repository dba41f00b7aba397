"""Issue 9's bad-input cases end to end, through the CLI a user runs: exact counts
(read = written + rejected), one reason code each, the 1-based line (or record index) of the
bad record, and no traceback. The same cases make the before/after table of
`python -m benchmarks.fault_cases` (output safety, locking and disk-full cases are asserted
in test_output_safety.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fault_cases import CASES, Runner
from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)


def _ok(read: int, written: int, code: str, where: int, files: list[str]) -> dict[str, Any]:
    return {"exit": 0, "stderr_lines": 0, "traceback": False, "first": "", "read": read,
            "counts": f"written {written}, rejected {read - written}", "by_reason": {code: 1},
            "where": [where], "files": files}


EXPECTED: dict[str, dict[str, Any]] = {
    # the quote opens on line 102 (record 100): only that row is lost, parsing resumes at 103
    "csv_quote": _ok(1000, 999, "unterminated_quote", 102, ["in.csv"]),
    "csv_int64_overflow": _ok(1000, 999, "out_of_range", 102, ["in.csv"]),
    # one 300 MB field on line 1002: skipped while streaming, the 1,000 rows before it written
    "csv_huge_field": _ok(1001, 1000, "oversized_record", 1002, ["in.csv"]),
    # images: record index 13 of the root (b/3.png), named by its own file
    "png_wrong_shape": _ok(20, 19, "wrong_shape", 13, ["3.png"]),
    "jsonl_scalar_for_list": _ok(1000, 999, "wrong_type", 101, ["s.jsonl"]),
    # a flipped byte in record 501's frame: that record only; the 498 after it are read
    "tfrecord_flipped_byte": _ok(1000, 999, "corrupt_record", 501, ["in.tfrecord"]),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_bad_input_case(name: str, tmp_path: Path) -> None:
    got = CASES[name](Runner(Path(ROOT), sys.executable), tmp_path)
    assert got == EXPECTED[name]


def test_records_of_the_wrong_kind_fail_the_run_with_one_line(tmp_path: Path) -> None:
    got = CASES["tfrecord_wrong_kind"](Runner(Path(ROOT), sys.executable), tmp_path)
    assert (got["exit"], got["stderr_lines"], got["traceback"]) == (3, 1, False)
    assert got["first"].startswith("error: 1000 of 1000 records rejected (100.00% > "
                                   "max_bad_fraction 0.00%): schema_mismatch 1000; nothing "
                                   "published. First: ")
    assert not (tmp_path / "out").exists()
