"""Exact accounting: read = written + rejected per input file, or nothing is published."""

from __future__ import annotations

import pytest

from etl.base.errors import BadInputError, BadRecord, EtlError
from etl.output.accounting import account, check_threshold
from etl.shuffle.shard_writer import ShardResult


def _shard(index: int, per_input: dict[int, int]) -> ShardResult:
    return ShardResult("train", index, 2, f"train-{index:05d}-of-00002.tfrecord",
                       sum(per_input.values()), 10, "0" * 64, {str(k): v for k, v in per_input.items()})


def _bad(path: str, line: int, code: str = "unparsable_number", count: int = 1) -> dict:
    return BadRecord(path, code, "cannot parse 'x' as int64", line=line, feature="id",
                     count=count).to_json()


def test_counts_join_per_input_file_and_by_reason_counts_codes() -> None:
    parts = [
        [{"ordinal": 1, "path": "b.csv", "read": 5}, _bad("b.csv", 3),
         _bad("b.csv", 9, "unreadable_rest", count=2)],
        [{"ordinal": 0, "path": "a.csv", "read": 4}],
    ]
    acc = account(parts, [_shard(0, {0: 2, 1: 1}), _shard(1, {0: 2, 1: 1})], {(0, 0), (1, 0)})
    assert acc.inputs == [{"path": "a.csv", "read": 4, "written": 4, "rejected": 0},
                          {"path": "b.csv", "read": 5, "written": 2, "rejected": 3}]
    assert (acc.read, acc.written, acc.num_rejected) == (9, 6, 3)
    assert acc.summary() == {"num_records": 3, "fraction": 3 / 9,
                             "by_reason": {"unreadable_rest": 2, "unparsable_number": 1}}
    with pytest.raises(BadInputError, match=r"^3 of 9 records rejected \(33\.33% > max_bad_fraction "
                                            r"10\.00%\): unreadable_rest 2, unparsable_number 1; "
                                            r"nothing published\. First: b\.csv:3: feature 'id': "
                                            r"cannot parse 'x' as int64 \[unparsable_number\]$"):
        check_threshold(acc.summary(), acc.read, acc.rejected[0], 0.1)
    check_threshold(acc.summary(), acc.read, acc.rejected[0], 0.34)  # allowed: no error


def test_a_record_neither_written_nor_rejected_fails_the_run() -> None:
    parts = [[{"ordinal": 0, "path": "a.csv", "read": 5}, _bad("a.csv", 2)]]
    with pytest.raises(EtlError, match=r"a\.csv: read 5 records but wrote 3 and rejected 1 "
                                       r"\(1 unaccounted for\); nothing published"):
        account(parts, [_shard(0, {0: 3})], {(0, 0)})


def test_missing_read_report_and_unknown_writer_fail() -> None:
    with pytest.raises(EtlError, match=r"no read report for 1 read task\(s\) \(\(ordinal, split\): "
                                       r"\[\(1, 0\)\]\)"):
        account([[{"ordinal": 0, "path": "a", "read": 1}]], [_shard(0, {0: 1})], {(0, 0), (1, 0)})
    with pytest.raises(EtlError, match=r"unknown input files \[7\]"):
        account([[{"ordinal": 0, "path": "a", "read": 1}]], [_shard(0, {0: 1, 7: 1})], {(0, 0)})


def test_splits_of_one_file_add_up_in_file_order() -> None:
    parts = [  # arrive in any order; rejected records come out in file order
        [{"ordinal": 0, "split": 1, "path": "a.csv", "read": 3}, _bad("a.csv", 9)],
        [{"ordinal": 0, "split": 0, "path": "a.csv", "read": 4}, _bad("a.csv", 2)],
    ]
    acc = account(parts, [_shard(0, {0: 5})], {(0, 0), (0, 1)})
    assert acc.inputs == [{"path": "a.csv", "read": 7, "written": 5, "rejected": 2}]
    assert [b["line"] for b in acc.rejected] == [2, 9]
    with pytest.raises(EtlError, match=r"\(\(ordinal, split\): \[\(0, 2\)\]\)"):
        account(parts, [_shard(0, {0: 5})], {(0, 0), (0, 1), (0, 2)})


def test_bad_record_names_line_or_record_and_byte() -> None:
    assert BadRecord("a.csv", "wrong_field_count", "expected 3 fields, found 2",
                     line=7).message() == "a.csv:7: expected 3 fields, found 2 [wrong_field_count]"
    assert BadRecord("d.tfrecord", "corrupt_record", "data CRC mismatch", record=4,
                     byte=1200).message() == ("d.tfrecord: record 4, byte 1200: data CRC mismatch "
                                              "[corrupt_record]")
    with pytest.raises(ValueError, match="unknown reason code 'oops'"):
        BadRecord("a", "oops", "x")
