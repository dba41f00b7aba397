"""`infer-schema --checks`: a starting `checks:` block (etl.job.checks) for the job file, made
from the sample the schema was inferred from (no other read), marked as a proposal.

- `block:` `records: {min: 1}` (an empty split blocks), `rejected: {max_fraction: 0.01}`, and
  per feature: for numbers of a scalar or fixed-shape feature, `min`/`max` = the sampled range
  widened by MARGIN of the range on each side (never widened to take in the feature's
  default: a default outside the sampled range, an int marker such as -1, leaves that bound
  out instead, said in the comment; a NaN default counts in `nan:`), rounded outwards to a
  round step (never across 0 when the sampled values did not cross it; integers stay
  integers, within their dtype's range);
  `nan: 0.0` for floats without NaN/Inf in the sample (else the sampled fraction with a
  margin); `missing:` for optional features whose missing records the statistics count (an
  empty list of a `required: false` feature; a default of a TFRecord passed through); for
  categorical features (a vocabulary, strings with few distinct values) `distinct: {min: 2}`
  when more than one value was seen;
- `warn:` `drift: DRIFT` for every feature.

Every feature line carries a comment saying what was observed. The text is read back before
it is returned: the same block, naming only features of the schema.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from etl.base.errors import ConfigError
from etl.base.yaml_load import load_yaml
from etl.tools.infer.guess import VOCAB_MAX, Guess, Observed, Sampled
from etl.tools.infer.render import SPLIT, comment, scalar

MARGIN = 0.1  # of the sampled range, on each side
DRIFT = 0.1
RECORDS_MIN = 1
WIDTH = 100  # a feature's comment goes above its line when it would end beyond this column
REJECTED = 0.01
_INT_RANGES = {"int8": (-2**7, 2**7 - 1), "uint8": (0, 2**8 - 1), "int16": (-2**15, 2**15 - 1),
               "uint16": (0, 2**16 - 1), "int32": (-2**31, 2**31 - 1),
               "int64": (-2**63, 2**63 - 1)}


def checks_yaml(guesses: list[Guess], sampled: Sampled, stored: bool, names: list[str]) -> str:
    """The `checks:` block (YAML text with comments) for the inferred features; `stored`: the
    records pass through a run unchanged (TFRecord input); `names`: the schema's features."""
    header = [f"proposed by infer-schema from a sample of {sampled.rows} records: review before "
              "relying on it",
              f"({sampled.what}; min/max: the sampled range widened by {MARGIN:.0%} of it on "
              "each side)"]
    lines = [line for h in header for line in comment(h, "")]
    lines += ["checks:", "  block:",
              f"    records: {{min: {RECORDS_MIN}}}  # per split: an empty split blocks",
              f"    rejected: {{max_fraction: {REJECTED}}}  # of those read (beyond "
              "max_bad_fraction: exit 3 first)"]
    block: dict[str, Any] = {"records": {"min": RECORDS_MIN},
                             "rejected": {"max_fraction": REJECTED}}
    rows = [(g.name, checks, note) for g in guesses
            for checks, note in [feature_checks(g, stored)] if checks]
    if rows:
        lines.append("    features:")
        block["features"] = {name: checks for name, checks, _ in rows}
        texts = [f"      {scalar(name)}: {_flow(checks)}" for name, checks, _ in rows]
        width = max(len(t) for t in texts)
        for text, (_, _, note) in zip(texts, rows, strict=True):
            if width + 4 + len(note) <= WIDTH:  # the comments aligned after the checks
                lines.append(f"{text:<{width}}  # {note}")
            else:  # too long for that: on the line(s) above
                lines += comment(note, "      ")
                lines.append(text)
    lines += ["  warn:",
              f"    drift: {DRIFT}  # every feature, against the previous published span"]
    text = "\n".join(lines) + "\n"
    _check(text, {"checks": {"block": block, "warn": {"drift": DRIFT}}}, names)
    return text


def _check(text: str, want: dict[str, Any], names: list[str]) -> None:
    """The text reads back as the block meant (no YAML surprise in a name or number), naming
    only features of the schema; else a bug here, said so. (The job file's own parser,
    etl.job.checks, sits in a layer beside this one: tests/test_infer_checks.py loads the
    written job with it.)"""
    got = load_yaml(text, "the proposed checks: block", "job file")
    unknown = sorted(set(want["checks"]["block"].get("features", {})) - set(names))
    if got != want or unknown:
        raise ConfigError(f"the proposed checks: block does not read back as meant (read "
                          f"{got!r}, meant {want!r}; not in the schema: {unknown}); please "
                          "report it")


def feature_checks(g: Guess, stored: bool) -> tuple[dict[str, Any], str]:
    """(checks of one feature, the comment saying what was observed); no checks: ({}, '')."""
    seen = g.observed
    spec = g.spec
    if seen is None or spec.get("encoding") in ("png", "jpeg"):
        return {}, ""
    checks: dict[str, Any] = {}
    what = f"in {seen.rows} records"
    vocabulary = "vocabulary" in spec
    default = spec.get("default")
    if not vocabulary and seen.low is not None and spec.get("dtype") != "string" \
            and all(d >= 0 for d in spec.get("shape", [])):
        low, high = seen.low, seen.high
        assert high is not None
        lo, hi = widened(low, high, seen.integer, spec["dtype"])
        nan_default = isinstance(default, float) and default != default
        note = f"observed {_num(seen.low)}..{_num(seen.high)} {what}"
        if isinstance(default, (int, float)) and not nan_default and \
                not isinstance(default, bool) and seen.missing and not lo <= default <= hi:
            side = "min" if default < lo else "max"
            note += f"; no {side}: the default {scalar(default)} fills {seen.missing}"
            if side == "max":
                checks["min"] = lo
            else:
                checks["max"] = hi
        else:
            checks["min"], checks["max"] = lo, hi
        if not seen.integer or nan_default:
            nans = seen.nan + (seen.missing if nan_default else 0)
            checks["nan"] = (fraction(nans, seen.values + nans, seen.rows) if nans else 0.0)
            if seen.nan:
                note += f", {seen.nan} NaN/Inf"
    elif seen.distinct is not None and (vocabulary or _few(seen)):
        note = f"observed {seen.distinct} distinct values {what}"
        if seen.distinct > 1:
            checks["distinct"] = {"min": 2}
    else:
        note = ""
    if seen.missing and (spec.get("required") is False or stored):
        checks["missing"] = fraction(seen.missing, seen.rows, seen.rows)
        note = (f"{note}, {seen.missing} without a value" if note
                else f"{seen.missing} of {seen.rows} records without a value")
    elif seen.missing and default is not None and "no min" not in note and \
            "no max" not in note:  # the writer stores it: present in the statistics
        note += f"; {seen.missing} missing, stored as the default {scalar(default)}"
    return checks, note


def _few(seen: Observed) -> bool:
    """Strings with few distinct values: what would have made a vocabulary."""
    assert seen.distinct is not None
    return seen.distinct <= VOCAB_MAX and seen.distinct * 2 <= seen.values


def widened(low: float, high: float, integer: bool, dtype: str) -> tuple[Any, Any]:
    """[low, high] widened by MARGIN of its width on each side (of the value's size, or 1,
    when all values are one), rounded outwards; a bound does not cross 0 when the values did
    not. Integers: whole numbers within the dtype's range."""
    if dtype == "float32":  # the values as stored: a float32 may lie just outside the sample's
        with np.errstate(over="ignore"):
            low32, high32 = float(np.float32(low)), float(np.float32(high))
        low = min(low, low32) if math.isfinite(low32) else low
        high = max(high, high32) if math.isfinite(high32) else high
    span = high - low
    margin = MARGIN * (span or abs(high) or 1)
    if dtype == "float32":  # a few float32 steps at least
        margin = max(margin, 1e-6 * max(abs(low), abs(high)))
    lo, hi = low - margin, high + margin
    if low >= 0 > lo:
        lo = 0
    if high <= 0 < hi:
        hi = 0
    if integer or dtype in _INT_RANGES:
        bounds = _INT_RANGES.get(dtype, _INT_RANGES["int64"])
        return max(bounds[0], math.floor(lo)), min(bounds[1], math.ceil(hi))
    digits = -math.floor(math.log10(margin))  # round to the margin's leading decimal
    step = 10.0 ** -digits
    down = round(math.floor(lo / step) * step, max(digits, 0))
    up = round(math.ceil(hi / step) * step, max(digits, 0))
    return down + 0.0, up + 0.0  # -0.0 -> 0.0


def fraction(count: int, total: int, rows: int) -> float:
    """A threshold for a missing or NaN fraction `count / total` measured in each split of
    `rows` records: the fraction plus the largest of half of it, 0.01 and three standard
    errors of a fraction in the smallest split of the written job (a smaller split varies
    more), rounded up to hundredths, at most 1."""
    f = count / total
    smallest = max(1, int(rows * min(SPLIT.values())))
    margin = max(f / 2, 0.01, 3 * math.sqrt(f * (1 - f) / smallest))
    return min(1.0, math.ceil(round((f + margin) * 100, 9)) / 100)


def _num(x: float | int) -> str:
    """A sampled number for a comment: ints as ints, floats to 6 digits, as floats (2.0)."""
    if isinstance(x, int):
        return str(x)
    text = f"{x:.6g}"
    return text if any(c in text for c in ".einf") else text + ".0"


def _flow(checks: dict[str, Any]) -> str:
    parts = [f"{k}: {_flow(v) if isinstance(v, dict) else scalar(v)}" for k, v in checks.items()]
    return "{" + ", ".join(parts) + "}"
