"""Exact accounting of a run: every record read is either written or rejected, per input file.

Stage 1 reports per input file how many records it read and every record it rejected; stage
2 reports per shard how many records of each input file (by ordinal) it wrote. Nothing is
published unless `read = written + rejected` holds for every file, and the bad-record
threshold sees every record that was not written (an `unreadable_rest` entry counts as the
records it stands for).

Missing values are counted the same way: each read report's summary line may carry
`missing` (feature -> {"missing": n, "defaulted": n}, what the encoder counted for that read
task); the counts of every task add up to the manifest's `missing_values`. A retried task's
report replaces the failed attempt's, so each record counts once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from etl.base.errors import BadInputError, BadRecord, EtlError
from etl.shuffle.shard_writer import ShardResult


@dataclass
class Accounting:
    """Per-input-file counts (`inputs`, in input order) and the rejected records."""

    inputs: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    missing: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def read(self) -> int:
        return sum(i["read"] for i in self.inputs)

    @property
    def written(self) -> int:
        return sum(i["written"] for i in self.inputs)

    @property
    def num_rejected(self) -> int:
        return sum(i["rejected"] for i in self.inputs)

    def summary(self) -> dict[str, Any]:
        """The manifest's `rejected` section: counts by reason code, not by message."""
        by_code: Counter[str] = Counter()
        for bad in self.rejected:
            by_code[bad["code"]] += bad.get("count", 1)
        read = self.read
        return {"num_records": self.num_rejected,
                "fraction": self.num_rejected / read if read else 0.0,
                "by_reason": dict(sorted(by_code.items(), key=lambda kv: (-kv[1], kv[0])))}


def account(read_parts: Iterable[list[dict[str, Any]]], shards: Iterable[ShardResult],
            expected: Iterable[tuple[int, int]]) -> Accounting:
    """Join stage 1's reports (one per read task: an input file's ordinal and split index, in
    file order) with stage 2's per-shard counts; raise if any record is unaccounted for (that
    would be a bug of ours: nothing is published then). `expected`: every (ordinal, split)."""
    written: Counter[int] = Counter()
    for shard in shards:
        for ordinal, n in shard.per_input.items():
            written[int(ordinal)] += n
    inputs: dict[int, dict[str, Any]] = {}
    seen: set[tuple[int, int]] = set()
    rejected: list[dict[str, Any]] = []
    absent: dict[str, dict[str, int]] = {}  # per feature: missing and defaulted values
    for lines in sorted((p for p in read_parts if p),
                        key=lambda p: (int(p[0]["ordinal"]), int(p[0].get("split", 0)))):
        head, bad = lines[0], lines[1:]
        ordinal = int(head["ordinal"])
        seen.add((ordinal, int(head.get("split", 0))))
        entry = inputs.setdefault(ordinal, {"path": head["path"], "read": 0,
                                            "written": written.pop(ordinal, 0), "rejected": 0})
        entry["read"] += int(head["read"])
        entry["rejected"] += sum(b.get("count", 1) for b in bad)
        rejected += bad
        add_missing(absent, head.get("missing", {}))
    missing = sorted(set(expected) - seen)
    if missing:
        raise EtlError(f"no read report for {len(missing)} read task(s) ((ordinal, split): "
                       f"{missing[:5]}); nothing published")
    if written:
        raise EtlError(f"shards hold records of unknown input files {sorted(written)}; "
                       "nothing published")
    for entry in inputs.values():
        if entry["read"] != entry["written"] + entry["rejected"]:
            lost = entry["read"] - entry["written"] - entry["rejected"]
            raise EtlError(f"{entry['path']}: read {entry['read']} records but wrote "
                           f"{entry['written']} and rejected {entry['rejected']} ({lost} "
                           "unaccounted for); nothing published. This is a bug: please report it")
    return Accounting([inputs[k] for k in sorted(inputs)], rejected,
                      {k: absent[k] for k in sorted(absent)})


def add_missing(total: dict[str, dict[str, int]], part: dict[str, dict[str, int]]) -> None:
    """Add one part's per-feature missing/defaulted counts into `total` (in place)."""
    for name, counts in part.items():
        into = total.setdefault(name, {"missing": 0, "defaulted": 0})
        for key, n in counts.items():
            into[key] = into.get(key, 0) + int(n)


def missing_section(missing: dict[str, dict[str, int]], schema: Any) -> dict[str, Any]:
    """The manifest's `missing_values`: per feature with any missing value, how many records
    had none (`missing`), how many written records hold its `default` instead (`defaulted`),
    and that default; the records missing a required feature are the `missing_required`
    rejections (a record is counted under its first reason only)."""
    out: dict[str, Any] = {}
    for name, counts in missing.items():
        entry: dict[str, Any] = {"missing": int(counts.get("missing", 0)),
                                 "defaulted": int(counts.get("defaulted", 0))}
        try:
            feature = schema.feature(name)
        except KeyError:
            feature = None
        if feature is not None and not feature.required and feature.default is None:
            entry["default"] = []  # an optional variable-length feature: stored empty
        elif feature is not None and feature.default is not None:
            default = feature.default
            if isinstance(default, float) and default != default:
                default = "nan"
            elif not isinstance(default, (bool, int, float, str)):
                default = repr(default)
            entry["default"] = default
        out[name] = entry
    return out


def check_threshold(rejected: dict[str, Any], read: int, first: dict[str, Any] | None,
                    max_bad_fraction: float, rejected_at: str = "") -> None:
    """Fail (exit 3) when more records were rejected than the job allows. `rejected`: the
    manifest's section (Accounting.summary), `first`: the first rejected record."""
    if not rejected["num_records"] or rejected["fraction"] <= max_bad_fraction:
        return
    reasons = ", ".join(f"{code} {n}" for code, n in rejected["by_reason"].items())
    named = f" First: {BadRecord.from_json(first).message()}" if first else ""
    where = f"; all of them: {rejected_at}" if rejected_at else ""
    raise BadInputError(
        f"{rejected['num_records']} of {read} records rejected ({rejected['fraction']:.2%} > "
        f"max_bad_fraction {max_bad_fraction:.2%}): {reasons}; nothing published.{named}{where}")
