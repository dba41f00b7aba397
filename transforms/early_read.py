"""The first read task's blocks, read while the launcher imports Beam and builds the pipeline.

`import apache_beam` and the pipeline's construction take most of a second on one core, in
Python, while the machine's other cores wait; the reading of a block (pyarrow's CSV parser,
zlib's inflate for gzipped IDX, Parquet) mostly runs without the GIL. So a local one-span run
starts reading its first task in a thread before Beam is imported (cli/one_span.py), and the
read DoFn, when it gets that very task in this process, takes those blocks and the reader's
thread over instead of starting its own read (transforms/convert.py). The blocks are the
reader's own, in its order, so the records, their positions and their errors are the ones the
DoFn's read gives; nothing else of the run changes.

It is used only when nothing could differ from the DoFn's read (`keep_if`): the same schema,
the source's configuration, base directory, record size limit and read cut, and the same
pins of every input (etl.schedule.input_pin: taken here before the first byte is read and
compared with the run's own, so a file changed in between is read again by the run). Where
the pipeline runs in other processes, or anything fails before it starts, it is cancelled.
Only local files are read early, of a format whose reader says its read overlaps the import
(etl.sources.base.Source.READS_EARLY: IDX).

Memory: at most `BUDGET` bytes of blocks wait before the DoFn takes them; from then on the
usual two blocks ahead (transforms/prefetch.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from etl.base.pause import pause
from etl.contract.schema import load_schema
from etl.job.config import JobConfig, Reading
from etl.job.read_plan import ReadTask, plan_units, tasks_of
from etl.schedule import input_pin
from etl.sources import make_reader
from etl.sources.base import Block
from transforms.prefetch import ReadAhead

BUDGET = 512 << 20  # bytes of blocks read before the pipeline takes them (600k MNIST images: 470 MB)
DEPTH = 2  # blocks ahead once taken: prefetch's depth


def identity(schema_yaml: str, source: dict[str, Any], base_dir: str, reading: Reading,
             split_bytes: int) -> tuple[Any, ...]:
    """What a read's blocks depend on besides its task and its input's bytes."""
    return (schema_yaml, json.dumps(source, sort_keys=True, default=str), base_dir,
            reading.max_record_bytes, split_bytes)


def block_bytes(block: Block) -> int:
    """Memory a block holds: its columns and positions (Arrow and NumPy arrays)."""
    return int(block.positions.nbytes) + sum(int(getattr(c, "nbytes", 0))
                                             for c in block.columns.values())


class EarlyRead:
    """One read task's blocks, read ahead of the pipeline; taken at most once."""

    def __init__(self, task: ReadTask, ident: tuple[Any, ...], pins: dict[str, Any],
                 ahead: ReadAhead[Block]) -> None:
        self.task = task
        self.identity = ident
        self.pins = pins
        self._ahead = ahead
        self._lock = threading.Lock()
        self._over = False  # taken or cancelled
        self.taken = False  # by the read step (the run's log says so)

    def keep_if(self, ident: tuple[Any, ...], pinned: dict[str, Any]) -> bool:
        """Whether the run reads this task as it was read here: the same identity, every
        input pinned as it was before the read began; else cancelled."""
        same = (not self._over and ident == self.identity
                and all(pinned.get(p) == pin for p, pin in self.pins.items()))
        if not same:
            self.cancel()
        return same

    def take(self, task: ReadTask) -> Iterator[Block] | None:
        """The task's blocks (those read so far, then the rest as read), once; None for any
        other task, or when taken or cancelled already."""
        with self._lock:
            if self._over or task != self.task:
                return None
            self._over = self.taken = True
        self._ahead.limit(DEPTH)
        return self._ahead.consume()

    def cancel(self) -> None:
        """Stop the read (after its current block) and drop its blocks, unless taken."""
        with self._lock:
            if self._over:
                return
            self._over = True
        self._ahead.close(wait=False)


def start(job: JobConfig) -> EarlyRead | None:
    """Begin reading the job's first read task in a thread; None when it cannot be read
    early (see the module's docstring) or anything about it fails: the run's own read then
    reads it, and reports what failed."""
    try:
        name, source = next(iter(job.sources.items()))  # the first read unit's source
        reader = make_reader(source, job.base_dir, f"sources.{name}")
        if not reader.READS_EARLY:
            return None
        plan = plan_units(job.sources, job.base_dir, job.path)
        unit = plan.units[0]
        pins = input_pin.pins(i["path"] for i in plan.inputs)
        if unit.source != name or len(pins) != len(plan.inputs) or any(
                p[0] != "file" for p in pins.values()):
            return None  # not all local files
        schema = load_schema(job.schema_path)
        reader.prepare(schema, job.reading.max_record_bytes)
        split_bytes = job.reading.split_bytes or 0
        task = next(tasks_of(unit, reader, split_bytes))
        ident = identity(schema.to_yaml(), source, job.base_dir, job.reading, split_bytes)
    except Exception:  # noqa: BLE001 - the run meets the same and reports it
        return None
    ahead = ReadAhead(_paused_after_first(reader.read_split(task.split)), DEPTH, BUDGET,
                      block_bytes, name="etl-early-read")
    return EarlyRead(task, ident, pins, ahead)


def _paused_after_first(blocks: Iterator[Block]) -> Iterator[Block]:
    """The blocks, with the pause point "early-read" once the first is out (tests: the input
    changed while its first block waits)."""
    for i, block in enumerate(blocks):
        yield block
        if i == 0:
            pause("early-read")


class EarlyReads:
    """What a run's read DoFns find through their Beam `Shared` handle: the launcher's early
    read, or none (a DoFn in another process gets an empty one)."""

    def __init__(self, early: EarlyRead | None = None) -> None:
        self.early = early

    def take(self, task: ReadTask) -> Iterator[Block] | None:
        return None if self.early is None else self.early.take(task)

    def cancel(self) -> None:
        if self.early is not None:
            self.early.cancel()
