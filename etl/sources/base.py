"""What every raw-source reader is (`Source`), how it splits a file (`Split`), what it yields (`Block`).

Readers are Beam-free: they take a path (local, gs:// or any scheme etl.storage.fs reads) and
yield `Block`s of a few thousand to ~64k records as NumPy/Arrow columns. Rows a reader
cannot even parse (a malformed CSV line, invalid JSON) come back as `BadRecord`s in the
block, with the file and line; every other row still goes through.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from etl.base.errors import BadRecord, ConfigError
from etl.base.units import DEFAULT_MAX_RECORD_BYTES

DEFAULT_BLOCK_ROWS = 65536


@dataclass
class Block:
    """Columns of consecutive records of one file.

    `positions` number the records within their file (0-based, stable across reruns): they
    feed the shuffle key, so the same input always gives the same permutation.
    `lines` (text formats: the 1-based physical line each row starts on) and `offsets`
    (binary formats: each record's byte offset in its file, where known) only name rows in
    error reports, so a user can open the file at the right place.
    `bad` are the rows rejected while reading; `num_read` counts them with the good rows
    (an `unreadable_rest` entry counts as the records it stands for).
    `end_offset`: how far into its file (bytes, as etl.storage.fs reads it: compressed files count
    compressed bytes) the reader had got when it made the block, at or past its last record;
    None where the format cannot say cheaply. Progress figures only (percent, ETA): it never
    names a record.
    """

    columns: dict[str, Any]
    positions: np.ndarray
    source: str
    bad: list[BadRecord] = field(default_factory=list)
    lines: np.ndarray | None = None
    offsets: np.ndarray | None = None
    end_offset: int | None = None

    @property
    def num_rows(self) -> int:
        return len(self.positions)

    @property
    def num_read(self) -> int:
        return self.num_rows + sum(b.count for b in self.bad)


@dataclass(frozen=True)
class Split:
    """A part of one read unit that one worker reads on its own (picklable: it travels to
    Beam workers). Whatever the split, a record keeps its position, line and bad records:
    the blocks of a unit's splits, in `index` order, are exactly the blocks of the whole unit.

    `start`/`stop`: byte offsets (CSV, JSONL, text: the split owns the lines that START in
    [start, stop)), or record indexes (Parquet: rows, from row-group boundaries; IDX, npy,
    npz: records); `stop=None` is the end of the unit. `first_line`: text formats, the number
    of physical lines before `start` (so line numbers and positions stay the file's).
    `whole` splits (the default, one per unit) read the unit as `read(path)` always did.
    `offset`: for record-indexed splits, the byte offset in the unit's file where the split's
    first record starts (progress figures only; None: `start` is already a byte offset).
    `size`: the unit's file size in bytes as the plan measured it (ReadUnit.num_bytes, set by
    read_plan.tasks_of; None when read outside a plan): progress figures only, so a reader
    can place a block in a compressed file without asking the store for its size again.
    """

    path: str
    index: int = 0
    count: int = 1
    start: int = 0
    stop: int | None = None
    first_line: int = 0
    offset: int | None = None
    size: int | None = None

    @property
    def whole(self) -> bool:
        return self.count == 1

    @property
    def first(self) -> bool:
        return self.index == 0


class Source:
    """What every source format implements (one configured `sources:` entry of a job file).

    - `files()`: the read units (globs expanded, sorted): positions number records within one
      unit, and `Block.source` names it. For paired formats (IDX, npy) the key column's file.
    - `inputs()`: every file read (what the manifest lists); defaults to `files()`.
    - `prepare(schema, max_record_bytes)`: called once before any read (default: nothing).
    - `splits(path, target_bytes)`: how one unit is cut for parallel reads (default: one
      whole split); called once per unit on the launcher.
    - `read_split(split)`: the split's blocks, in file order; `read(path)` reads the unit's
      one whole split. A format that does not split overrides `read(path)` instead.
    - `record_count(path)`: the unit's record count before reading it, where the format
      states it (default: None).
    - `READS_EARLY`: whether a run's launcher reads the first unit while it imports Beam
      (transforms/early_read.py): a format whose read is one stream outside the GIL (zlib's
      inflate) overlaps the import; one parsed on Arrow's thread pool (CSV) takes both cores
      from it and made the run slower (benchmarks/README.md, "Read while Beam is imported").
    - `compile_ahead(path)`: compiles, in this process, the loops a read of `path` will use
      (etl.formats.jit), while the launcher imports Beam (default: none).
    - `READS_IN_STREAMS`: whether one worker may read a whole unit as several of its splits
      at once, `read_split` running on several threads (transforms/prefetch.read_in_streams):
      for a format whose parse is one stream per split (Arrow's CSV reader) and whose reader
      keeps no per-read state.
    """

    READS_EARLY = False
    READS_IN_STREAMS = False

    def files(self) -> list[str]:
        raise NotImplementedError

    def inputs(self) -> list[str]:
        return self.files()

    def sizes(self) -> dict[str, int]:
        """Sizes in bytes (path -> size) of units and inputs that listing them already told
        (read_plan.plan_units measures the others); a unit that is not one file (an image
        folder) says here what it stands for. Default: none known."""
        return {}

    def fingerprints(self) -> dict[str, dict[str, str]]:
        """Units whose fingerprint ({"kind", "value"}) the source knows better than a checksum
        of a file's bytes (a database query: its rows, etl.sources.sql_source). Default: none,
        every input is a file and etl.schedule.fingerprint reads it."""
        return {}

    def record_count(self, path: str) -> int | None:
        """How many records the unit `path` holds, when its format says so before it is read
        (an IDX or .npy header): what lets etl.shuffle.placement place each record as it is
        read. Default: None, not known until read."""
        return None

    # records (lines, frames, image files) above this are rejected as oversized_record
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def prepare(self, schema: Any, max_record_bytes: int) -> None:
        """Keeps the record size limit; formats that check against the schema extend it."""
        self.max_record_bytes = int(max_record_bytes)

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        return [Split(path)]

    def compile_ahead(self, path: str) -> None:
        """Nothing to compile by default."""

    def read_split(self, split: Split) -> Iterator[Block]:
        if not split.whole:
            raise ValueError(f"{type(self).__name__} reads whole files only, got {split}")
        return self.read(split.path)

    def read(self, path: str) -> Iterator[Block]:
        if type(self).read_split is Source.read_split:
            raise NotImplementedError(f"{type(self).__name__} defines neither read nor read_split")
        return self.read_split(Split(path))




def target_starts(size: int, target_bytes: int, begin: int = 0) -> list[int]:
    """Byte offsets every `target_bytes` after `begin`, before `size`: where splits are
    wanted (the formats move each one to the next boundary they can prove)."""
    target_bytes = max(int(target_bytes), 1)
    return list(range(begin + target_bytes, size, target_bytes))


def record_splits(path: str, count: int, record_bytes: float, target_bytes: int,
                  header_bytes: int = 0, unit_record_bytes: int = 0) -> list[Split]:
    """Splits of `count` fixed-size records, about `target_bytes` each (IDX, npy);
    `header_bytes` + record index x `unit_record_bytes` is where a record starts in the unit's
    own file (Split.offset, for progress)."""
    per = max(1, int(target_bytes // max(record_bytes, 1)))
    cuts = list(range(0, count, per)) or [0]
    n = len(cuts)
    return [Split(path, i, n, a, (cuts[i + 1] if i + 1 < n else None),
                  offset=header_bytes + a * unit_record_bytes if unit_record_bytes else None)
            for i, a in enumerate(cuts)]


def position(fh: Any) -> int | None:
    """A read handle's position (tell()), for progress figures (Block.end_offset); None where
    the handle cannot say."""
    try:
        return int(fh.tell())
    except (OSError, ValueError, AttributeError):
        return None


def options(config: Mapping[str, Any], allowed: set[str], where: str) -> dict[str, Any]:
    unknown = set(config) - allowed - {"format", "paths"}
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    return dict(config)
