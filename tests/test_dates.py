"""`dtype: date` / `dtype: timestamp`: text and Arrow dates to int64 exactly, or refused with
the reason; the schema keys; the reading-side helpers; the TFMD time domain."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import numpy as np
import pyarrow as pa
import pytest

from etl.base.errors import ConfigError, SchemaError
from etl.contract.codec import Encoder
from etl.contract.dates import TimeSpec, parse_one, to_datetime64, to_strings
from etl.contract.schema import schema_from_dict


def _encode(spec: dict, cells: list, name: str = "t"):
    schema = schema_from_dict({"features": {name: spec}})
    out = Encoder(schema).encode({name: cells}, source="in.csv",
                                 lines=np.arange(2, 2 + len(cells)))
    values = out.storage[name].values.to_pylist()
    bad = {b.line - 2: (b.code, b.reason) for b in out.bad}
    return values, bad


def _us(*args: int, tz: dt.tzinfo = dt.timezone.utc) -> int:
    """Microseconds since the epoch of a datetime, computed independently (timedelta)."""
    delta = dt.datetime(*args, tzinfo=tz) - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds


ISO_CASES = [
    ("2010-01-01", _us(2010, 1, 1)),
    ("2010-01-01T00:00:00Z", _us(2010, 1, 1)),
    ("2010-01-01 12:30:00+02:00", _us(2010, 1, 1, 10, 30)),
    ("2010-01-01T12:30:00-0130", _us(2010, 1, 1, 14, 0)),
    ("2010-01-01T12:30", _us(2010, 1, 1, 12, 30)),
    ("2010-01-01 12:30:00.25", _us(2010, 1, 1, 12, 30, 0, 250000)),
    ("1969-12-31T23:59:59.999999", -1),
    ("  2262-04-11 23:47:16  ", _us(2262, 4, 11, 23, 47, 16)),
]


def test_iso_text_to_microseconds_exactly() -> None:
    values, bad = _encode({"dtype": "timestamp"}, [c for c, _ in ISO_CASES])
    assert bad == {}
    assert values == [want for _, want in ISO_CASES]
    spec = TimeSpec("timestamp", "us")
    assert [parse_one(spec, c) for c, _ in ISO_CASES] == values  # the reference agrees


def test_slow_path_gives_the_same_values_as_the_fast_path() -> None:
    """A year outside what Arrow's ns parse holds sends the whole batch the exact Python
    way: the other cells get the values the vectorised path gave them."""
    cells = [c for c, _ in ISO_CASES] + ["1500-06-01T12:00:00Z"]
    values, bad = _encode({"dtype": "timestamp"}, cells)
    assert bad == {}
    assert values == [want for _, want in ISO_CASES] + [_us(1500, 6, 1, 12)]


def test_date_text_days_and_refusals() -> None:
    cells = ["1970-01-01", "2012-01-02", "0001-01-01", "2010-01-01T00:00:00Z", "", None,
             "2010-01-01 12:00", "2010-02-30", "01/02/2010", "1970"]
    values, bad = _encode({"dtype": "date"}, cells)
    assert values[:4] == [0, 15341, -719162, 14610]
    assert bad == {
        4: ("missing_required", "missing required value"),
        5: ("missing_required", "missing required value"),
        6: ("unparsable_date", "'2010-01-01 12:00' has a time of day (a date feature stores "
                               "whole days; declare dtype: timestamp to keep the time)"),
        7: ("unparsable_date", "cannot parse '2010-02-30' as date: day is out of range for "
                               "month"),
        8: ("unparsable_date", "cannot parse '01/02/2010' as date: expected an ISO 8601 date "
                               "such as 2010-01-01"),
        9: ("unparsable_date", "cannot parse '1970' as date: expected an ISO 8601 date such "
                               "as 2010-01-01"),
    }


def test_sub_unit_precision_is_refused_never_truncated() -> None:
    values, bad = _encode({"dtype": "timestamp", "unit": "s"},
                          ["2010-01-01 12:30:00", "2010-01-01 12:30:00.5"])
    assert values[0] == _us(2010, 1, 1, 12, 30) // 10**6
    assert bad == {1: ("unparsable_date", "'2010-01-01 12:30:00.5' is more precise than unit s "
                                          "(it would be truncated); declare unit: ms or finer")}
    values, bad = _encode({"dtype": "timestamp", "unit": "ns"}, ["2010-01-01T00:00:00.123456789"])
    assert bad == {} and values == [_us(2010, 1, 1) * 1000 + 123456789]


def test_naive_text_in_a_named_zone_and_clock_changes() -> None:
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    cells = ["2021-07-01 12:00", "2021-01-01 12:00", "2021-07-01 12:00Z",
             "2021-03-28 02:30:00", "2021-10-31 02:30:00", "2021-10-31 02:30:00+01:00"]
    values, bad = _encode({"dtype": "timestamp", "unit": "s", "timezone": "Europe/Berlin"},
                          cells)
    assert values[:3] == [_us(2021, 7, 1, 12, tz=berlin) // 10**6,
                          _us(2021, 1, 1, 12, tz=berlin) // 10**6,
                          _us(2021, 7, 1, 12) // 10**6]
    assert values[0] == _us(2021, 7, 1, 10) // 10**6  # summer: UTC+2
    assert values[5] == _us(2021, 10, 31, 1, 30) // 10**6
    assert bad == {
        3: ("unparsable_date", "'2021-03-28 02:30:00' does not exist in Europe/Berlin (a clock "
                               "change); write it with its UTC offset, e.g. +01:00"),
        4: ("unparsable_date", "'2021-10-31 02:30:00' is ambiguous in Europe/Berlin (a clock "
                               "change); write it with its UTC offset, e.g. +01:00"),
    }


def test_format_strptime_fast_and_python_paths() -> None:
    values, bad = _encode({"dtype": "date", "format": "%Y/%m/%d"},
                          ["2012/01/01", "2015/12/31", "2012-01-01"])
    assert values[:2] == [15340, 16800]
    assert bad == {2: ("unparsable_date", "cannot parse '2012-01-01' as date: expected text in "
                                          "the format '%Y/%m/%d' (time data '2012-01-01' does "
                                          "not match format '%Y/%m/%d')")}
    values, bad = _encode({"dtype": "timestamp", "unit": "ms", "format": "%d.%m.%Y %H:%M:%S.%f"},
                          ["01.02.2010 12:30:00.250", "01.02.2010 12:30:00.000250"])
    assert values[0] == _us(2010, 2, 1, 12, 30, 0, 250000) // 1000
    assert bad == {1: ("unparsable_date", "'01.02.2010 12:30:00.000250' is more precise than "
                                          "unit ms (it would be truncated); declare unit: us or "
                                          "finer")}


def test_numbers_are_not_dates() -> None:
    values, bad = _encode({"dtype": "date"}, [1970, 2010])
    assert bad[0] == ("wrong_type", "expected an ISO 8601 date such as 2010-01-01, found int64 "
                                    "value 1970 (declare dtype: int64 to store numbers as they are)")


# ---- typed Arrow inputs --------------------------------------------------------------------
def _encode_batch(features: dict, batch: pa.RecordBatch):
    out = Encoder(schema_from_dict({"features": features})).encode(batch, source="x.parquet")
    return ({k: v.values.to_pylist() for k, v in out.storage.items()},
            {(b.record, b.feature): (b.code, b.reason) for b in out.bad})


def test_arrow_dates_and_timestamps_map_exactly() -> None:
    batch = pa.record_batch({
        "d32": pa.array([dt.date(2010, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31)], pa.date32()),
        "d64": pa.array([0, 86400000, 86400000 * 2], pa.date64()),
        "utc": pa.array([0, 1000, 86400000], pa.timestamp("ms", "UTC")),
        "naive": pa.array([dt.datetime(2021, 7, 1, 12)] * 3, pa.timestamp("us")),
    })
    values, bad = _encode_batch({
        "d32": {"dtype": "date"},
        "d32_s": {"dtype": "timestamp", "unit": "s", "source": "d32"},
        "d64": {"dtype": "date"},
        "utc_s": {"dtype": "timestamp", "unit": "s", "source": "utc"},
        "utc_ns": {"dtype": "timestamp", "unit": "ns", "source": "utc"},
        "naive": {"dtype": "timestamp", "unit": "s", "timezone": "Europe/Berlin"},
    }, batch)
    assert bad == {}
    assert values["d32"] == [14610, -719162, 2932896]
    assert values["d32_s"] == [1262304000, -62135596800, 253402214400]
    assert values["d64"] == [0, 1, 2]
    assert values["utc_s"] == [0, 1, 86400]
    assert values["utc_ns"] == [0, 10**9, 86400 * 10**9]
    assert values["naive"] == [_us(2021, 7, 1, 10) // 10**6] * 3


def test_arrow_unit_loss_and_overflow_are_refused_per_value() -> None:
    batch = pa.record_batch({"t": pa.array([1500, 2000, 0], pa.timestamp("ms", "UTC")),
                             "d": pa.array([dt.date(1970, 1, 1), dt.date(1, 1, 1),
                                            dt.date(2000, 1, 1)], pa.date32())})
    values, bad = _encode_batch({"t": {"dtype": "timestamp", "unit": "s"},
                                 "d": {"dtype": "timestamp", "unit": "ns"}}, batch)
    assert values["t"][1:] == [2, 0] and values["d"][2] == 946684800 * 10**9
    assert bad == {
        (0, "t"): ("unparsable_date", "'1970-01-01 00:00:01.500000+00:00' is more precise "
                                      "than unit s (it would be truncated); declare unit: ms or "
                                      "finer (timestamp[ms, tz=UTC] input)"),
        (1, "d"): ("out_of_range", "'0001-01-01' does not fit int64 ns since 1970-01-01; "
                                   "declare a coarser unit"),
    }


def test_typed_column_declared_as_a_number_is_refused_in_one_line() -> None:
    batch = pa.record_batch({"d": pa.array([dt.date(2010, 1, 1)], pa.date32()),
                             "t": pa.array([0], pa.timestamp("ms", "UTC")),
                             "span": pa.array([5], pa.duration("s"))})
    cases = {
        "d": "x.parquet: column 'd' is date32[day], not a number for dtype int64: declare "
             "dtype: date (stored as int64 days since 1970-01-01)",
        "t": "x.parquet: column 't' is timestamp[ms, tz=UTC], not a number for dtype int64: "
             "declare dtype: timestamp with unit: ms (stored as int64 ms since the epoch)",
        "span": "x.parquet: column 'span' is duration[s], not a number for dtype int64: no "
                "feature dtype holds it as it is: convert it to a number of its unit in the "
                "source",
    }
    batch = pa.record_batch([*batch.columns, pa.array([{"a": 1}])], [*batch.schema.names, "s"])
    cases["s"] = ("x.parquet: column 's' is struct<a: int64>, not a number for dtype int64: read "
                  "its fields as columns of their own, or convert it in the source")
    for column, message in cases.items():
        with pytest.raises(ConfigError) as e:
            _encode_batch({column: {"dtype": "int64"}}, batch)
        assert str(e.value) == message
    with pytest.raises(ConfigError) as e:
        _encode_batch({"s": {"dtype": "bytes"}}, batch)
    assert str(e.value) == ("x.parquet: column 's' is struct<a: int64>, not text for dtype "
                            "bytes: read its fields as columns of their own, or convert it in "
                            "the source")
    values, bad = _encode_batch({"t": {"dtype": "bytes"}, "d": {"dtype": "bytes"}}, batch)
    assert values == {"t": [b"1970-01-01 00:00:00.000Z"], "d": [b"2010-01-01"]}


# ---- schema keys -----------------------------------------------------------------------
def test_schema_keys_round_trip_and_fingerprint() -> None:
    doc = {"features": {
        "d": {"dtype": "date", "default": "1970-01-02"},
        "t": {"dtype": "timestamp", "unit": "ms", "timezone": "America/New_York",
              "format": "%m/%d/%Y %H:%M"},
        "u": {"dtype": "timestamp"},
    }}
    schema = schema_from_dict(doc)
    d, t, u = schema.features
    assert (d.dtype, d.time.kind, d.time.unit, d.default, d.required) == ("int64", "date", "D", 1,
                                                                          False)
    assert (t.time.unit, t.time.timezone, t.time.format) == ("ms", "America/New_York",
                                                             "%m/%d/%Y %H:%M")
    assert u.time == TimeSpec("timestamp", "us", "UTC", None)
    assert schema.to_dict()["features"] == {
        "d": {"dtype": "date", "shape": [], "default": 1},
        "t": {"dtype": "timestamp", "shape": [], "unit": "ms", "timezone": "America/New_York",
              "format": "%m/%d/%Y %H:%M"},
        "u": {"dtype": "timestamp", "shape": [], "unit": "us"},
    }
    again = schema_from_dict(schema.to_dict())
    assert again == schema and again.sha256() == schema.sha256()
    assert schema.numeric_columns() == {}  # the CSV fast path leaves date text alone
    assert schema.text_columns() == ["d", "t", "u"]
    mixed = schema_from_dict({"features": {"a": {"dtype": "string", "source": "A"},
                                           "b": {"dtype": "int64"},
                                           "c": {"dtype": "timestamp", "source": "A"}}})
    assert mixed.text_columns() == ["A"]


@pytest.mark.parametrize("spec, message", [
    ({"dtype": "date", "unit": "s"}, "a date has no unit or timezone (days since 1970-01-01); "
                                     "declare dtype: timestamp for a time of day"),
    ({"dtype": "timestamp", "unit": "h"}, "unit must be one of ['s', 'ms', 'us', 'ns'], got 'h'"),
    ({"dtype": "timestamp", "timezone": "Mars/Olympus"},
     "unknown timezone 'Mars/Olympus': use an IANA name such as UTC, Europe/Berlin or "
     "America/New_York"),
    ({"dtype": "int64", "unit": "s"}, "unit, timezone and format belong to dtype: date or "
                                      "dtype: timestamp"),
    ({"dtype": "date", "format": "Y-m-d"}, "format must be a strptime pattern such as "
                                           "'%d/%m/%Y', got 'Y-m-d'"),
    ({"dtype": "date", "encoding": "raw"}, "a date feature is stored as int64 values: no "
                                           "encoding or vocabulary"),
    ({"dtype": "date", "default": "soon"}, "default: cannot parse 'soon' as date: expected an "
                                           "ISO 8601 date such as 2010-01-01"),
])
def test_schema_refuses_bad_time_keys(spec: dict, message: str) -> None:
    with pytest.raises(SchemaError) as e:
        schema_from_dict({"features": {"x": spec}})
    assert str(e.value) == f"<schema>: feature 'x': {message}"


def test_reading_side_helpers() -> None:
    schema = schema_from_dict({"features": {"d": {"dtype": "date"},
                                            "t": {"dtype": "timestamp", "unit": "ms"}}})
    d, t = schema.features
    days = np.array([0, 15341, -1])
    assert to_datetime64(days, d).tolist() == [dt.date(1970, 1, 1), dt.date(2012, 1, 2),
                                               dt.date(1969, 12, 31)]
    assert to_strings(days, d).tolist() == ["1970-01-01", "2012-01-02", "1969-12-31"]
    ms = np.array([[0, 1262341800250]])
    assert to_datetime64(ms, t).dtype == np.dtype("datetime64[ms]")
    assert to_strings(ms, t).tolist() == [["1970-01-01T00:00:00.000Z",
                                           "2010-01-01T10:30:00.250Z"]]
    with pytest.raises(ValueError, match="'t' is not a date or timestamp feature"):
        to_datetime64(ms, schema_from_dict({"features": {"t": {"dtype": "int64"}}}).features[0])


def test_tfmd_time_domain() -> None:
    from tensorflow_metadata.proto.v0 import schema_pb2

    from etl.contract.tfmd import schema_to_tfmd

    schema = schema_from_dict({"features": {"d": {"dtype": "date"},
                                            "t": {"dtype": "timestamp", "unit": "ns"}}})
    out = {f.name: f for f in schema_to_tfmd(schema).feature}
    assert out["d"].type == schema_pb2.INT
    assert out["d"].time_domain.integer_format == schema_pb2.TimeDomain.UNIX_DAYS
    assert out["t"].time_domain.integer_format == schema_pb2.TimeDomain.UNIX_NANOSECONDS


def test_valid_text_takes_the_vectorised_path(monkeypatch) -> None:
    """Dates, naive and offset date-times, and a zone: no cell goes the per-value way."""
    from etl.contract import dates

    def refuse(*args, **kwargs):
        raise AssertionError("per-value Python path used on valid input")

    monkeypatch.setattr(dates, "_slow", refuse)
    values, bad = _encode({"dtype": "date"}, ["2010-01-01", "1999-12-31", None])
    assert values[:2] == [14610, 10956]
    values, bad = _encode({"dtype": "timestamp", "timezone": "Europe/Berlin"},
                          ["2010-01-01", "2010-01-01T12:30:00+02:00", "2010-07-01 12:00"])
    assert bad == {} and values == [_us(2009, 12, 31, 23), _us(2010, 1, 1, 10, 30),
                                    _us(2010, 7, 1, 10)]


def test_format_never_rolls_an_impossible_date_over() -> None:
    """Arrow's strptime reads 2020/02/30 as March 1st and 25:00 as the next day, without an
    error: each is rejected with Python's reason, never stored as another date."""
    values, bad = _encode({"dtype": "date", "format": "%Y/%m/%d"},
                          ["2020/02/28", "2020/02/30", "2021/02/29", "2020/2/9"])
    assert values[0] == 18320 and values[3] == 18301
    assert bad == {1: ("unparsable_date", "cannot parse '2020/02/30' as date: expected text in "
                                          "the format '%Y/%m/%d' (day is out of range for "
                                          "month)"),
                   2: ("unparsable_date", "cannot parse '2021/02/29' as date: expected text in "
                                          "the format '%Y/%m/%d' (day is out of range for "
                                          "month)")}
    values, bad = _encode({"dtype": "timestamp", "unit": "s", "format": "%Y/%m/%d %H:%M"},
                          ["2020/04/30 23:00", "2020/04/31 10:00", "2020/04/30 25:00"])
    assert values[0] == _us(2020, 4, 30, 23) // 10**6
    assert sorted(bad) == [1, 2] and all(code == "unparsable_date" for code, _ in bad.values())


def test_valid_text_in_a_format_takes_the_vectorised_path(monkeypatch) -> None:
    """The write-back check accepts what strftime spells otherwise (no leading zero, case):
    valid cells in vega's layouts never go the per-value way."""
    from etl.contract import dates

    def refuse(*args, **kwargs):
        raise AssertionError("per-value Python path used on valid input")

    monkeypatch.setattr(dates, "_slow", refuse)
    values, bad = _encode({"dtype": "date", "format": "%b %d %Y"},
                          ["Jan 1 2000", "Feb 29 2000", "dec 31 1999"])
    assert bad == {} and values == [10957, 11016, 10956]
    values, bad = _encode({"dtype": "timestamp", "unit": "s", "format": "%Y/%m/%d %H:%M"},
                          ["2010/01/01 00:00", "2010/1/1 9:05"])
    assert bad == {} and values == [_us(2010, 1, 1) // 10**6, _us(2010, 1, 1, 9, 5) // 10**6]


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_vectorised_path_equals_the_reference_on_random_text(zone: str, unit: str) -> None:
    """2000 random ISO cells (dates, naive and offset times, fractions, clock-change hours):
    the Arrow path and `parse_one` accept the same cells with the same integers and reject
    the same ones."""
    rng = np.random.default_rng(7)
    seconds = rng.integers(-(2**31), 2**31, 2000)
    cells = []
    for i, s in enumerate(seconds.tolist()):
        t = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=s)
        kind = i % 5
        if kind == 0:
            cells.append(t.strftime("%Y-%m-%d"))
        elif kind == 1:
            cells.append(t.strftime("%Y-%m-%dT%H:%M:%S"))
        elif kind == 2:
            cells.append(t.strftime("%Y-%m-%d %H:%M:%S") + f".{rng.integers(0, 1000):03d}")
        elif kind == 3:
            h = int(rng.integers(-12, 14))
            cells.append(t.strftime("%Y-%m-%dT%H:%M") + f"{'+' if h >= 0 else '-'}{abs(h):02d}:30")
        else:
            cells.append(t.strftime("%Y-%m-%d 02:%M:%S"))  # DST hours in both zones
    values, bad = _encode({"dtype": "timestamp", "unit": unit, "timezone": zone}, cells)
    spec = TimeSpec("timestamp", unit, zone)
    for i, cell in enumerate(cells):
        try:
            want = parse_one(spec, cell)
        except ValueError as e:
            assert bad[i] == ("unparsable_date", str(e)), cell
        else:
            assert i not in bad and values[i] == want, cell
