"""Checks against statistics: one Result per check, split and feature.

The measures are the report's (etl.stats): counts from the manifest, min / max / mean /
missing / NaN / distinct from the per-split feature statistics, drift from
etl.stats.drift.compare (L-infinity of the value shares for categorical features,
Jensen-Shannon divergence for numeric ones) against the previous published span. A measured
value is kept exact (the number the statistics hold), so the message shows what the data has.

NaN and infinite values (`nan_or_inf`: only a float feature with `allow_nan: true` keeps them)
are never "in range": min, max and mean are measured over the finite values, and a split with
any NaN or inf fails its min, max and mean checks unless a `nan:` check of the same feature (at
either level) names them; that check then says how many may be. Drift counts them as one more
bin (etl.stats.drift), so a feed that turns to NaN drifts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from etl.job.checks import ALL_FEATURES, Check, Checks
from etl.stats.drift import compare

NO_PREVIOUS = "no previous span to compare with"


@dataclass(frozen=True)
class Result:
    check: str  # as written in the job file: records.min, features.x.drift
    level: str  # block | warn
    passed: bool
    measured: Any  # None when there was nothing to measure (see note)
    threshold: Any
    split: str | None = None
    feature: str | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        if isinstance(doc["threshold"], tuple):
            doc["threshold"] = list(doc["threshold"])
        return doc

    def line(self) -> str:
        """One line: `blocked: features.label.distinct.min, split train: measured 1, must be
        at least 2`."""
        head = {"block": "blocked", "warn": "warning"}[self.level] if not self.passed else "ok"
        where = f", split {self.split}" if self.split else ""
        if self.measured is None:
            return f"{head}: {self.check}{where}: {self.note}"
        return (f"{head}: {self.check}{where}: measured {fmt(self.measured)}, "
                f"{_rule(self.check, self.threshold)}")


def fmt(value: Any) -> str:
    """Exact: ints as ints, floats by Python's shortest repr (what the statistics hold)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _rule(check: str, threshold: Any) -> str:
    kind = check.rsplit(".", 1)[-1]
    if check.endswith(".mean"):
        return f"must be within [{fmt(threshold[0])}, {fmt(threshold[1])}]"
    if kind == "min":
        return f"must be at least {fmt(threshold)}"
    return f"must be at most {fmt(threshold)}"


def evaluate(checks: Checks, stats: dict[str, Any], manifest: dict[str, Any],
             previous: dict[str, Any] | None, previous_path: str | None = None) -> list[Result]:
    """Every check of `checks` on `stats` (report-shaped, etl.quality.stats) and `manifest`
    (the staged one: counts, rejected by reason); `previous`: the previous span's statistics
    (None: none published: drift and records.max_change pass, saying so)."""
    drift = compare(stats, previous, previous_path or "") if previous is not None else None
    named = {c.feature for c in checks.checks if c.kind == "nan"}
    out: list[Result] = []
    for check in _expanded(checks, stats):
        out.extend(_one(check, stats, manifest, previous, drift, check.feature in named))
    return out


def _expanded(checks: Checks, stats: dict[str, Any]) -> list[Check]:
    """A level's default `drift:` becomes a drift check of every feature that has none of
    its own at that level."""
    out: list[Check] = []
    for c in checks.checks:
        if c.feature != ALL_FEATURES:
            out.append(c)
            continue
        own = {d.feature for d in checks.checks if d.level == c.level and d.kind == "drift"}
        out.extend(Check(c.level, "drift", c.threshold, name, c.line)
                   for name in stats["features"] if name not in own)
    return out


def _one(c: Check, stats: dict[str, Any], manifest: dict[str, Any],
         previous: dict[str, Any] | None, drift: dict[str, Any] | None,
         nan_named: bool = False) -> list[Result]:
    """The results of one check (per split where it is measured per split); `nan_named`: a
    `nan:` check of the same feature judges its NaN/inf, so min/max/mean look at the rest."""
    def result(measured: Any, failed: bool, split: str | None = None, note: str = "") -> Result:
        return Result(c.name, c.level, not failed, measured, c.threshold, split, c.feature, note)

    if c.kind.startswith("records."):
        return _records_check(c, manifest, previous, result)
    if c.kind.startswith("rejected."):
        return [_rejected_check(c, manifest, result)]
    feature = stats["features"][c.feature]
    return [_drift(c, split, drift, result) if c.kind == "drift"
            else _feature_check(c, split, s, nan_named, result)
            for split, s in feature["splits"].items()]


def _records_check(c: Check, manifest: dict[str, Any], previous: dict[str, Any] | None,
                   result: Any) -> list[Result]:
    """records.min / records.max / records.max_change: each split's record count."""
    out = []
    for split, info in manifest["splits"].items():
        n = int(info["num_records"])
        if c.kind == "records.min":
            out.append(result(n, n < c.threshold, split))
        elif c.kind == "records.max":
            out.append(result(n, n > c.threshold, split))
        else:
            before = (previous or {}).get("splits", {}).get(split, {}).get("num_records")
            if before is None:
                out.append(result(None, False, split, NO_PREVIOUS if previous is None
                                  else f"split {split} is not in the previous span"))
                continue
            change = abs(n - before) / before if before else (0.0 if n == 0 else math.inf)
            out.append(result(change, change > c.threshold, split))
    return out


def _rejected_check(c: Check, manifest: dict[str, Any],
                    result: Any) -> Result:
    """rejected.max_fraction / rejected.<reason>: the fraction of the records read."""
    read = sum(int(i.get("read", 0)) for i in manifest.get("inputs", []))
    rejected = manifest.get("rejected", {})
    code = c.kind.split(".", 1)[1]
    count = (int(rejected.get("num_records", 0)) if code == "max_fraction"
             else int(rejected.get("by_reason", {}).get(code, 0)))
    fraction = count / read if read else 0.0
    return result(fraction, fraction > c.threshold)


def _feature_check(c: Check, split: str, s: dict[str, Any], nan_named: bool,
                   result: Any) -> Result:
    """A feature's check in one split: min/max/mean, missing, nan, distinct.min/max."""
    measured: Any
    if c.kind in ("min", "max", "mean"):
        bad = int(s.get("nan_or_inf") or 0)
        if bad and not nan_named:
            total = bad + int(s.get("values") or 0)
            return result(None, True, split, nonfinite_note(bad, total, c.feature))
        measured = s.get(c.kind)
        if measured is None and s.get("values"):  # a sum beyond float64: not in range
            return result(None, True, split, "the mean overflows float64 (values near "
                                             "its limit): it cannot be in range")
        if measured is None:
            return result(None, False, split, "no values to measure")
        failed = (measured < c.threshold if c.kind == "min" else
                  measured > c.threshold if c.kind == "max" else
                  not c.threshold[0] <= measured <= c.threshold[1])
    elif c.kind == "missing":
        if s.get("missing") is None or not s.get("records"):
            return result(None, False, split, "missing records are not counted")
        measured = s["missing"] / s["records"]
        failed = measured > c.threshold
    elif c.kind == "nan":
        bad = int(s.get("nan_or_inf") or 0)
        total = int(s.get("values") or 0) + bad
        measured = bad / total if total else 0.0
        failed = measured > c.threshold
    else:  # distinct.min / distinct.max
        measured = int(s.get("distinct") or 0)
        failed = measured < c.threshold if c.kind == "distinct.min" else measured > c.threshold
    return result(measured, failed, split)


def nonfinite_note(bad: int, total: int, feature: str | None) -> str:
    """Why a min/max/mean check failed on NaN or infinite values no `nan:` check names."""
    return (f"{bad} of {total} values are NaN or infinite: out of range (a `nan:` check of "
            f"{feature} says how many may be)")


def _drift(c: Check, split: str, drift: dict[str, Any] | None, result: Any) -> Result:
    """The feature's drift in `split`: the largest of its own measure, its components' and
    its lengths' (a packed vector drifts when one of its columns does)."""
    if drift is None:
        return result(None, False, split, NO_PREVIOUS)
    entry = drift["features"].get(c.feature, {})
    found = entry.get("splits", {}).get(split) if isinstance(entry, dict) else None
    if found is None:
        note = entry.get("note") if isinstance(entry, dict) and entry.get("note") else \
            f"split {split} has no values to compare in both spans"
        return result(None, False, split, f"no drift measured ({note})")
    values = [found["value"]]
    values += [sub["value"] for sub in (found.get("components") or {}).values()]
    if found.get("lengths"):
        values.append(found["lengths"]["value"])
    value = max(values)
    return result(value, value > c.threshold, split)
