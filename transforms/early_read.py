"""A local run's inputs read while the launcher imports Beam and builds the pipeline.

`import apache_beam` and the pipeline's construction take most of a second on one core, in
Python, while the machine's other cores wait. Two reads of the inputs that a run makes anyway
go on meanwhile, in threads started before Beam is imported (cli/one_span.py):

- the inputs' fingerprints (etl.schedule.fingerprint: a crc32c of every local file, read
  whole), which the run's planning takes instead of reading every file again on its main
  thread (`fingerprints_for`);
- the loops compiled at run time that the run's read and encoder will use (etl.formats.jit:
  the CSV chunk loop, the Example loop, the framing), for inputs of `COMPILE_AHEAD_BYTES` or
  more, so stage 1 does not start with ~0.4 s of compiling;
- for a format whose read is one stream outside the GIL (etl.sources.base.Source.READS_EARLY:
  gzipped IDX's inflate), the first read task's blocks, which the read DoFn takes over, with
  the reader's thread, when it gets that very task in this process (`take`,
  transforms/convert.py). The blocks are the reader's own, in its order, so the records,
  their positions and their errors are the ones the DoFn's read gives.

Either is used only where nothing could differ from what the run reads itself: the inputs are
pinned here (etl.schedule.input_pin) before their first byte is read, and a file whose pin the
run then takes differently is fingerprinted and read again by the run; the blocks also need
the same schema, source configuration, base directory, record size limit and read cut
(`keep_if`). Only local files are read early; anything that fails here is left for the run to
meet and report. Where the pipeline runs in other processes, or the run ends first, the read
is cancelled.

Memory: at most `BUDGET` bytes of blocks wait before the DoFn takes them; from then on the
usual two blocks ahead (transforms/prefetch.py). The fingerprints read 8 MiB at a time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from etl.base import signals
from etl.base.pause import pause
from etl.contract.codec import Encoder
from etl.contract.schema import Schema, load_schema
from etl.formats import compiled_framing
from etl.job.config import JobConfig, Reading, input_places
from etl.job.read_plan import ReadTask, plan_units, tasks_of
from etl.schedule import input_pin
from etl.schedule.fingerprint import fingerprints
from etl.sources import make_reader
from etl.sources.base import Block, Source
from etl.storage import fs
from transforms.prefetch import ReadAhead

COMPILE_AHEAD_BYTES = 64 << 20  # inputs from which the loops are compiled early
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


class _Fingerprints:
    """Every input's fingerprint, taken in a thread of its own; stops between files once
    cancelled."""

    def __init__(self, paths: list[str]) -> None:
        self.found: dict[str, dict[str, str]] = {}
        self.failed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._take, args=(paths,),
                                        name="etl-early-fingerprints", daemon=True)
        self._thread.start()

    def _take(self, paths: list[str]) -> None:
        try:
            for path in paths:
                if self._stop.is_set():
                    return
                self.found.update(fingerprints([path]))
        except Exception:  # noqa: BLE001 - the run takes this file's fingerprint and reports it
            self.failed = True
            return
        try:
            pause("early-fingerprints")  # tests: an input changed once its fingerprint is taken
        except signals.Cancelled:  # stopped while paused there: the run reports the signal
            return

    def result(self) -> dict[str, dict[str, str]]:
        """What was found (all of it, unless a file failed or it was cancelled)."""
        self._thread.join()
        return dict(self.found)

    def cancel(self) -> None:
        self._stop.set()


class EarlyRead:
    """The inputs' fingerprints and, where the format allows, the first read task's blocks,
    read ahead of the pipeline. The blocks are taken at most once."""

    def __init__(self, pins: dict[str, Any], prints: _Fingerprints,
                 task: ReadTask | None = None, ident: tuple[Any, ...] = (),
                 ahead: ReadAhead[Block] | None = None) -> None:
        self.pins = pins
        self._prints = prints
        self.task = task
        self.identity = ident
        self._ahead = ahead
        self._lock = threading.Lock()
        self._over = ahead is None  # taken, cancelled, or no blocks read
        self.taken = False  # by the read step (the run's log says so)

    def fingerprints_for(self, pinned: dict[str, Any]) -> dict[str, dict[str, str]]:
        """The fingerprints taken here of the files the run pinned as they were pinned here
        (waits for them); the run takes the others itself."""
        found = self._prints.result()
        return {p: f for p, f in found.items() if p in self.pins and pinned.get(p) == self.pins[p]}

    def keep_if(self, ident: tuple[Any, ...], pinned: dict[str, Any]) -> bool:
        """Whether the run reads the task as it was read here: blocks were read, with the same
        identity, every input pinned as it was before the read began; else cancelled."""
        same = (not self._over and ident == self.identity
                and all(pinned.get(p) == pin for p, pin in self.pins.items()))
        if not same:
            self.cancel()
        return same

    def take(self, task: ReadTask) -> Iterator[Block] | None:
        """The task's blocks (those read so far, then the rest as read), once; None for any
        other task, or when taken or cancelled already."""
        with self._lock:
            if self._over or task != self.task or self._ahead is None:
                return None
            self._over = self.taken = True
        self._ahead.limit(DEPTH)
        return self._ahead.consume()

    def cancel(self) -> None:
        """Stop the reads (the blocks after their current one) and drop the blocks, unless
        taken."""
        self._prints.cancel()
        with self._lock:
            if self._over:
                return
            self._over = True
        if self._ahead is not None:
            self._ahead.close(wait=False)


def start(job: JobConfig) -> EarlyRead | None:
    """Begin the early reads of a job whose inputs are all local files; None for any other
    (or when listing them fails: the run lists them again and reports it)."""
    if not _local_paths_only(job):
        return None  # a query or a generator (no paths), or a bucket: listing is their work
    try:
        plan = plan_units(job.sources, job.base_dir, job.path)
        paths = [i["path"] for i in plan.inputs]
        pins = input_pin.pins(paths)  # before the first byte is read
        if not plan.units or len(pins) != len(paths) or any(
                p[0] != "file" for p in pins.values()):
            return None  # not all local files
    except Exception:  # noqa: BLE001 - the run meets the same and reports it
        return None
    if sum(u.num_bytes for u in plan.units) >= COMPILE_AHEAD_BYTES:
        # not a daemon: a run that ends at once waits for the compile (~0.3 s) rather than
        # exit while LLVM's code still runs in this thread
        threading.Thread(target=_compile_ahead, args=(job, plan.units[0]),
                         name="etl-early-compile", daemon=False).start()
    prints = _Fingerprints([i["path"] for i in plan.inputs if "fingerprint" not in i])
    unit = plan.units[0]
    first = _first_task(job, unit)
    if first is None:
        return EarlyRead(pins, prints)
    reader, task, ident = first
    ahead = ReadAhead(_paused_after_first(reader.read_split(task.split)), DEPTH, BUDGET,
                      block_bytes, name="etl-early-read")
    return EarlyRead(pins, prints, task, ident, ahead)


def _compile_ahead(job: JobConfig, unit: Any) -> None:
    """Compile the loops the first unit's read and the encoder will use (etl.formats.jit
    keeps them for the process); anything that fails here the run meets and reports."""
    try:
        reader = make_reader(job.sources[unit.source], job.base_dir, f"sources.{unit.source}")
        schema = _prepare(job, reader)
        reader.compile_ahead(unit.path)
        Encoder(schema, job.reading.max_record_bytes).compile_ahead()
        compiled_framing.framer()  # the spills' framing and the shards' take: one module
    except Exception:  # noqa: BLE001, S110 - the run compiles what it needs itself
        pass


def _prepare(job: JobConfig, reader: Source) -> Schema:
    """The job's schema, with `reader` prepared for it as the run's read DoFn prepares it."""
    schema = load_schema(job.schema_path)
    reader.prepare(schema, job.reading.max_record_bytes)
    return schema


def _local_paths_only(job: JobConfig) -> bool:
    """Every source names paths, all on this machine's disk: listing them connects nowhere
    (a database source's listing is its survey query; a bucket's, a listing request)."""
    for cfg in job.sources.values():
        places = input_places({"source": cfg}, job.base_dir)
        if not places or not all(fs.on_disk(path) for _, path in places):
            return False
    return True


def _first_task(job: JobConfig, unit: Any) -> tuple[Source, ReadTask, tuple[Any, ...]] | None:
    """The reader, task and identity of the job's first read task, when its format reads
    early; else (or when anything about it fails) None."""
    try:
        source = job.sources[unit.source]
        reader = make_reader(source, job.base_dir, f"sources.{unit.source}")
        if not reader.READS_EARLY:
            return None
        schema = _prepare(job, reader)
        split_bytes = job.reading.split_bytes or 0
        task = next(tasks_of(unit, reader, split_bytes))
        return reader, task, identity(schema.to_yaml(), source, job.base_dir, job.reading,
                                      split_bytes)
    except Exception:  # noqa: BLE001 - the run meets the same and reports it
        return None


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
