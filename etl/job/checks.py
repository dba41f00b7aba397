"""The job file's `checks:` block: quality gates a span must pass before it is published.

```yaml
checks:
  block:                      # a failed check stops the span: quarantined, exit 6
    records: {min: 1000, max: 5000000, max_change: 0.2}   # per split; change vs previous span
    rejected: {max_fraction: 0.01, not_in_vocabulary: 0.001}  # overall, or per reason code
    drift: 0.2                # default drift threshold of every feature
    features:
      label: {drift: 0.1, distinct: {min: 2}}
      x: {min: 0, max: 100, missing: 0.05, nan: 0.0, mean: [10, 20], drift: 0.1}
  warn:                       # printed and recorded; the span publishes
    features:
      x: {drift: 0.05}
```

Parsed here, with the rest of the job file (etl.job.config), into flat `Check`s that keep the
1-based line of their key, so a mistake found later (a feature the schema lacks) still names
file:line. Evaluating them is etl.quality's (a layer above: it needs the report's statistics).

A block no data could pass, or one that would silently check nothing, is refused here rather
than found out on a bad day: a NaN or infinite threshold (every comparison with NaN is false:
`drift: .nan` turned the check off), a fraction outside [0, 1], `min` above `max`, a numeric
check (min, max, mean) of a string feature (strings have no such statistics: it measured
nothing and passed), `nan` of a feature that cannot hold NaN (not a float).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from etl.base.errors import REASONS, ConfigError

LEVELS = ("block", "warn")
LEVEL_KEYS = ("records", "rejected", "drift", "features")
RECORD_CHECKS = ("min", "max", "max_change")
FEATURE_CHECKS = ("min", "max", "missing", "nan", "mean", "drift", "distinct")
DISTINCT_CHECKS = ("min", "max")
ALL_FEATURES = "*"  # the feature of a level's default `drift:`
Lines = dict[tuple[str, ...], int]


@dataclass(frozen=True)
class Check:
    """One threshold: `kind` is `records.min`, `rejected.max_fraction`, `rejected.<code>`, or a
    feature check (`min`, `max`, `missing`, `nan`, `mean`, `drift`, `distinct.min`,
    `distinct.max`) of `feature` (ALL_FEATURES for a level's default drift)."""

    level: str
    kind: str
    threshold: Any  # a number; (low, high) for mean
    feature: str | None = None
    line: int | None = None

    @property
    def name(self) -> str:
        """As written in the job file: `records.min`, `features.x.mean`, `drift`."""
        if self.feature is None:
            return self.kind
        if self.feature == ALL_FEATURES:
            return self.kind
        return f"features.{self.feature}.{self.kind}"


@dataclass(frozen=True)
class Checks:
    path: str  # the job file, for messages
    checks: tuple[Check, ...]

    def level(self, level: str) -> list[Check]:
        return [c for c in self.checks if c.level == level]


def key_lines(text: str) -> Lines:
    """1-based line of every key under `checks:` (path of keys -> line), read from the YAML
    node graph (the file was already accepted by etl.base.yaml_load)."""
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError:
        return {}
    lines: Lines = {}

    def walk(node: Any, path: tuple[str, ...], depth: int) -> None:
        if not isinstance(node, yaml.MappingNode) or depth > 5:
            return
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                here = (*path, str(key.value))
                lines.setdefault(here, key.start_mark.line + 1)
                walk(value, here, depth + 1)

    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if isinstance(key, yaml.ScalarNode) and key.value == "checks":
                lines[("checks",)] = key.start_mark.line + 1
                walk(value, ("checks",), 1)
    return lines


class _Reader:
    """Reads a `checks:` block: its ConfigErrors name `path:line` (the deepest key with a
    known line) and the keys."""

    def __init__(self, path: str, lines: Lines) -> None:
        self.path = path
        self.lines = lines

    def where(self, keys: tuple[str, ...]) -> str:
        for n in range(len(keys), 0, -1):
            if keys[:n] in self.lines:
                return f"{self.path}:{self.lines[keys[:n]]}"
        return self.path

    def fail(self, keys: tuple[str, ...], what: str) -> ConfigError:
        return ConfigError(f"{self.where(keys)}: {'.'.join(keys)} {what}")

    def mapping(self, value: Any, keys: tuple[str, ...], allowed: tuple[str, ...] | None,
                hint: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(keys, f"must be a mapping ({hint}), got {value!r}")
        for k in value:
            if allowed is not None and k not in allowed:
                raise ConfigError(f"{self.where((*keys, str(k)))}: unknown check {k!r} in "
                                  f"{'.'.join(keys)}; allowed: {', '.join(allowed)}")
        return value

    def number(self, value: Any, keys: tuple[str, ...], lo: float | None = None,
               hi: float | None = None, integer: bool = False) -> float | int:
        kind = "a whole number" if integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            raise self.fail(keys, f"must be {kind}, got {value!r}")
        if not math.isfinite(value):  # NaN compares false with everything: a check turned off
            raise self.fail(keys, f"must be a finite number, got {value!r}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = f"within [{lo:g}, {hi:g}]" if hi is not None else f"at least {lo:g}"
            raise self.fail(keys, f"must be {span}, got {value!r}")
        return value


def parse_checks(doc: Any, path: str, lines: Lines | None = None) -> Checks | None:
    """`checks:` of a job document as Checks; None when the job has none. A ConfigError names
    `path:line` and the key for an unknown check, a threshold of the wrong type or range."""
    if doc is None:
        return None
    r = _Reader(path, lines or {})
    out: list[Check] = []
    top = r.mapping(doc, ("checks",), LEVELS, "block: and/or warn:")
    for level, body in top.items():
        keys = ("checks", level)
        body = r.mapping(body, keys, LEVEL_KEYS, "records, rejected, drift, features")
        for group, value in body.items():
            out.extend(_group(r, level, group, value, (*keys, group)))
    return Checks(path, tuple(out))


def _group(r: _Reader, level: str, group: str, value: Any,
           gkeys: tuple[str, ...]) -> list[Check]:
    """The checks of one group of a level: drift, records, rejected or features."""
    lines = r.lines
    out: list[Check] = []
    if group == "drift":
        out.append(Check(level, "drift", r.number(value, gkeys, 0, 1), ALL_FEATURES,
                         lines.get(gkeys)))
    elif group == "records":
        body_ = r.mapping(value, gkeys, RECORD_CHECKS, "min, max, max_change")
        for k, v in body_.items():
            ck = (*gkeys, k)
            t = r.number(v, ck, 0) if k == "max_change" else r.number(v, ck, 0, integer=True)
            out.append(Check(level, f"records.{k}", t, None, lines.get(ck)))
        _ordered(body_, gkeys, r.fail)
    elif group == "rejected":
        allowed = ("max_fraction", *REASONS)
        for k, v in r.mapping(value, gkeys, allowed, "max_fraction or a reason code").items():
            ck = (*gkeys, k)
            out.append(Check(level, f"rejected.{k}", r.number(v, ck, 0, 1), None,
                             lines.get(ck)))
    else:
        features = r.mapping(value, gkeys, None, "feature name: {check: threshold}")
        for name, fchecks in features.items():
            out.extend(_feature(level, str(name), fchecks, (*gkeys, str(name)), lines,
                                r.mapping, r.number, r.fail))
    return out


def _feature(level: str, name: str, body: Any, keys: tuple[str, ...], lines: Lines,
             mapping: Any, number: Any, fail: Any) -> list[Check]:
    out = []
    for k, v in mapping(body, keys, FEATURE_CHECKS, "min, max, missing, nan, mean, drift, "
                        "distinct").items():
        ck = (*keys, k)
        line = lines.get(ck)
        if k in ("min", "max"):
            out.append(Check(level, k, number(v, ck), name, line))
        elif k in ("missing", "nan", "drift"):
            out.append(Check(level, k, number(v, ck, 0, 1), name, line))
        elif k == "mean":
            if (not isinstance(v, list) or len(v) != 2
                    or any(isinstance(x, bool) or not isinstance(x, (int, float))
                           or not math.isfinite(x) for x in v)
                    or v[0] > v[1]):
                raise fail(ck, f"must be [low, high] (two finite numbers, low <= high), "
                               f"got {v!r}")
            out.append(Check(level, "mean", (v[0], v[1]), name, line))
        else:
            distinct = mapping(v, ck, DISTINCT_CHECKS, "min, max")
            for dk, dv in distinct.items():
                dkeys = (*ck, dk)
                out.append(Check(level, f"distinct.{dk}", number(dv, dkeys, 0, integer=True),
                                 name, lines.get(dkeys, line)))
            _ordered(distinct, ck, fail)
    _ordered(body, keys, fail)
    return out


def _ordered(body: Mapping[str, Any], keys: tuple[str, ...], fail: Any) -> None:
    """`min` above `max` in one mapping: no value could pass (a typo, or swapped bounds)."""
    low, high = body.get("min"), body.get("max")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
        raise fail((*keys, "min"), f"{low!r} is above {'.'.join(keys)}.max {high!r}: no value "
                                   "can pass; swap them or fix the bound")


NUMERIC_CHECKS = ("min", "max", "mean")
FLOAT_DTYPES = ("float16", "float32", "float64")


def check_features(checks: Checks | None, features: Sequence[Any], schema_path: str) -> None:
    """Every feature a check names is in the schema, and the check applies to its dtype
    (`features`: the schema's etl.contract.schema.Feature, read for `name` and `dtype`):
    min/max/mean measure numbers, not strings; `nan` measures a float feature. A
    ConfigError naming file:line otherwise."""
    if checks is None:
        return
    by_name = {f.name: f for f in features}
    for c in checks.checks:
        if c.feature in (None, ALL_FEATURES):
            continue
        at = f"{checks.path}:{c.line}" if c.line else checks.path
        key = f"checks.{c.level}.features.{c.feature}"
        f = by_name.get(c.feature)
        if f is None:
            raise ConfigError(f"{at}: {key}: no feature {c.feature!r} in the schema "
                              f"{schema_path} (its features: {', '.join(by_name)})")
        if c.kind in NUMERIC_CHECKS and f.dtype == "bytes":
            raise ConfigError(f"{at}: {key}.{c.kind}: {c.feature!r} is a string feature "
                              f"(dtype bytes in {schema_path}): {c.kind} applies to numbers; "
                              "for strings use distinct, missing or drift")
        if c.kind == "nan" and f.dtype not in FLOAT_DTYPES:
            raise ConfigError(f"{at}: {key}.nan: {c.feature!r} is {f.dtype} in {schema_path}: "
                              "only a float feature holds NaN or infinite values")
