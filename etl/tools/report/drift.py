"""Compare two reports (e.g. today's span against yesterday's) and flag drift.

Computed from the two reports' statistics only, split by split (a split present on one side
only is flagged):
- counts: |n - n_against| / n_against above COUNT_CHANGE (10%);
- categorical features (a vocabulary, strings, or integers with at most stats.BARS_MAX
  distinct values): the L-infinity distance of the two value distributions (the largest
  difference of a value's share), as TFDV's `infinity_norm`, above LINF (0.1);
- other numbers (and lengths of variable-length and sequence features): the Jensen-Shannon
  divergence (log base 2, so 0..1) of the two histograms on shared bins (HIST_BINS
  equal-width bins over the union of both ranges), as TFDV's `jensen_shannon_divergence`,
  above JS (0.1). The histograms come from exact value counts where the report has them,
  else from the quantiles.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from etl.tools.report.stats import BARS_MAX, bin_edges, bin_mass, quantile_mass

COUNT_CHANGE = 0.10
LINF = 0.10
JS = 0.10
THRESHOLDS = {"count_relative_change": COUNT_CHANGE, "categorical_linf": LINF,
              "numeric_jensen_shannon": JS}


def compare(current: dict[str, Any], against: dict[str, Any], against_path: str) -> dict[str, Any]:
    """The `drift` section of `current`'s report."""
    findings: list[str] = []
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
    features: dict[str, Any] = {}
    for name, info in current["features"].items():
        other = against["features"].get(name)
        if other is None:
            features[name] = {"flagged": True, "note": "not in the other output"}
            findings.append(f"feature {name!r} is not in the other output")
            continue
        per_split = {}
        for split in sorted(set(info["splits"]) & set(other["splits"])):
            result = _feature_drift(info["splits"][split], other["splits"][split],
                                    info.get("categorical", False))
            if result is None:
                continue
            per_split[split] = result
            if result["flagged"]:
                findings.append(f"feature {name!r}, split {split!r}: {result['metric']} "
                                f"{result['value']:.3f} > {result['threshold']}")
            comps_a = info["splits"][split].get("components") or {}
            comps_b = other["splits"][split].get("components") or {}
            for comp in [c for c in comps_a if c in comps_b]:
                sub = _feature_drift(comps_a[comp], comps_b[comp], False)
                if sub is None:
                    continue
                result.setdefault("components", {})[comp] = sub
                if sub["flagged"]:
                    result["flagged"] = True
                    findings.append(f"feature {name!r} component {comp!r}, split {split!r}: "
                                    f"{sub['metric']} {sub['value']:.3f} > {sub['threshold']}")
            lengths = _lengths_drift(info["splits"][split], other["splits"][split])
            if lengths is not None:
                result["lengths"] = lengths
                if lengths["flagged"]:
                    result["flagged"] = True
                    findings.append(f"feature {name!r}, split {split!r}: lengths "
                                    f"jensen_shannon {lengths['value']:.3f} > {JS}")
        features[name] = {"flagged": any(r["flagged"] for r in per_split.values()),
                          "splits": per_split}
    for name in sorted(set(against["features"]) - set(current["features"])):
        features[name] = {"flagged": True, "note": "only in the other output"}
        findings.append(f"feature {name!r} is only in the other output")
    return {"against": against_path, "thresholds": THRESHOLDS, "flagged": bool(findings),
            "findings": findings, "splits": splits, "features": features}


def feature_drift(a: dict[str, Any], b: dict[str, Any], categorical: bool) -> dict[str, Any] | None:
    """One feature's drift in one split: `a`, `b` are the two reports' per-split entries;
    {"metric", "value", "threshold", "flagged"}, or None when there is nothing to compare."""
    return _feature_drift(a, b, categorical)


def _feature_drift(a: dict[str, Any], b: dict[str, Any], categorical: bool) -> dict[str, Any] | None:
    if not a.get("values") or not b.get("values"):
        if not a.get("values") and not b.get("values"):
            return None
        return {"metric": "values", "value": 1.0, "threshold": 0, "flagged": True}
    if categorical:
        pa_, pb = _distribution(a), _distribution(b)
        if pa_ is not None and pb is not None:
            keys = set(pa_) | set(pb)
            value = max(abs(pa_.get(k, 0.0) - pb.get(k, 0.0)) for k in keys)
            return {"metric": "linf", "value": round(value, 6), "threshold": LINF,
                    "flagged": value > LINF}
    if "min" not in a or isinstance(a.get("min"), str):
        return None
    value = js_on_shared_bins(a, b)
    return {"metric": "jensen_shannon", "value": round(value, 6), "threshold": JS,
            "flagged": value > JS}


def _lengths_drift(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    la, lb = a.get("lengths"), b.get("lengths")
    if not la or not lb or la.get("min") is None or lb.get("min") is None:
        return None
    value = js_on_shared_bins(la, lb)
    return {"metric": "jensen_shannon", "value": round(value, 6), "threshold": JS,
            "flagged": value > JS}


def _distribution(stats: dict[str, Any]) -> dict[str, float] | None:
    """Shares per value: exact counts, else the top values (the rest unaccounted)."""
    pairs = stats.get("value_counts") or [[t["value"], t["count"]] for t in stats["top_values"]]
    total = stats.get("values") or 0
    if not total:
        return None
    return {str(v): c / total for v, c in pairs}


def js_on_shared_bins(a: dict[str, Any], b: dict[str, Any]) -> float:
    edges = bin_edges(min(float(a["min"]), float(b["min"])), max(float(a["max"]), float(b["max"])))
    return jensen_shannon(_mass(a, edges), _mass(b, edges))


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
