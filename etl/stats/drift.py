"""Compare two reports (e.g. today's span against yesterday's) and flag drift.

Computed from the two reports' statistics only, split by split (a split present on one side
only is flagged):
- counts: |n - n_against| / n_against above COUNT_CHANGE (10%);
- categorical features (a vocabulary, strings, or integers with at most accumulators.BARS_MAX
  distinct values): the L-infinity distance of the two value distributions (the largest
  difference of a value's share), as TFDV's `infinity_norm`, above LINF (0.1). Exact when
  both sides have exact value counts (fewer than accumulators.CAPACITY distinct values); else
  (`linf_top_values`) over the values either side lists as frequent (its top values) plus
  one bucket for "the rest" (1 - their shares): high-cardinality strings drift when a
  frequent value appears, vanishes or changes its share, or when the rest grows or shrinks;
- other numbers (and lengths of variable-length and sequence features): the Jensen-Shannon
  divergence (log base 2, so 0..1) of the two histograms on shared bins (HIST_BINS
  equal-width bins over the union of both ranges), as TFDV's `jensen_shannon_divergence`,
  above JS (0.1). The histograms come from exact value counts where the report has them,
  else from the quantiles. NaN and infinite values of a float feature are one more bin
  (their share of all values), so a feed that turns to NaN drifts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from etl.stats.accumulators import BARS_MAX, bin_edges, bin_mass, quantile_mass

COUNT_CHANGE = 0.10
LINF = 0.10
JS = 0.10
THRESHOLDS = {"count_relative_change": COUNT_CHANGE, "categorical_linf": LINF,
              "numeric_jensen_shannon": JS}


def compare(current: dict[str, Any], against: dict[str, Any], against_path: str) -> dict[str, Any]:
    """The `drift` section of `current`'s report."""
    findings: list[str] = []
    splits = _count_drift(current, against, findings)
    features: dict[str, Any] = {}
    for name, info in current["features"].items():
        other = against["features"].get(name)
        if other is None:
            features[name] = {"flagged": True, "note": "not in the other output"}
            findings.append(f"feature {name!r} is not in the other output")
            continue
        per_split = {}
        for split in sorted(set(info["splits"]) & set(other["splits"])):
            result = _split_drift(name, split, info["splits"][split], other["splits"][split],
                                  info.get("categorical", False), findings)
            if result is not None:
                per_split[split] = result
        features[name] = {"flagged": any(r["flagged"] for r in per_split.values()),
                          "splits": per_split}
    for name in sorted(set(against["features"]) - set(current["features"])):
        features[name] = {"flagged": True, "note": "only in the other output"}
        findings.append(f"feature {name!r} is only in the other output")
    return {"against": against_path, "thresholds": THRESHOLDS, "flagged": bool(findings),
            "findings": findings, "splits": splits, "features": features}


def _count_drift(current: dict[str, Any], against: dict[str, Any],
                 findings: list[str]) -> dict[str, Any]:
    """Each split's record count against the other output's (a change over COUNT_CHANGE, or
    a split in one output only, flagged and added to `findings`)."""
    splits: dict[str, Any] = {}
    for split in sorted(set(current["splits"]) | set(against["splits"])):
        a = current["splits"].get(split, {}).get("num_records")
        b = against["splits"].get(split, {}).get("num_records")
        if a is None or b is None:
            splits[split] = {"num_records": a, "against": b, "relative_change": None,
                             "flagged": True}
            findings.append(f"split {split!r} exists only in "
                            f"{'this output' if b is None else 'the other output'}")
            continue
        change = (a - b) / b if b else (0.0 if a == b else float("inf"))
        flagged = abs(change) > COUNT_CHANGE
        splits[split] = {"num_records": a, "against": b, "relative_change": round(change, 6),
                         "flagged": flagged}
        if flagged:
            findings.append(f"split {split!r}: {a} records, {b} in the other output "
                            f"({change:+.1%})")
    return splits


def _split_drift(name: str, split: str, here: dict[str, Any], there: dict[str, Any],
                 categorical: bool, findings: list[str]) -> dict[str, Any] | None:
    """One feature's drift in one split: its values, then its components' and its lengths'
    (what is flagged added to `findings`); None when there is nothing to compare."""
    result = _feature_drift(here, there, categorical)
    if result is None:
        return None
    if result["flagged"]:
        findings.append(f"feature {name!r}, split {split!r}: {result['metric']} "
                        f"{result['value']:.3f} > {result['threshold']}")
    comps_a = here.get("components") or {}
    comps_b = there.get("components") or {}
    for comp in [c for c in comps_a if c in comps_b]:
        sub = _feature_drift(comps_a[comp], comps_b[comp], False)
        if sub is None:
            continue
        result.setdefault("components", {})[comp] = sub
        if sub["flagged"]:
            result["flagged"] = True
            findings.append(f"feature {name!r} component {comp!r}, split {split!r}: "
                            f"{sub['metric']} {sub['value']:.3f} > {sub['threshold']}")
    lengths = _lengths_drift(here, there)
    if lengths is not None:
        result["lengths"] = lengths
        if lengths["flagged"]:
            result["flagged"] = True
            findings.append(f"feature {name!r}, split {split!r}: lengths "
                            f"jensen_shannon {lengths['value']:.3f} > {JS}")
    return result


def feature_drift(a: dict[str, Any], b: dict[str, Any], categorical: bool) -> dict[str, Any] | None:
    """One feature's drift in one split: `a`, `b` are the two reports' per-split entries;
    {"metric", "value", "threshold", "flagged"}, or None when there is nothing to compare."""
    return _feature_drift(a, b, categorical)


def _feature_drift(a: dict[str, Any], b: dict[str, Any], categorical: bool) -> dict[str, Any] | None:
    if not a.get("values") or not b.get("values"):
        if not a.get("values") and not b.get("values"):
            return None
        return {"metric": "values", "value": 1.0, "threshold": 0, "flagged": True}
    if ("min" in a) != ("min" in b):  # numbers on one side, strings on the other (schema change)
        return {"metric": "type", "value": 1.0, "threshold": 0, "flagged": True}
    if categorical:
        found = linf(a, b)
        if found is not None:
            metric, value = found
            return {"metric": metric, "value": round(value, 6), "threshold": LINF,
                    "flagged": value > LINF}
    if "min" not in a or isinstance(a.get("min"), str):
        return None
    value = js_on_shared_bins(a, b, nonfinite=True)
    return {"metric": "jensen_shannon", "value": round(value, 6), "threshold": JS,
            "flagged": value > JS}


def _lengths_drift(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    la, lb = a.get("lengths"), b.get("lengths")
    if not la or not lb or la.get("min") is None or lb.get("min") is None:
        return None
    value = js_on_shared_bins(la, lb)
    return {"metric": "jensen_shannon", "value": round(value, 6), "threshold": JS,
            "flagged": value > JS}


def linf(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, float] | None:
    """(metric, L-infinity distance of the value shares of `a` and `b`), None when a side has
    no values. Exact ("linf") when both sides count every value; else ("linf_top_values")
    over the values either side lists among its top values plus "the rest" (what those
    values leave of 1 on each side): never an empty comparison, whatever the cardinality."""
    total_a, total_b = a.get("values") or 0, b.get("values") or 0
    if not total_a or not total_b:
        return None
    exact_a, exact_b = _counts(a, True), _counts(b, True)
    if exact_a is not None and exact_b is not None:
        keys = sorted(set(exact_a) | set(exact_b))
        sa = np.array([exact_a.get(k, 0) for k in keys], np.float64) / total_a
        sb = np.array([exact_b.get(k, 0) for k in keys], np.float64) / total_b
        return "linf", float(np.abs(sa - sb).max()) if keys else 0.0
    top_a, top_b = _counts(a, False), _counts(b, False)
    keys = sorted(set(top_a or {}) | set(top_b or {}))
    known_a, known_b = exact_a or top_a or {}, exact_b or top_b or {}
    sa = np.array([known_a.get(k, 0) for k in keys], np.float64) / total_a
    sb = np.array([known_b.get(k, 0) for k in keys], np.float64) / total_b
    rest = abs(max(0.0, 1.0 - float(sa.sum())) - max(0.0, 1.0 - float(sb.sum())))
    value = max(float(np.abs(sa - sb).max()) if keys else 0.0, rest)
    return "linf_top_values", value


def _counts(stats: dict[str, Any], exact: bool) -> dict[str, int] | None:
    """Count per value (as text: JSON keys): every value when `exact` (None unless the
    report has exact counts), else the report's top values."""
    if exact:
        pairs = stats.get("value_counts")
        if pairs is None or not stats.get("value_counts_exact", True):
            return None
        return {str(v): int(c) for v, c in pairs}
    return {str(t["value"]): int(t["count"]) for t in stats.get("top_values") or []}


def js_on_shared_bins(a: dict[str, Any], b: dict[str, Any], nonfinite: bool = False) -> float:
    """JS divergence of the two histograms on shared bins; with `nonfinite`, NaN and infinite
    values (a float feature's `nan_or_inf`) are one more bin holding their share."""
    edges = bin_edges(min(float(a["min"]), float(b["min"])), max(float(a["max"]), float(b["max"])))
    pa_, pb = _mass(a, edges), _mass(b, edges)
    bad_a, bad_b = int(a.get("nan_or_inf") or 0), int(b.get("nan_or_inf") or 0)
    if nonfinite and (bad_a or bad_b):
        pa_ = np.append(pa_ * (1 - _share(bad_a, a)), _share(bad_a, a))
        pb = np.append(pb * (1 - _share(bad_b, b)), _share(bad_b, b))
    return jensen_shannon(pa_, pb)


def _share(bad: int, stats: dict[str, Any]) -> float:
    total = int(stats.get("values") or 0) + bad
    return bad / total if total else 0.0


def _mass(stats: dict[str, Any], edges: list[float]) -> np.ndarray:
    counts = stats.get("value_counts")
    if counts:
        values = np.array([v for v, _ in counts], np.float64)
        weights = np.array([c for _, c in counts], np.float64)
        mass = bin_mass(values, weights, edges)
        return mass / mass.sum()
    return quantile_mass(stats["quantiles"], edges)


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> float:
    """JS divergence with log base 2 (0 for equal distributions, 1 for disjoint ones)."""
    p = p / p.sum() if p.sum() else p
    q = q / q.sum() if q.sum() else q
    m = (p + q) / 2

    def kl(x: np.ndarray) -> float:
        keep = x > 0
        return float(np.sum(x[keep] * np.log2(x[keep] / m[keep])))

    return max(0.0, (kl(p) + kl(q)) / 2)


def is_categorical(feature: dict[str, Any], stats_by_split: dict[str, Any]) -> bool:
    """A vocabulary, strings, or integers with few distinct values in every split."""
    if feature.get("vocabulary") or feature["dtype"] == "bytes":
        return True
    if feature["dtype"].startswith("float") or feature.get("image"):
        return False
    return all(s.get("value_counts_exact") and s.get("distinct", 0) <= BARS_MAX
               for s in stats_by_split.values())
