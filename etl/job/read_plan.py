"""What a conversion reads: every input file (a read unit) with its stable identity, and how
each is cut into read tasks.

The launcher lists the files (it needs them anyway: preflight, the output guard) and writes
the list to one file in the run's directory; the pipeline reads that file and cuts each unit
into splits on the workers. So the job graph holds one path, not one element per input file
(10,000 inputs inlined into a Dataflow job file would approach its 10 MB limit), and
scanning large text files for their line starts happens on workers, not on the launcher.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from etl.base.errors import ConfigError
from etl.shuffle import keys
from etl.sources import make_reader
from etl.sources.base import Source, Split
from etl.storage import fs

WHOLE_FILE = 1 << 62  # split_bytes 0: never cut


@dataclass(frozen=True)
class ReadUnit:
    """One input file of one `sources:` entry: `identity` (its path below the inputs' common
    directory) and `ordinal` (its rank by identity) are what its records' keys and ids derive
    from, so the shards do not depend on where the dataset lives or how a file is cut."""

    source: str
    path: str
    identity: str
    ordinal: int
    num_bytes: int


@dataclass(frozen=True)
class ReadTask:
    """One piece of one read unit: the unit's fields and the byte/record range to read.
    `byte_range`: the bytes of the unit's file this task stands for in progress figures (the
    tasks of a unit tile [0, num_bytes) exactly); never used to read."""

    source: str
    path: str
    identity: str
    ordinal: int
    split: Split
    byte_range: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class ReadPlan:
    """Every read unit, and every file read (paired formats read partner files too)."""

    units: list[ReadUnit]
    inputs: list[dict[str, Any]]  # {"path", "num_bytes"}, sorted by path

    def to_json(self) -> bytes:
        return json.dumps({"units": [asdict(u) for u in self.units],
                           "inputs": self.inputs}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ReadPlan:
        doc = json.loads(data)
        return cls([ReadUnit(**u) for u in doc["units"]], doc["inputs"])

    def save(self, path: str) -> None:
        fs.write_bytes(path, self.to_json(), durable=False)  # lives as long as its run

    @classmethod
    def load(cls, path: str) -> ReadPlan:
        return cls.from_json(fs.read_bytes(path))


def plan_units(sources: dict[str, dict[str, Any]], base_dir: str, where: str = "job") -> ReadPlan:
    """List every source's files (globs expanded), fail on a source that matches nothing."""
    per_source: dict[str, list[str]] = {}
    every_input: set[str] = set()
    known: dict[str, int] = {}  # sizes the listings already gave (image folders)
    prints: dict[str, dict[str, str]] = {}  # fingerprints the sources give (database queries)
    for name, cfg in sources.items():
        reader = make_reader(cfg, base_dir, f"{where}: sources.{name}")
        found = reader.files()
        if not found:
            raise ConfigError(f"{where}: source {name!r} matched no input files "
                              f"(paths: {cfg.get('paths')!r})")
        per_source[name] = found
        every_input.update(reader.inputs())
        known.update(reader.sizes())
        prints.update(reader.fingerprints())
    all_files = sorted({f for found in per_source.values() for f in found})
    identity = keys.identities(all_files)
    ordinal = {p: i for i, p in enumerate(sorted(all_files, key=lambda p: identity[p]))}
    sizes = {p: known[p] if p in known else _size(p) for p in every_input | set(all_files)}
    units = [ReadUnit(name, f, identity[f], ordinal[f], sizes[f])
             for name, found in per_source.items() for f in found]
    return ReadPlan(units, [{"path": p, "num_bytes": sizes[p], **_print(prints.get(p))}
                            for p in sorted(every_input)])


def _print(known: dict[str, str] | None) -> dict[str, str]:
    """A source's own fingerprint as the input list's fields (etl.schedule.fingerprint)."""
    return {} if known is None else {"fingerprint": known["value"],
                                     "fingerprint_kind": known["kind"]}


def tasks_of(unit: ReadUnit, reader: Source, split_bytes: int) -> Iterator[ReadTask]:
    """The unit cut into read tasks of about `split_bytes` where its format can be split."""
    splits = [replace(s, size=unit.num_bytes)
              for s in reader.splits(unit.path, split_bytes or WHOLE_FILE)]
    bounds = byte_bounds(splits, unit.num_bytes)
    for split, lo, hi in zip(splits, bounds, bounds[1:], strict=False):
        yield ReadTask(unit.source, unit.path, unit.identity, unit.ordinal, split, (lo, hi))


def byte_bounds(splits: list[Split], num_bytes: int) -> list[int]:
    """Where each split's bytes start in its file, and the file's end: 0, then each later
    split's `offset` (record-indexed formats) or `start` (byte ranges), kept in order and
    within the file, then `num_bytes`. So the tasks' byte ranges add up to the file."""
    bounds = [0]
    for split in splits[1:]:
        at = split.offset if split.offset is not None else split.start
        bounds.append(min(max(int(at), bounds[-1]), num_bytes))
    bounds.append(max(num_bytes, bounds[-1]))
    return bounds


def all_tasks(plan: ReadPlan, sources: dict[str, dict[str, Any]], base_dir: str,
              split_bytes: int) -> list[ReadTask]:
    """Every read task of a plan, cut here (what the pipeline's workers do, for a listing)."""
    readers = {name: make_reader(cfg, base_dir, f"sources.{name}")
               for name, cfg in sources.items()}
    return [t for u in plan.units for t in tasks_of(u, readers[u.source], split_bytes)]


def needs_scan(units: Iterable[ReadUnit], split_bytes: int) -> int:
    """How many units are big enough to be cut (finding cut points may read the file)."""
    return sum(1 for u in units if split_bytes and u.num_bytes > split_bytes)


def expected_reads(units: Iterable[ReadUnit],
                   reports: Iterable[list[dict[str, Any]]]) -> set[tuple[int, int]]:
    """Every (ordinal, split index) that must have a read report: each unit's splits, as many
    as its reports say it was cut into (a unit with no report at all: its split 0)."""
    counts = {u.ordinal: 1 for u in units}
    for report in reports:
        if report:
            head = report[0]
            ordinal = int(head["ordinal"])
            counts[ordinal] = max(counts.get(ordinal, 1), int(head.get("splits", 1)))
    return {(o, i) for o, n in counts.items() for i in range(n)}


def _size(path: str) -> int:
    try:
        return fs.size(path)
    except (OSError, IndexError, ValueError):
        return 0  # pseudo-files (python generators) and directories
