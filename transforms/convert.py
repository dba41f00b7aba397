"""Beam PTransforms of a conversion: read+encode, plan shards, shuffle, write shards.

Thin wrappers: every step calls into the Beam-free `etl` package. Stage 1 reads each input
file's blocks and turns each (block, split) into a sorted run (etl.shuffle.runs). Their
statistics are merged by a CombineFn into the plan (exact rank ranges per shard), which
reaches the later steps as a side input. Then the strategy chosen in etl.shuffle moves runs
to shards, through its Beam steps (transforms.shuffles: one ShuffleSteps object per strategy,
asked, never named): `files` writes spill files and each shard reads its range of every spill
(only small metadata moves through Beam; transforms/shuffle_files.py); `engine` cuts each run
into one chunk per overlapping shard and groups them by shard with Beam's GroupByKey (the
runner's shuffle moves the data; transforms/shuffle_engine.py).

The input files arrive as one read-plan file (etl.job.read_plan), cut into read tasks on the
workers, so the job graph does not grow with their number. Accounting: stage 1 reports, per
read task, how many records it read and every record it rejected; stage 2 reports, per shard,
how many records of each input file it wrote; the finalize step (side inputs: no Flatten,
which the local runner runs as a stage of its own) checks `read = written + rejected` per
input file and writes the manifest.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.shared import Shared

from etl.base import heap, signals
from etl.base.inflight import InFlight
from etl.base.pause import pause
from etl.base.units import DEFAULT_MAX_RECORD_BYTES
from etl.base.worker_errors import wire_errors
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.formats.proto_wire import binary_column
from etl.formats.shards import DEFAULT_FORMAT, ShardFormat
from etl.job.config import Reading, Sharding, Shuffle
from etl.job.read_plan import ReadPlan, ReadTask, ReadUnit, expected_reads, tasks_of
from etl.output.accounting import add_missing
from etl.output.finalize import finalize_run
from etl.read.decode import RecordDecoder, check_decodable
from etl.run.progress import Tally, TaskBytes
from etl.shuffle import LOCAL_DEFAULT, files, keys
from etl.shuffle.placement import InputFile, Placement
from etl.shuffle.planning import RunKeys, ShardingPlan, ShuffleKeys, make_plan
from etl.shuffle.runs import SortedRun, sorted_run
from etl.shuffle.shard_writer import ShardResult
from etl.sources import make_reader
from etl.sources.base import Block
from etl.sources.tfrecord_source import SERIALIZED  # already-serialized records
from etl.stats.accumulators import SplitStats
from etl.stats.dataset import stats_document
from transforms import beam_fixes
from transforms import coders as _coders  # noqa: F401 - registers the shuffle's coders
from transforms.early_read import EarlyReads
from transforms.prefetch import ordered_map, prefetch, read_in_streams
from transforms.shuffle_steps import ShuffleSteps
from transforms.shuffles import steps_for


@dataclass(frozen=True)
class ConvertSettings:
    """Everything workers need, as plain values (pickled once into the DoFns): the job's
    sections whole (etl.job.config), resolved for this run by cli.run.convert_settings; never
    the JobConfig itself, whose document (`raw`) may hold a database password. A DoFn keeps
    it as `self.spec`: the attribute tests/test_sql_dataflow reads from a staged pipeline."""

    schema_yaml: str
    sources: dict[str, dict[str, Any]]
    base_dir: str
    fractions: dict[str, float]
    splits: tuple[str, ...]
    shuffle: Shuffle  # `via` resolved (etl.shuffle.strategy_for); spill_in_memory 0: all on disk
    sharding: Sharding
    shard_format: ShardFormat
    reading: Reading  # split_bytes resolved for the runner (0: whole files)
    spill_dir: str
    staging_dir: str
    # the read plan (etl.job.read_plan.ReadPlan): every input file, in one file the pipeline
    # reads, so the job graph does not grow with the number of inputs
    read_plan: str = ""
    spread_files: bool = False  # cut files on several workers (many files need a scan)
    spread_reads: bool = True  # read tasks on several workers (False: one small file)
    stats: bool = False  # gather the report's statistics while encoding (stats.json)
    shard_threads: int = 1  # shards one worker writes at once (cli.run.shard_threads)
    read_streams: int = 1  # parse streams of a unit one worker reads whole (prefetch.read_in_streams)

    @property
    def shuffled(self) -> bool:
        return self.shuffle.shuffled

    @property
    def steps(self) -> ShuffleSteps:
        """The shuffle strategy's Beam steps (transforms.shuffles)."""
        return steps_for(self.shuffle.via)


def flat_settings(*, seed: int | None, shards: int | None, shard_size: int | None,
                  max_shard_bytes: int, via: str = LOCAL_DEFAULT, spill_in_memory: int | None = 0,
                  max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, split_bytes: int = 0,
                  format: str = DEFAULT_FORMAT, compression: str = "none",  # noqa: A002 - the key
                  index: bool | None = None, **rest: Any) -> ConvertSettings:
    """ConvertSettings from one flat keyword per setting, as tests and benchmarks write them by
    hand (`rest`: its other fields); a run builds it from the job (cli.run.convert_settings)."""
    return ConvertSettings(shuffle=Shuffle(seed, via, spill_in_memory),
                           sharding=Sharding(shards, shard_size, max_shard_bytes),
                           shard_format=ShardFormat.of(format, compression, index),
                           reading=Reading(split_bytes, max_record_bytes), **rest)


# one JSON-lines file per input file: {"ordinal", "path", "read"}, then its rejected records
REPORTS = "reports"  # stage 1's tagged output: one read report per read task
STATS = "stats"  # stage 1's tagged output: (split, SplitStats) per read task and split


class _SplitFilesFn(beam.DoFn):
    """A read unit -> its read tasks (cut where its format allows; text formats find their
    cut points by scanning the file, which is why this runs on workers)."""

    def __init__(self, settings: ConvertSettings):
        self.spec = settings

    def setup(self) -> None:

        self.readers = {name: make_reader(cfg, self.spec.base_dir, f"sources.{name}")
                        for name, cfg in self.spec.sources.items()}

    @wire_errors
    def process(self, unit: ReadUnit):  # type: ignore[override]
        yield from tasks_of(unit, self.readers[unit.source], self.spec.reading.split_bytes)


class _ReadEncodeFn(beam.DoFn):
    """Stage 1: read a file's blocks, encode them in batch, key them into sorted runs; the
    `files` strategy writes each run to a spill (or holds it) and emits its SpillRef, the
    `engine` strategy emits the run itself."""

    def __init__(self, settings: ConvertSettings, held: Shared | None, tally: Shared | None = None,
                 writers: Shared | None = None, early: Shared | None = None):
        self.spec = settings
        self.held_handle = held
        self.tally_handle = tally
        self.writers_handle = writers
        self.early_handle = early

    def setup(self) -> None:
        import yaml  # noqa: PLC0415

        heap.keep_freed_memory()  # a block's big buffers reused, not re-faulted (etl.base.heap)
        schema = schema_from_dict(yaml.safe_load(self.spec.schema_yaml))
        self.encoder = Encoder(schema, max_record_bytes=self.spec.reading.max_record_bytes)
        self.readers = {
            name: make_reader(cfg, self.spec.base_dir, f"sources.{name}")
            for name, cfg in self.spec.sources.items()
        }
        for reader in self.readers.values():
            reader.prepare(schema, self.spec.reading.max_record_bytes)
        self.held = held_store(self.held_handle, self.spec)
        self.steps = self.spec.steps
        self.stats = _StatsFeed(schema) if self.spec.stats else None
        self.read_counter = Metrics.counter("etl", "records_read")
        self.bad_counter = Metrics.counter("etl", "records_rejected")
        self.encoded_counter = Metrics.counter("etl", "records_encoded")
        self.bytes_counter = Metrics.counter("etl", "bytes_read")  # progress: percent, ETA
        self.tally = _tally(self.tally_handle)
        self.writers = _writers(self.writers_handle)
        self.early = None if self.early_handle is None else self.early_handle.acquire(EarlyReads)

    @wire_errors
    def process(self, task: ReadTask):  # type: ignore[override]
        read = 0
        rejected: list[dict[str, Any]] = []
        missing: dict[str, dict[str, int]] = {}  # per feature: missing and defaulted values
        gathered: dict[str, SplitStats] = {}  # this task's statistics per split
        tally = self.tally
        if tally is not None:
            tally.stage("reading+encoding")
        span = TaskBytes(*task.byte_range)  # this task's input bytes, credited per block
        # the launcher's early read of this very task (transforms/early_read.py), else a read
        early = self.early.take(task) if self.early is not None else None
        blocks = early if early is not None else prefetch(read_in_streams(
            self.readers[task.source], task.split, self.spec.read_streams))
        for done in ordered_map(lambda block: self._stage1(task, block), blocks):
            signals.check_cancelled("reading")  # the launcher got a signal: stop here
            pause("read")
            # counters are updated here, in the bundle's thread, where Beam tracks metrics
            bad = sum(b.get("count", 1) for b in done.rejected)
            got = span.advance(done.end_offset)
            self.read_counter.inc(done.read)
            self.bad_counter.inc(bad)
            self.encoded_counter.inc(done.encoded)
            self.bytes_counter.inc(got)
            if tally is not None:
                tally.add(read=done.read, rejected=bad, encoded=done.encoded, bytes=got)
            read += done.read
            rejected += done.rejected
            add_missing(missing, done.missing)
            for split, part in done.stats.items():
                if split in gathered:
                    gathered[split].merge(part)
                else:
                    gathered[split] = part
            yield from done.outputs
        rest = span.finish()  # the task's exact byte count, whatever its blocks said
        self.bytes_counter.inc(rest)
        if tally is not None:
            tally.add(bytes=rest)
        # one empty run per input file: the planning combine always has an input, so even an
        # empty dataset gets its (empty) shards planned, without a default-value branch
        yield self._emit(SortedRun(next(iter(self.spec.splits)), _NO_KEYS, _NO_KEYS,
                                   np.zeros(1, np.int64), b""))
        # the task's read report (summary line, then its rejected records) goes to the
        # finalize step; a retried bundle's output replaces the failed attempt's
        summary = {"ordinal": task.ordinal, "split": task.split.index,
                   "splits": task.split.count, "path": task.path, "read": read}
        if missing:
            summary["missing"] = missing
        yield beam.pvalue.TaggedOutput(REPORTS, [summary, *rejected])
        for split, part in gathered.items():
            yield beam.pvalue.TaggedOutput(STATS, (split, part))

    def _stage1(self, task: ReadTask, block: Block) -> EncodedBlock:
        done = encode_block(self.encoder, self.spec, task, block, self.stats)
        done.outputs = [self._emit(run) for run in done.outputs]
        done.end_offset = block.end_offset
        return done

    def _emit(self, run: SortedRun) -> Any:
        """What the strategy moves (engine: the run itself; files: its spill's ref)."""
        if self.held is not None and len(run.keys):  # at the first run: where records go
            frame = int(run.offsets[1] - run.offsets[0])
            self.held.plan_placement(lambda: self._placement(frame))
        return self.steps.emit(run, self.spec.spill_dir, self.spec.shuffled, self.held,
                               self.writers)

    def _placement(self, frame: int) -> Placement | None:
        """Every record's place in its split's output (etl.shuffle.placement), when every
        input file states its record count before it is read; else None. `frame`: the first
        run's frame size, which every placed record must have."""
        if not self.spec.read_plan:
            return None
        inputs = []
        for unit in ReadPlan.load(self.spec.read_plan).units:
            count = self.readers[unit.source].record_count(unit.path)
            if count is None:
                return None
            inputs.append(InputFile(None if self.spec.fractions else unit.source, unit.identity,
                                    unit.ordinal, count))
        return Placement.plan(inputs, self.spec.shuffle.seed, self.spec.fractions, frame)


_NO_KEYS = np.zeros(0, np.uint64)


def held_store(handle: Shared | None, settings: ConvertSettings) -> files.HeldSpills | None:
    """This run's store of held spills (the same object in every DoFn of this process, and
    in the launcher that made `handle`)."""
    shuffle = settings.shuffle
    if handle is None or not shuffle.keeps_in_memory or not settings.steps.strategy.HOLDS_SPILLS:
        return None
    return handle.acquire(lambda: files.HeldSpills(shuffle.held_runs))


def _writers(handle: Shared | None) -> InFlight | None:
    """This run's busy writers (the launcher's object), None when the run is elsewhere."""
    return None if handle is None else handle.acquire(InFlight)


def _writing(writers: InFlight | None) -> AbstractContextManager[None]:
    return nullcontext() if writers is None else writers.writing()


def _tally(handle: Shared | None) -> Tally | None:
    """This run's live progress tally (the launcher's object: every stage in its process),
    None when the run shows no progress or runs elsewhere (transforms/progress_feed.py)."""
    return None if handle is None else handle.acquire(Tally)


class _StatsFeed:
    """Statistics of the records a block sends to a split: the report's accumulators
    (etl.stats.accumulators) fed by the TensorFlow-free decoder (etl.read.decode), so a run
    gathers them without importing TensorFlow; schemas that decoder refuses (16-bit colour
    PNG) take the report's TensorFlow path."""

    def __init__(self, schema: Any):
        self.schema = schema
        try:
            check_decodable(schema, "stats")
            self.decoder: RecordDecoder | None = RecordDecoder(schema)
        except Exception:  # noqa: BLE001 - any refusal: the TensorFlow path
            self.decoder = None

    def __call__(self, records: pa.Array, storage: dict[str, pa.Array] | None,
                 rows: np.ndarray) -> SplitStats:
        """`records` serialized; `storage`: the encoder's typed lists (rows `rows` of it are
        these records), None for records that came serialized."""
        acc = SplitStats(self.schema)
        if storage and acc.storable():  # no decode: the values the encoder just wrote
            acc.add_storage(storage, rows)
            return acc
        batch = records.to_pylist()
        if self.decoder is None:
            acc.add_batch(batch)
        else:
            acc.add_decoded(self.decoder.decode(batch, lambda i: f"record {i}"), batch)
        return acc


@dataclass
class EncodedBlock:
    read: int
    encoded: int
    outputs: list[Any]  # SortedRun, one per split the block feeds (or their SpillRefs)
    rejected: list[dict[str, Any]]
    end_offset: int | None = None  # the block's Block.end_offset (progress)
    stats: dict[str, SplitStats] = dataclasses.field(default_factory=dict)  # per split
    # per feature: {"missing", "defaulted"} (Encoder: EncodedBatch.missing)
    missing: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)


def encode_block(encoder: Encoder, settings: ConvertSettings, task: ReadTask, block: Block,
                 stats: _StatsFeed | None = None) -> EncodedBlock:
    """One block: encode it, key it, and sort it into one run per split it feeds (with the
    statistics of each run's records when `stats` is given: exactly the records written)."""
    rejected = [bad.to_json() for bad in block.bad]
    if not block.num_rows:
        return EncodedBlock(block.num_read, 0, [], rejected)
    storage = None
    missing: dict[str, dict[str, int]] = {}
    if SERIALIZED in block.columns:  # checked against the schema by the reader's prepare()
        records = binary_column(block.columns[SERIALIZED])
        rows = np.arange(block.num_rows)
    else:
        encoded = encoder.encode(block.columns, source=task.path, positions=block.positions,
                                 lines=block.lines, offsets=block.offsets)
        rejected += [bad.to_json() for bad in encoded.bad]
        records, rows, storage = encoded.array, encoded.rows, encoded.storage
        missing = encoded.missing
    if not len(rows):
        return EncodedBlock(block.num_read, 0, [], rejected, missing=missing)
    positions = np.asarray(block.positions)[rows]
    hashed = keys.shuffle_keys(settings.shuffle.seed or 0, task.identity, positions)
    ids = keys.record_ids(task.ordinal, positions)
    sort_keys = hashed if settings.shuffled else ids
    if settings.fractions:
        which = keys.assign_splits(hashed, list(settings.fractions.values()))
        targets = [(name, np.flatnonzero(which == i)) for i, name in enumerate(settings.fractions)]
    else:
        targets = [(task.source, np.arange(len(rows)))]
    runs: list[SortedRun] = []
    gathered: dict[str, SplitStats] = {}
    for split, idx in targets:
        if len(idx):
            chosen = records.take(pa.array(idx)) if len(idx) < len(rows) else records
            runs.append(sorted_run(split, sort_keys[idx], ids[idx], chosen))
            if stats is not None:
                gathered[split] = stats(chosen, storage, rows[idx])
    return EncodedBlock(block.num_read, len(rows), runs, rejected, stats=gathered,
                        missing=missing)


class MergeSplitStatsFn(beam.CombineFn):
    """(split, SplitStats) parts -> one SplitStats per split (CombinePerKey): the report's
    accumulators merged as they arrive; bounded memory (fixed-size sketches per feature),
    picklable (worker processes, Dataflow)."""

    def create_accumulator(self) -> SplitStats | None:
        return None  # the first part becomes the accumulator (no schema parse per bundle)

    def add_input(self, acc: SplitStats | None, part: SplitStats) -> SplitStats:  # type: ignore[override]
        return part if acc is None else acc.merge(part)

    def merge_accumulators(self, accs: Any) -> SplitStats | None:  # type: ignore[override]
        out = None
        for acc in accs:
            if acc is not None:
                out = acc if out is None else out.merge(acc)
        return out

    def extract_output(self, acc: SplitStats | None) -> SplitStats | None:  # type: ignore[override]
        return acc


class MergeKeysFn(beam.CombineFn):
    """Block statistics -> ShuffleKeys, merged as they arrive (bounded memory: a fixed
    histogram per split, or at most MAX_INTERVALS intervals per split in input order)."""

    def __init__(self, shuffled: bool, max_intervals: int | None = None):
        self.shuffled = shuffled
        self.max_intervals = max_intervals

    def create_accumulator(self) -> ShuffleKeys:
        if self.max_intervals is None:
            return ShuffleKeys(self.shuffled)
        return ShuffleKeys(self.shuffled, self.max_intervals)

    def add_input(self, acc: ShuffleKeys, stats: RunKeys) -> ShuffleKeys:  # type: ignore[override]
        return acc.add(stats)

    def merge_accumulators(self, accs: Any) -> ShuffleKeys:  # type: ignore[override]
        accs = iter(accs)
        first = next(accs)
        for other in accs:
            first.merge(other)
        return first

    def compact(self, acc: ShuffleKeys) -> ShuffleKeys:  # type: ignore[override]
        return acc.compact()

    def extract_output(self, acc: ShuffleKeys) -> ShuffleKeys:  # type: ignore[override]
        return acc.compact()


@wire_errors
def plan_shards(stats: ShuffleKeys, settings: ConvertSettings, tally: Shared | None = None) -> ShardingPlan:
    """Every split's shard count and every shard's key and rank range (with notes, such as a
    raised shard count, that the finalize step puts in the manifest)."""
    live = _tally(tally)
    if live is not None:
        live.stage("planning")
    pause("shuffle")
    sharding = settings.sharding
    return make_plan(stats, settings.splits, sharding.shards, sharding.shard_size,
                     sharding.max_shard_bytes)


class _WriteShardFn(beam.DoFn):
    """Stage 2: write one shard from the element the strategy's steps hand it (`files`:
    shard plan and spill paths; `engine`: (split, index) and its chunks, the plan as a side
    input), through the strategy's `write_shard` (transforms/shuffle_steps.py).

    With `shard_threads` > 1 (the local runner running every bundle on one thread) the
    bundle's shards are written by that many threads at once and their results given at the
    bundle's end, where Beam's counters count them (a counter is the bundle thread's own)."""

    def __init__(self, settings: ConvertSettings, held: Shared | None = None,
                 tally: Shared | None = None, writers: Shared | None = None):
        self.spec = settings
        self.held_handle = held
        self.tally_handle = tally
        self.writers_handle = writers

    def setup(self) -> None:
        heap.keep_freed_memory()  # a piece's big buffers reused, not re-faulted (etl.base.heap)
        self.held = held_store(self.held_handle, self.spec)
        self.tally = _tally(self.tally_handle)
        self.writers = _writers(self.writers_handle)
        self.steps = self.spec.steps

    def start_bundle(self) -> None:
        threads = self.spec.shard_threads
        self.pool = ThreadPoolExecutor(threads, "etl-shard") if threads > 1 else None
        self.pending: list[Future[ShardResult]] = []

    def process(self, element: Any, plan: ShardingPlan | None = None):  # type: ignore[override]
        if self.pool is None:
            yield self._counted(self._write(element, plan))
        else:
            self.pending.append(self.pool.submit(self._write, element, plan))

    def finish_bundle(self):  # type: ignore[override]
        if self.pool is None:
            return
        try:
            for done in self.pending:  # the first failure is the bundle's; the rest are dropped
                yield GlobalWindows.windowed_value(self._counted(done.result()))
        finally:
            self.pool.shutdown(cancel_futures=True)
            self.pending = []

    @wire_errors
    def _write(self, element: Any, plan: ShardingPlan | None = None) -> ShardResult:
        settings = self.spec
        if self.tally is not None:
            self.tally.stage("writing shards")
        signals.check_cancelled("writing shards")
        pause("write")
        with _writing(self.writers):  # the shard: the launcher's clean-up waits for it
            result = self.steps.write_shard(element, plan, settings.staging_dir,
                                            settings.shard_format, self.held)
        if self.tally is not None:
            self.tally.add(written=result.num_records, shards=1)
        return result

    @staticmethod
    def _counted(result: ShardResult) -> ShardResult:
        Metrics.counter("etl", "records_written").inc(result.num_records)
        Metrics.counter("etl", "shards_written").inc()
        return result


@wire_errors
def _finalize(plan: ShardingPlan, shards: list[ShardResult], reports: list[list[dict[str, Any]]],
              stats: dict[str, SplitStats | None], settings: ConvertSettings,
              tally: Shared | None = None, writers: Shared | None = None) -> dict[str, Any]:
    """Every shard result, read report and the plan's notes -> the manifest (etl.output.finalize)."""
    with _writing(_writers(writers)):  # the launcher's clean-up waits for it
        return _finalize_run(plan, shards, reports, stats, settings, tally)


def _finalize_run(plan: ShardingPlan, shards: list[ShardResult], reports: list[list[dict[str, Any]]],
                  stats: dict[str, SplitStats | None], settings: ConvertSettings,
                  tally: Shared | None) -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    live = _tally(tally)
    if live is not None:
        live.stage("finalizing")
    signals.check_cancelled("finalizing")
    pause("finalize")


    read_plan = ReadPlan.load(settings.read_plan)
    schema = schema_from_dict(yaml.safe_load(settings.schema_yaml))
    document = None
    if settings.stats:
        per_split = {split: stats.get(split) or SplitStats(schema) for split in settings.splits}
        document = stats_document(schema, per_split)
    return finalize_run(settings.staging_dir, schema, settings.splits, settings.shuffle.seed,
                        settings.shard_format, list(shards), list(reports), plan.notes, read_plan.inputs,
                        expected_reads(read_plan.units, reports), stats=document)


class ConvertToShards(beam.PTransform):
    """Files -> shuffled, sharded TFRecords in `settings.staging_dir`, and one finalize step that
    checks every count and writes the dead letters, schema files and `manifest.json` there
    (the one result the launcher reads back before it publishes). Its output: the manifest.

    `held`: a Shared handle of this run's held-spill store (files strategy, local runner in
    one process); None writes every spill to disk. `tally`: a Shared handle of this run's live
    progress tally (etl.run.progress.Tally; local runner in one process), None counts Beam metrics
    only. `writers`: a Shared handle of this run's busy writers (etl.base.inflight; local
    runner in one process), which the launcher waits for before its clean-up. `early`: a
    Shared handle of the launcher's early read (transforms/early_read.py), which the read
    step takes for its task instead of reading it again; None reads every task."""

    def __init__(self, settings: ConvertSettings, held: Shared | None = None,
                 tally: Shared | None = None, writers: Shared | None = None,
                 early: Shared | None = None):
        super().__init__()
        self.spec = settings
        self.held = held
        self.tally = tally
        self.writers = writers
        self.early = early

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        beam_fixes.apply()  # before Pipeline.run(): the local runner's data plane drops records
        settings = self.spec
        tally = self.tally
        units = (pbegin
                 | "Start" >> beam.Impulse()
                 | "ListInputFiles" >> beam.FlatMap(lambda _, path: ReadPlan.load(path).units,
                                                    settings.read_plan))
        if settings.spread_files:  # several files to scan for cut points: on several workers
            units = units | "DistributeFiles" >> beam.Reshuffle()
        tasks = units | "SplitFiles" >> beam.ParDo(_SplitFilesFn(settings)).with_output_types(ReadTask)
        if settings.spread_reads:
            tasks = tasks | "DistributeReads" >> beam.Reshuffle()
        steps = settings.steps  # the shuffle strategy's Beam steps (transforms.shuffles)
        run_type = steps.run_type  # what stage 1 emits: its declared coder (coders.py)
        read_encode = _ReadEncodeFn(settings, self.held, self.tally, self.writers, self.early)
        blocks = tasks | "ReadEncode" >> beam.ParDo(read_encode).with_output_types(
            run_type).with_outputs(REPORTS, STATS, main="runs")
        reports = blocks[REPORTS]
        # the statistics of the records written, per split (stats.json; the report's numbers)
        stats = blocks[STATS] | "GatherStats" >> beam.CombinePerKey(
            MergeSplitStatsFn())
        blocks = blocks.runs
        # a single-key CombinePerKey: fewer pipeline nodes than CombineGlobally (whose
        # default-value branch is not needed, see the empty run per input file)
        plan = (blocks
                | "BlockStats" >> beam.Map(lambda b, shuffled, steps: (None, steps.run_keys(
                    b, shuffled)), settings.shuffled, steps)
                | "MergeStats" >> beam.CombinePerKey(MergeKeysFn(settings.shuffled))
                | "PlanShards" >> beam.MapTuple(lambda _, stats: plan_shards(stats, settings, tally)))
        # the strategy's steps bring every shard its runs and write it (top-level labels)
        results = steps.shard_results(blocks, plan, _WriteShardFn(settings, self.held, self.tally,
                                                                  self.writers))
        # one finalize step, once every shard and read report is in (side inputs)
        return plan | "Finalize" >> beam.Map(_finalize, beam.pvalue.AsList(results),
                                             beam.pvalue.AsList(reports),
                                             beam.pvalue.AsDict(stats), settings, self.tally,
                                             self.writers)


__all__ = ["ConvertSettings", "ConvertToShards", "flat_settings", "MergeKeysFn", "ReadTask", "ShardResult"]
