"""Unit tests of etl/stats (the statistics the conversion pass gathers and the quality gate and
drift checks read), called directly on NumPy arrays and report dicts: no pipeline, no subprocess.
Expected values come from NumPy/SciPy computed independently of the accumulators."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.spatial import distance

from etl.stats import drift
from etl.stats.accumulators import CAPACITY, Categorical, Numeric, grid_edges, histogram, quantile_mass


def fed(dtype: str, *batches: np.ndarray) -> Numeric:
    acc = Numeric(dtype)
    for b in batches:
        acc.add(b)
    return acc


# ---- exact moments -------------------------------------------------------------------------
def test_float_moments_are_numpys_whatever_the_batching() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(1e6, 37.5, 30_001)  # a large mean: the naive sum-of-squares loses digits here
    x[[5, 17, 999]] = [np.nan, np.inf, -np.inf]
    x[[7, 8]] = 0.0
    finite = x[np.isfinite(x)]
    for acc in (fed("float64", x), fed("float64", x[:10], x[10:20_000], x[20_000:])):
        out = acc.to_json()
        assert out["values"] == finite.size == 29_998
        assert out["nan_or_inf"] == 3
        assert out["zeros"] == 2
        assert out["min"] == finite.min() and out["max"] == finite.max()
        assert out["mean"] == pytest.approx(finite.mean(), rel=1e-14)
        assert out["stddev"] == pytest.approx(finite.std(), rel=1e-10)
        assert out["sum"] == pytest.approx(finite.sum(), rel=1e-14)


def test_merge_equals_one_pass() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.integers(-50, 50, 4_000), rng.integers(0, 500, 7_000)
    one = fed("int64", np.concatenate([a, b]))
    left, right = fed("int64", a), fed("int64", b)
    left.merge(right)
    assert left.count == one.count == 11_000
    assert (left.min, left.max, left.sum) == (one.min, one.max, one.sum)
    assert left.mean == pytest.approx(one.mean, rel=1e-13)
    assert left.m2 == pytest.approx(one.m2, rel=1e-12)
    assert left.value_counts() == one.value_counts()  # exact below CAPACITY: order-independent


def test_merging_an_empty_accumulator_changes_nothing() -> None:
    acc = fed("float32", np.array([1.5, 2.5], np.float32))
    before = acc.to_json()
    acc.merge(Numeric("float32"))
    assert acc.to_json() == before
    assert before["values"] == 2 and before["mean"] == 2.0 and before["stddev"] == 0.5


def test_moments_beyond_float64_are_unknown_not_infinite() -> None:
    with np.errstate(over="ignore"):  # the sum overflows: that is the case under test
        out = fed("float64", np.array([1.7e308, 1.7e308, -1e308])).to_json()
    assert out["values"] == 3 and out["max"] == 1.7e308 and out["min"] == -1e308
    assert out["sum"] is None  # 1.7e308 + 1.7e308 overflows: None, never inf in strict JSON
    assert out["stddev"] is None
    # the range itself overflows (2.7e308): the bins still span it, ends exact, counts exact
    h = out["histogram"]
    assert h["edges"][0] == -1e308 and h["edges"][-1] == 1.7e308 and len(h["edges"]) == 21
    assert h["counts"] == [1] + [0] * 18 + [2] and h["exact"] is True
    assert drift.feature_drift(out, out, categorical=False)["value"] == 0.0


def test_an_empty_feature_reports_no_moments() -> None:
    out = Numeric("float64").to_json()
    assert out["values"] == 0
    assert out["min"] is None and out["max"] is None and out["mean"] is None
    assert out["stddev"] is None and out["histogram"] is None and out["quantiles"] == []


# ---- value counts --------------------------------------------------------------------------
def test_small_integers_are_counted_exactly_with_their_bars() -> None:
    pixels = np.random.default_rng(5).integers(0, 17, 50_000).astype(np.uint8)
    out = fed("uint8", pixels[:123], pixels[123:]).to_json()
    values, counts = np.unique(pixels, return_counts=True)
    assert out["value_counts_exact"] is True and out["distinct"] == 17
    assert out["value_counts"] == [[int(v), int(c)] for v, c in zip(values, counts, strict=True)]
    assert out["histogram"] == {"kind": "values", "values": values.tolist(),
                                "counts": counts.tolist(), "exact": True}
    top = sorted(zip(counts.tolist(), values.tolist(), strict=True), key=lambda p: (-p[0], p[1]))
    assert [(t["count"], t["value"]) for t in out["top_values"]] == top


def test_vocabulary_labels_the_top_values() -> None:
    out = fed("int64", np.array([0, 1, 1, 7])).to_json(vocabulary=("cat", "dog"))
    assert out["top_values"] == [{"value": 1, "count": 2, "label": "dog"},
                                 {"value": 0, "count": 1, "label": "cat"},
                                 {"value": 7, "count": 1, "label": "<out of vocabulary>"}]


def test_float_value_counts_keep_the_exact_float() -> None:
    x = np.array([0.1, 0.1, 0.30000000000000004, -0.0, 2.5], np.float64)
    pairs, exact, distinct = fed("float64", x).value_counts()
    assert exact and distinct == 4
    assert pairs == [(0.1, 2), (-0.0, 1), (0.30000000000000004, 1), (2.5, 1)]


def test_high_cardinality_is_estimated_and_says_so() -> None:
    rng = np.random.default_rng(6)
    x = rng.integers(0, 1 << 40, 60_000)
    x[::10] = 424242  # one value with a tenth of the mass
    out = fed("int64", x).to_json()
    true_distinct = np.unique(x).size
    assert out["value_counts_exact"] is False and "value_counts" not in out
    assert abs(out["distinct"] - true_distinct) / true_distinct < 0.1  # KMV, k=1024: ~3% error
    assert out["top_values"][0]["value"] == 424242
    top = out["top_values"][0]["count"]
    assert 6_000 - x.size / (CAPACITY + 1) <= top <= 6_000  # Misra-Gries: never over, bounded under
    # only values clearly above the sketch's error bound are shown as frequent
    assert len(out["top_values"]) == 1
    assert out["histogram"]["exact"] is False


def test_quantiles_are_within_the_sketchs_rank_error() -> None:
    x = np.random.default_rng(7).uniform(0, 1, 200_000)
    q = fed("float64", x).quantile_points()
    assert len(q) == 101 and q[0] == x.min() and q[-1] == x.max()
    ranks = np.searchsorted(np.sort(x), q[1:-1]) / x.size
    assert np.abs(ranks - np.arange(1, 100) / 100).max() < 0.002  # eps 0.001


def test_categorical_counts_strings_and_shows_binary_as_hex() -> None:
    acc = Categorical()
    acc.add(np.array([b"a", b"bb", b"a"], dtype=object))
    other = Categorical()
    other.add(np.array([b"\xff\xfe", b"a" * 100], dtype=object))
    acc.merge(other)
    out = acc.to_json()
    assert out["values"] == 5 and out["distinct"] == 4 and out["value_counts_exact"] is True
    assert out["top_values"][0] == {"value": "a", "count": 2}
    assert ["0xfffe", 1] in out["value_counts"]
    assert ["a" * 77 + "...", 1] in out["value_counts"]  # long text cut to 80 characters
    assert out["byte_length"] == {"min": 1, "max": 100, "mean": 21.2}  # 106 bytes / 5


# ---- histograms ----------------------------------------------------------------------------
def test_values_on_a_grid_get_bins_that_follow_it() -> None:
    petal = np.round(np.arange(10, 70) * 0.1, 1)  # iris-like 0.1 cm steps, 60 grid points
    edges = grid_edges(petal)
    assert edges is not None and len(edges) == 21  # 3 grid points per bin
    assert edges[0] == pytest.approx(0.95) and edges[-1] == pytest.approx(6.95)
    counts = np.histogram(petal, bins=np.array(edges))[0]
    assert counts.tolist() == [3] * 20  # no empty or doubled bin
    assert grid_edges(np.array([0.0, 1.0, 2.7])) is None  # not multiples of one step


def test_exact_histogram_of_many_integers_is_binned_not_barred() -> None:
    x = np.arange(0, 1000)
    out = fed("int64", x).to_json()
    h = out["histogram"]
    assert h["kind"] == "bins" and h["exact"] is True and sum(h["counts"]) == 1000
    assert histogram({"values": 0}, integer=True) is None


def test_quantile_mass_spreads_each_interval_evenly() -> None:
    mass = quantile_mass([0.0, 1.0, 2.0, 2.0, 4.0], [0.0, 1.0, 2.0, 3.0, 4.0])
    assert mass.tolist() == [0.25, 0.25, 0.25 + 0.125, 0.125]  # the point mass at 2: bin [2, 3)
    assert mass.sum() == 1.0


# ---- drift ---------------------------------------------------------------------------------
def test_jensen_shannon_is_scipys_squared_distance() -> None:
    rng = np.random.default_rng(8)
    p, q = rng.uniform(0, 1, 20), rng.uniform(0, 1, 20)
    q[3] = 0.0
    assert drift.jensen_shannon(p, q) == pytest.approx(distance.jensenshannon(p, q, base=2) ** 2,
                                                       rel=1e-12)
    assert drift.jensen_shannon(p, p) == 0.0
    assert drift.jensen_shannon(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 1.0


def split_entry(values: np.ndarray, dtype: str = "int64") -> dict[str, Any]:
    return fed(dtype, values).to_json()


def test_linf_is_the_largest_change_of_a_values_share() -> None:
    a = split_entry(np.array([0] * 50 + [1] * 50))
    b = split_entry(np.array([0] * 30 + [1] * 60 + [2] * 10))
    assert drift.linf(a, b) == ("linf", pytest.approx(0.2))
    found = drift.feature_drift(a, b, categorical=True)
    assert found == {"metric": "linf", "value": 0.2, "threshold": 0.1, "flagged": True}
    assert drift.feature_drift(a, a, categorical=True)["flagged"] is False


def test_numbers_that_turn_to_nan_drift() -> None:
    x = np.random.default_rng(9).normal(0, 1, 5_000)
    y = x.copy()
    y[:2_000] = np.nan
    same = drift.feature_drift(split_entry(x, "float64"), split_entry(x, "float64"), False)
    assert same == {"metric": "jensen_shannon", "value": 0.0, "threshold": 0.1, "flagged": False}
    gone = drift.feature_drift(split_entry(x, "float64"), split_entry(y, "float64"), False)
    assert gone["metric"] == "jensen_shannon" and gone["flagged"] is True
    # 40% of y is one extra bin x never fills: about JS((p, 0), (0.6 p, 0.4)) = 0.2365 (the
    # finite parts differ a little: y keeps 3,000 of x's values, both binned from quantiles)
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.3, 0.3, 0.4])
    assert gone["value"] == pytest.approx(drift.jensen_shannon(p, q), abs=0.005)


def report(records: dict[str, int], features: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"splits": {s: {"num_records": n} for s, n in records.items()},
            "features": {name: {"splits": per} for name, per in features.items()}}


def test_compare_names_every_finding() -> None:
    label_a = split_entry(np.array([0] * 50 + [1] * 50))
    label_b = split_entry(np.array([1] * 100))
    current = report({"train": 100, "test": 20},
                     {"label": {"train": label_a}, "new": {"train": label_a}})
    current["features"]["label"]["categorical"] = True
    against = report({"train": 80, "valid": 5},
                     {"label": {"train": label_b}, "old": {"train": label_b}})
    out = drift.compare(current, against, "gs://b/yesterday")
    assert out["against"] == "gs://b/yesterday" and out["flagged"] is True
    assert out["findings"] == [
        "split 'test' exists only in this output",
        "split 'train': 100 records, 80 in the other output (+25.0%)",
        "split 'valid' exists only in the other output",
        "feature 'label', split 'train': linf 0.500 > 0.1",
        "feature 'new' is not in the other output",
        "feature 'old' is only in the other output",
    ]
    assert out["splits"]["train"] == {"num_records": 100, "against": 80,
                                      "relative_change": 0.25, "flagged": True}
    assert out["features"]["label"]["splits"]["train"]["value"] == 0.5


def test_a_count_change_within_ten_percent_is_not_flagged() -> None:
    entry = split_entry(np.arange(10))
    out = drift.compare(report({"train": 100}, {"x": {"train": entry}}),
                        report({"train": 91}, {"x": {"train": entry}}), "old")
    assert out["flagged"] is False and out["findings"] == []
    assert out["splits"]["train"]["relative_change"] == round(9 / 91, 6)
    assert math.isclose(out["features"]["x"]["splits"]["train"]["value"], 0.0)
