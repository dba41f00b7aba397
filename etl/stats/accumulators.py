"""Streaming statistics of one split: bounded-memory accumulators fed batch by batch.

Exact in one pass: record and value counts, missing, min, max, sum, mean, standard deviation
(Chan's parallel update of the second moment), zeros, NaN. Bounded structures for the rest,
from tfx_bsl's C++ sketches: top values (MisraGriesSketch), distinct count (KmvSketch) and
quantiles (QuantilesSketch). While a feature has at most `CAPACITY` distinct values the
Misra-Gries counts are exact (no counter is ever decremented), so the value counts, top values
and histograms of small-cardinality data (labels, vocabularies, 0..16 pixels) are exact; the
report says which numbers are exact (`value_counts_exact`). Small integer dtypes (8/16 bit,
bool: pixels) are counted exactly with a fixed-size bincount instead, which is cheaper than a
sketch on millions of pixels.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pyarrow as pa

from etl.contract.images import is_image
from etl.contract.schema import Feature, Schema

CAPACITY = 1024  # counters per sketch: exact value counts below this many distinct values
TOP_K = 20  # top values kept in the report
QUANTILES = 100  # quantile intervals kept (101 boundaries)
FINE_QUANTILES = 2000  # quantile intervals an estimated histogram is drawn from
HIST_BINS = 20  # equal-width bins of numeric histograms
BARS_MAX = 40  # at most this many distinct integers are drawn one bar per value
SAMPLE_IMAGES = 16  # first images kept per split and image feature (and their labels)
GRID_BINS = HIST_BINS  # at most this many bins when values lie on a regular grid (e.g. 0.1 steps)
LABEL_WORDS = ("label", "labels", "class", "target", "category", "y")  # by preference
_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")
_SMALL_INTS = {"bool": (0, 1), "int8": (-128, 127), "uint8": (0, 255),
               "int16": (-32768, 32767), "uint16": (0, 65535)}


def _sketches() -> Any:
    from tfx_bsl import sketches  # noqa: PLC0415 - C++ extension, only when a report is made

    return sketches


def component_names(f: Feature) -> list[str]:
    """Small fixed vectors (e.g. four packed CSV columns) get statistics per component, named
    after their source columns when packed."""
    if f.is_sequence or not f.fixed or len(f.shape) != 1 or f.dtype == "bytes" or is_image(f):
        return []
    n = f.shape[0]
    if not 2 <= n <= 32:
        return []
    if len(f.sources) == n:
        return list(f.sources)
    return [f"{f.name}[{i}]" for i in range(n)]


class Numeric:
    """Exact moments and extremes plus bounded value counts and quantiles of a number stream."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.is_float = dtype.startswith("float")
        self.count = 0
        self.nan = 0
        self.zeros = 0
        self.min = math.inf
        self.max = -math.inf
        self.sum = 0.0
        self.mean = 0.0
        self.m2 = 0.0
        self.bins: np.ndarray | None = None
        self.offset = 0
        if dtype in _SMALL_INTS:
            lo, hi = _SMALL_INTS[dtype]
            self.offset = lo
            self.bins = np.zeros(hi - lo + 1, np.int64)
            self.mg = self.kmv = None
        else:
            sk = _sketches()
            self.mg = sk.MisraGriesSketch(CAPACITY)
            self.kmv = sk.KmvSketch(CAPACITY)
        self.quantiles = _sketches().QuantilesSketch(0.001, 1 << 32, 1)

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values).reshape(-1)
        if not values.size:
            return
        if self.is_float:
            finite = np.isfinite(values)
            self.nan += int(values.size - np.count_nonzero(finite))  # NaN and +-inf
            values = values[finite] if not finite.all() else values
            if not values.size:
                return
        v64 = values.astype(np.float64)
        n = int(v64.size)
        self.zeros += int(np.count_nonzero(v64 == 0))
        self.min = min(self.min, float(v64.min()))
        self.max = max(self.max, float(v64.max()))
        total = float(v64.sum())
        mean_b = total / n
        m2_b = float(np.square(v64 - mean_b).sum())
        delta = mean_b - self.mean
        both = self.count + n
        self.m2 += m2_b + delta * delta * self.count * n / both
        self.mean += delta * n / both
        self.count = both
        self.sum += total
        if self.bins is not None:
            self.bins += np.bincount(values.astype(np.int64) - self.offset,
                                     minlength=self.bins.size)
        else:
            keys = (v64.view(np.int64) if self.is_float else values.astype(np.int64))
            arr = pa.array(keys)
            self.mg.AddValues(arr)
            self.kmv.AddValues(arr)
        self.quantiles.AddValues(pa.array(v64))

    def merge(self, other: Numeric) -> None:
        """Add `other`'s values (the same dtype): exact parts combine exactly (Chan's update of
        the second moment), the sketches merge (order-independent while they are exact)."""
        if not other.count and not other.nan:
            return
        self.nan += other.nan
        if other.count:
            self.zeros += other.zeros
            self.min = min(self.min, other.min)
            self.max = max(self.max, other.max)
            both = self.count + other.count
            delta = other.mean - self.mean
            self.m2 += other.m2 + delta * delta * self.count * other.count / both
            self.mean += delta * other.count / both
            self.count = both
            self.sum += other.sum
            if self.bins is not None:
                assert other.bins is not None
                self.bins += other.bins
            else:
                self.mg.Merge(other.mg)
                self.kmv.Merge(other.kmv)
            self.quantiles.Merge(other.quantiles)

    # ---- results -----------------------------------------------------------------------
    def value_counts(self) -> tuple[list[tuple[float | int, int]], bool, int]:
        """(value, count) pairs by descending count, whether they are exact, distinct values."""
        if self.bins is not None:
            nz = np.flatnonzero(self.bins)
            pairs = [(int(i) + self.offset, int(self.bins[i])) for i in nz]
            pairs.sort(key=lambda p: (-p[1], p[0]))
            return pairs, True, len(pairs)
        distinct = int(self.kmv.Estimate()) if self.count else 0
        est = self.mg.Estimate().to_pylist() if self.count else []
        pairs = []
        for item in est:
            key = int(item["values"])
            value: float | int = (float(np.array(key, np.int64).view(np.float64))
                                  if self.is_float else key)
            pairs.append((value, int(item["counts"])))
        pairs.sort(key=lambda p: (-p[1], p[0]))
        exact = distinct < CAPACITY and len(pairs) == distinct
        return pairs, exact, distinct

    def quantile_points(self, intervals: int = QUANTILES) -> list[float]:
        if not self.count:
            return []
        q = self.quantiles.GetQuantiles(intervals).to_pylist()[0]
        return [float(x) for x in q]

    def to_json(self, vocabulary: tuple[str, ...] = ()) -> dict[str, Any]:
        pairs, exact, distinct = self.value_counts()
        std = math.sqrt(self.m2 / self.count) if self.count else None
        out: dict[str, Any] = {
            "values": self.count,
            "min": _num(self.min) if self.count else None,
            "max": _num(self.max) if self.count else None,
            # values near float64's limit overflow a sum or a square: such a moment is None
            # (unknown), never inf, which stats.json (strict JSON) cannot hold
            "sum": _finite(self.sum),
            "mean": _finite(self.mean) if self.count else None,
            "stddev": _finite(std),
            "zeros": self.zeros,
            "distinct": distinct,
            "value_counts_exact": exact,
        }
        if self.is_float:
            out["nan_or_inf"] = self.nan
        out["top_values"] = [_top(v, c, vocabulary) for v, c in _clear(pairs, exact, self.count)]
        if exact:
            out["value_counts"] = [[v, c] for v, c in sorted(pairs)]
        out["quantiles"] = self.quantile_points()
        # finer quantiles for the picture than the JSON keeps: the tails stay thin
        fine = {**out, "quantiles": self.quantile_points(FINE_QUANTILES)} if not exact else out
        out["histogram"] = histogram(fine, integer=not self.is_float)
        return out


def _clear(pairs: list[Any], exact: bool, total: int) -> list[Any]:
    """The top values worth showing: all of the TOP_K when the counts are exact; else only
    values whose estimated count is well above the sketch's error bound (total / (CAPACITY
    + 1)), so high-cardinality noise is not presented as frequent values."""
    if exact:
        return pairs[:TOP_K]
    bound = total / (CAPACITY + 1)
    return [p for p in pairs if p[1] > 2 * bound][:TOP_K]


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)


def _top(value: float | int, count: int, vocabulary: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"value": value, "count": count}
    if vocabulary:
        i = int(value)
        out["label"] = vocabulary[i] if 0 <= i < len(vocabulary) else "<out of vocabulary>"
    return out


def histogram(stats: dict[str, Any], integer: bool) -> dict[str, Any] | None:
    """Bars per value for few distinct integers, else HIST_BINS equal-width bins over
    [min, max]; exact from exact value counts, else estimated from the quantiles."""
    if not stats.get("values"):
        return None
    counts = stats.get("value_counts")
    if counts is not None and integer and len(counts) <= BARS_MAX:
        return {"kind": "values", "values": [v for v, _ in counts],
                "counts": [c for _, c in counts], "exact": True}
    lo, hi = float(stats["min"]), float(stats["max"])
    edges = bin_edges(lo, hi)
    if counts is not None:
        values = np.array([v for v, _ in counts], np.float64)
        weights = np.array([c for _, c in counts], np.float64)
        aligned = grid_edges(values)
        out = {"kind": "bins", "edges": aligned or edges, "counts": [int(c) for c in bin_mass(
            values, weights, aligned or edges)], "exact": True}
        if aligned:
            out["aligned"] = True  # every value sits inside its bin, none on an edge
        return out
    mass = quantile_mass(stats["quantiles"], edges) * stats["values"]
    return {"kind": "bins", "edges": edges, "counts": [round(float(m), 1) for m in mass],
            "exact": False}


def grid_edges(values: np.ndarray, most: int = GRID_BINS) -> list[float] | None:
    """Bins that follow the data's own grid when its distinct values are multiples of one
    step (measurements to 0.1 cm, integers): each bin holds the same whole number of grid
    points, centred, so no bin is empty or doubled by aliasing (20 equal-width bins over
    iris's 0.1 steps draw a comb). None when the values are not on a regular grid."""
    v = np.unique(values)
    if v.size < 3:
        return None
    diffs = np.diff(v)
    ratio = diffs / diffs.min()
    steps = np.rint(ratio)
    if diffs.min() <= 0 or np.abs(ratio - steps).max() > 0.02:
        return None
    points = int(steps.sum()) + 1
    if points > 1_000_000:
        return None
    step = (v[-1] - v[0]) / (points - 1)  # the average: float32 rounding evens out
    per_bin = math.ceil(points / most)
    bins = math.ceil(points / per_bin)
    start = v[0] - step / 2
    return [float(start + k * per_bin * step) for k in range(bins + 1)]


def bin_edges(lo: float, hi: float, bins: int = HIST_BINS) -> list[float]:
    if hi <= lo:
        return [lo, lo + 1.0] if bins else [lo]
    if not math.isfinite(hi - lo):  # a range wider than float64 holds: halve, space, double
        return [float(x) * 2 for x in np.linspace(lo / 2, hi / 2, bins + 1)]
    return [float(x) for x in np.linspace(lo, hi, bins + 1)]


def bin_mass(values: np.ndarray, weights: np.ndarray, edges: list[float]) -> np.ndarray:
    """Weights per bin; the last bin includes its right edge (numpy.histogram's rule)."""
    return np.histogram(values, bins=np.array(edges), weights=weights)[0]


def quantile_mass(quantiles: list[float], edges: list[float]) -> np.ndarray:
    """Fractions per bin from quantile boundaries: each of the intervals between consecutive
    quantiles holds an equal share, spread uniformly over its extent (all of it in one bin
    when both ends are equal: a point mass)."""
    q = np.array(quantiles, np.float64)
    e = np.array(edges, np.float64)
    mass = np.zeros(e.size - 1)
    if q.size < 2:
        return mass
    share = 1.0 / (q.size - 1)
    for a, b in zip(q[:-1], q[1:], strict=True):
        if b <= a:
            i = min(max(int(np.searchsorted(e, a, side="right")) - 1, 0), mass.size - 1)
            mass[i] += share
            continue
        overlap = np.clip(np.minimum(e[1:], b) - np.maximum(e[:-1], a), 0.0, None)
        total = overlap.sum()
        if total > 0:
            mass += share * overlap / total
    return mass


class Categorical:
    """Top values and distinct count of bytes (string) values."""

    def __init__(self) -> None:
        sk = _sketches()
        self.count = 0
        self.mg = sk.MisraGriesSketch(CAPACITY)
        self.kmv = sk.KmvSketch(CAPACITY)
        self.lengths = Numeric("int64")

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=object).reshape(-1)
        if not values.size:
            return
        self.count += int(values.size)
        arr = pa.array(list(values), pa.large_binary())
        self.mg.AddValues(arr)
        self.kmv.AddValues(arr)
        self.lengths.add(pa.compute.binary_length(arr).to_numpy(zero_copy_only=False))

    def merge(self, other: Categorical) -> None:
        if not other.count:
            return
        self.count += other.count
        self.mg.Merge(other.mg)
        self.kmv.Merge(other.kmv)
        self.lengths.merge(other.lengths)

    def to_json(self) -> dict[str, Any]:
        distinct = int(self.kmv.Estimate()) if self.count else 0
        est = self.mg.Estimate().to_pylist() if self.count else []
        pairs = sorted(((item["values"], int(item["counts"])) for item in est),
                       key=lambda p: (-p[1], p[0]))
        exact = distinct < CAPACITY and len(pairs) == distinct
        out: dict[str, Any] = {"values": self.count, "distinct": distinct,
                               "value_counts_exact": exact,
                               "top_values": [{"value": _text(v), "count": c}
                                              for v, c in _clear(pairs, exact, self.count)]}
        if exact:
            out["value_counts"] = [[_text(v), c] for v, c in sorted(pairs)]
        lengths = self.lengths.to_json()
        out["byte_length"] = {k: lengths[k] for k in ("min", "max", "mean")}
        return out


def _text(b: bytes) -> str:
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        text = "0x" + b[:32].hex() + ("..." if len(b) > 32 else "")
    return text if len(text) <= 80 else text[:77] + "..."


class FeatureStats:
    """Everything gathered about one feature in one split."""

    def __init__(self, f: Feature):
        self.f = f
        self.records = 0
        self.missing: int | None = 0
        self.image = is_image(f)
        self.values: Numeric | Categorical = (Categorical() if f.dtype == "bytes"
                                              and f.encoding == "values" else Numeric(f.dtype))
        self.names = component_names(f)
        self.components = [Numeric(f.dtype) for _ in self.names]
        self.variable = f.is_sequence or not f.fixed
        self.lengths = Numeric("int64") if self.variable else None
        self.samples: list[np.ndarray] = []
        # the first values of a scalar that may label the sample images (see label_feature)
        self.head: list[Any] | None = [] if is_scalar_candidate(f) else None

    def add(self, value: Any, n: int, present: np.ndarray | None) -> None:
        """`value`: the decoded batch (etl.contract.schema decode); `present`: per-record presence of
        an optional fixed feature (its default hides the gaps after decoding)."""
        import tensorflow as tf  # noqa: PLC0415

        self.records += n
        if isinstance(value, tf.SparseTensor):
            value = tf.RaggedTensor.from_sparse(value)
        if isinstance(value, tf.RaggedTensor):
            lengths = value.row_lengths().numpy()
            flat = value.flat_values.numpy()
            assert self.lengths is not None
            self.lengths.add(lengths)
            if self.missing is not None:
                self.missing += int(np.count_nonzero(lengths == 0))
            self.values.add(flat)
            return
        arr = value.numpy()
        if present is not None and self.missing is not None:
            self.missing += int(n - np.count_nonzero(present))
        if self.image and len(self.samples) < SAMPLE_IMAGES:
            self.samples.extend(arr[: SAMPLE_IMAGES - len(self.samples)])
        if self.head is not None and len(self.head) < SAMPLE_IMAGES:
            self.head.extend(arr.reshape(n)[: SAMPLE_IMAGES - len(self.head)].tolist())
        self.values.add(arr)
        if self.components:
            rows = arr.reshape(n, -1)
            for i, acc in enumerate(self.components):
                acc.add(rows[:, i])

    def add_arrays(self, value: Any, n: int, present: np.ndarray | None) -> None:
        """The same as `add` for a batch decoded without TensorFlow (etl.read.decode): an
        array [n, *shape], or a list of n per-record arrays (ragged and sequence features;
        a sequence with ragged steps: a list of per-step arrays). Feeds the same numbers in
        the same order as `add`; keeps no sample images (a run's report reads those from the
        first shard)."""
        self.records += n
        if isinstance(value, list):
            lengths = np.fromiter((len(v) for v in value), np.int64, n)
            parts = [np.asarray(v).reshape(-1) if not isinstance(v, list)
                     else np.concatenate([np.asarray(s).reshape(-1) for s in v]) if v
                     else np.zeros(0) for v in value]
            parts = [p for p in parts if p.size]
            assert self.lengths is not None
            self.lengths.add(lengths)
            if self.missing is not None:
                self.missing += int(np.count_nonzero(lengths == 0))
            if parts:
                self.values.add(np.concatenate(parts))
            return
        arr = np.asarray(value)
        if present is not None and self.missing is not None:
            self.missing += int(n - np.count_nonzero(present))
        self.values.add(arr)
        if self.components:
            rows = arr.reshape(n, -1)
            for i, acc in enumerate(self.components):
                acc.add(rows[:, i])

    def add_storage(self, col: pa.Array, n: int) -> None:
        """The same as `add` for the encoder's stored lists of `n` records (a Feature with
        `storable`: values or raw encoding of an Example), without serializing and decoding:
        a fixed feature is always present in an encoded record (a missing optional one was
        filled with its default), a variable-length one has its list's length."""
        f = self.f
        offsets = np.frombuffer(col.buffers()[1], np.int64, n + 1, col.offset * 8)
        first, last = int(offsets[0]), int(offsets[-1])
        if f.encoding == "raw":
            blobs = col.values
            wide = pa.types.is_large_binary(blobs.type)
            ends = np.frombuffer(blobs.buffers()[1], np.int64 if wide else np.int32,
                                 len(blobs) + 1, blobs.offset * (8 if wide else 4))
            data = np.frombuffer(blobs.buffers()[2], np.uint8)[int(ends[first]):int(ends[last])]
            arr = data.view(np.dtype(f.dtype).newbyteorder("<")).astype(f.numpy_dtype)
            self.add_arrays(arr.reshape(n, *f.shape), n, None)
            return
        values = col.values.slice(first, last - first)
        flat = (values.to_numpy(zero_copy_only=False) if f.storage == "bytes"
                else values.to_numpy().astype(f.numpy_dtype, copy=False))
        if f.fixed:
            self.add_arrays(flat.reshape(n, *f.shape), n, None)
            return
        self.records += n
        lengths = np.diff(offsets) // max(f.value_count, 1)
        assert self.lengths is not None
        self.lengths.add(lengths)
        if self.missing is not None:
            self.missing += int(np.count_nonzero(lengths == 0))
        self.values.add(flat)

    def merge(self, other: FeatureStats) -> None:
        """Add `other`'s records (another part of the same split); sample images and the
        label head stay this one's."""
        self.records += other.records
        if self.missing is not None and other.missing is not None:
            self.missing += other.missing
        self.values.merge(other.values)  # type: ignore[arg-type]
        for mine, theirs in zip(self.components, other.components, strict=True):
            mine.merge(theirs)
        if self.lengths is not None and other.lengths is not None:
            self.lengths.merge(other.lengths)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self.records, "missing": self.missing}
        if isinstance(self.values, Categorical):
            out.update(self.values.to_json())
        else:
            out.update(self.values.to_json(self.f.vocabulary))
        if self.components:
            out["components"] = {name: acc.to_json() for name, acc in
                                 zip(self.names, self.components, strict=True)}
        if self.lengths is not None:
            lengths = self.lengths.to_json()
            out["lengths"] = {k: lengths[k] for k in ("min", "max", "mean", "stddev", "quantiles",
                                                      "histogram", "value_counts_exact")}
            if "value_counts" in lengths:
                out["lengths"]["value_counts"] = lengths["value_counts"]
        return out


class SplitStats:
    """One split's accumulators, fed batches of serialized records."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self.records = 0
        self.features = {f.name: FeatureStats(f) for f in schema.features}
        self._optional = [f.name for f in schema.context
                          if not f.required and f.fixed and schema.kind == "example"]
        for f in schema.features:
            if not f.required and f.fixed and schema.kind != "example":
                self.features[f.name].missing = None  # not counted (see the report's notes)

    def add_batch(self, records: list[bytes]) -> None:
        import tensorflow as tf  # noqa: PLC0415

        n = len(records)
        decoded = self.schema.parse_and_decode(tf.constant(records, tf.string))
        present = self._presence(records) if self._optional else {}
        self.records += n
        for name, acc in self.features.items():
            acc.add(decoded[name], n, present.get(name))

    def storable(self) -> bool:
        """The encoder's stored lists say what a decode would give (add_storage): Examples
        whose features are values (fixed, or ragged in the outer dimension only) or raw."""
        return self.schema.kind == "example" and all(
            f.encoding in ("values", "raw") and all(d >= 0 for d in f.shape[1:])
            and f.representation != "sparse" for f in self.schema.features)

    def add_storage(self, storage: dict[str, pa.Array], rows: np.ndarray) -> None:
        """The records of `rows` of an encoded batch (etl.contract.codec.EncodedBatch.storage),
        when `storable()`; the numbers `add_batch` gives for those records serialized."""
        n = len(rows)
        take = pa.array(rows)
        self.records += n
        for name, acc in self.features.items():
            col = storage[name]
            acc.add_storage(col if len(col) == n else col.take(take), n)

    def add_decoded(self, decoded: dict[str, Any], records: list[bytes]) -> None:
        """A batch decoded without TensorFlow (etl.read.decode.RecordDecoder) of `records`."""
        n = len(records)
        present = self._presence(records) if self._optional else {}
        self.records += n
        for name, acc in self.features.items():
            acc.add_arrays(decoded[name], n, present.get(name))

    def merge(self, other: SplitStats) -> SplitStats:
        """Add another part of the same split (mergeable: a Beam CombineFn's accumulator)."""
        self.records += other.records
        for name, acc in self.features.items():
            acc.merge(other.features[name])
        return self

    def _presence(self, records: list[bytes]) -> dict[str, np.ndarray]:
        """Which records carry each optional fixed feature: tfx_bsl's schema-less decoder
        gives a null where a feature is absent."""
        from tfx_bsl.coders import example_coder  # noqa: PLC0415

        batch = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(records)
        out = {}
        for name in self._optional:
            i = batch.schema.get_field_index(name)
            out[name] = (np.zeros(len(records), bool) if i < 0
                         else batch.column(i).is_valid().to_numpy(zero_copy_only=False))
        return out


# ---- which feature labels the sample images ---------------------------------------------------
def is_scalar_candidate(f: Feature) -> bool:
    """One integer or string value per record: what a class label looks like."""
    return (not f.is_sequence and f.shape == () and f.encoding == "values"
            and (f.dtype in _INTS or f.dtype == "bytes"))


def _label_rank(name: str) -> int | None:
    """Position in LABEL_WORDS of the first word of `name` that names a label ("label",
    "class_id", "targetClass"); None when no word does."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    ranks = [LABEL_WORDS.index(w) for w in words if w in LABEL_WORDS]
    return min(ranks) if ranks else None


def label_feature(features: list[Feature], categorical: dict[str, bool]) -> Feature | None:
    """The feature whose value captions each sample image, decided from the schema (and, for
    the last rule, the statistics): a scalar with a vocabulary (the one named most like a
    label first); else a scalar integer or string named like a label (LABEL_WORDS order);
    else the only low-cardinality scalar integer or string feature; else none."""
    scalars = [f for f in features if is_scalar_candidate(f)]

    def by_name(f: Feature) -> tuple[int, int]:
        rank = _label_rank(f.name)
        return (len(LABEL_WORDS) if rank is None else rank, features.index(f))

    with_vocab = [f for f in scalars if f.vocabulary]
    if with_vocab:
        return min(with_vocab, key=by_name)
    named = [f for f in scalars if _label_rank(f.name) is not None]
    if named:
        return min(named, key=by_name)
    few = [f for f in scalars if categorical.get(f.name)]
    return few[0] if len(few) == 1 else None


def caption(value: Any, f: Feature) -> str:
    """A label value as a person reads it: the vocabulary's text, else the value."""
    if f.vocabulary:
        i = int(value)
        return f.vocabulary[i] if 0 <= i < len(f.vocabulary) else f"{i} (out of vocabulary)"
    if isinstance(value, bytes):
        return _text(value)
    return str(value)
