"""What a job will take before anything is launched: records, bytes to shuffle, CPU, workers ×
hours, object operations and a cost range (`run JOB --estimate`).

Only the inputs' sizes (the read plan's listing) and the first block of each source (about a
MB or a few; `SAMPLE_BYTES`) are read. The sample is read and encoded by the job's own reader
and encoder, so records per input byte, framed bytes per record and the rejected share are
this job's, not a guess. CPU comes from the per-core rates measured on this repository's
machine (`etl/job/estimate_rates.json`, written by `python -m benchmarks.estimate_rates`): CPU
seconds per input byte for text-like and binary inputs. On Dataflow the range goes from that
rate to twice it (the shuffle service's I/O, TLS on object reads and writes: docs/scale.md),
priced with the list prices in `etl/job/estimate_prices.json` (their date and source inside).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl.base.errors import EXIT_BAD_INPUT, BadInputError, BadRecord
from etl.contract.codec import Encoder
from etl.contract.schema import Schema
from etl.formats.proto_wire import binary_column, data_of, lengths, offsets_of
from etl.formats.tfrecord import frame_records
from etl.job.config import JobConfig
from etl.job.read_plan import WHOLE_FILE, ReadPlan, ReadUnit
from etl.shuffle import chunk_codec, strategy_for
from etl.shuffle.planning import num_shards_for
from etl.sources import make_reader
from etl.sources.base import DEFAULT_BLOCK_ROWS, Source, Split
from etl.sources.json_array import is_json_array
from etl.storage import fs

SAMPLE_BYTES = 1 << 20  # read blocks of each source until this many input bytes are behind
SAMPLE_BLOCK_ROWS = 8192  # small blocks, so the sample stops near SAMPLE_BYTES
COMPRESSED = (".gz", ".zz", ".zlib", ".bz2")
WINDOW = 256 << 10  # bytes of a text file read at a few places to see its rows' length drift
TEXT_FORMATS = frozenset({"csv", "tsv", "jsonl", "text"})
# a generator's records are its function's to make: calling it would run the user's code,
# which an estimate ("nothing is launched") must not do (--dry-run does not either)
UNSAMPLED = frozenset({"python"})
FRAMING = 16  # bytes of TFRecord framing per record
CHUNK_OVERHEAD = 24  # key, id and record length per record in an engine chunk, unpacked
UTILISATION = 0.7  # share of a worker's cores busy on average (assumption)
WORKER_START_HOURS = 4 / 60  # a Dataflow worker is billed from boot: 3-5 min before work
TARGET_WORK_SECONDS = 600  # no worker count given: as many as finish the work in ~10 min
_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str) -> dict[str, Any]:
    return json.loads(fs.read_text(os.path.join(_HERE, name)))


@dataclass
class Sample:
    """What the first block(s) of one source showed."""

    source: str
    path: str
    fmt: str
    input_bytes: int  # of the unit's file read for the sample
    read: int
    encoded: int
    framed_bytes: int
    whole_file: bool
    spread: float = 1.0  # lines per byte of the whole file / of the sampled head (text)
    bad: list[BadRecord] = field(default_factory=list)  # the sample's rejected records
    unsampled: bool = False  # user code (`format: python`): never run by an estimate
    # the sample's records as the engine shuffles them: framed, in a shuffled order, with a
    # key and id each, packed by etl.shuffle.chunk_codec (compressed); 0: nothing encoded
    packed_bytes: int = 0

    @property
    def rejected(self) -> int:
        return self.read - self.encoded

    @property
    def records_per_byte(self) -> float:
        return self.encoded / max(1, self.input_bytes) * self.spread

    @property
    def framed_per_record(self) -> float:
        return self.framed_bytes / max(1, self.encoded)

    @property
    def packed_per_record(self) -> float:
        """Bytes per record through the engine's shuffle; without a packed sample, unpacked."""
        if not self.packed_bytes:
            return self.framed_per_record + CHUNK_OVERHEAD
        return self.packed_bytes / max(1, self.encoded)


def packed_size(records: pa.Array, seed: int) -> int:
    """Bytes of `records` (serialized) as one engine chunk: framed, in a random order (a
    shuffled run's records are neighbours by chance), random keys (a shuffled run's keys are
    a hash, incompressible) and ids, packed by etl.shuffle.chunk_codec."""
    n = len(records)
    rng = np.random.default_rng(seed)
    framed = frame_records(binary_column(records), rng.permutation(n))
    offsets = offsets_of(framed)
    keys = np.sort(rng.integers(0, 1 << 64, n, dtype=np.uint64))
    ids = np.sort(rng.integers(0, 1 << 40, n, dtype=np.uint64))
    return len(chunk_codec.pack(keys, ids, offsets - offsets[0], data_of(framed)))


def sample_source(name: str, cfg: dict[str, Any], unit: ReadUnit, schema: Schema,
                  base_dir: str, max_record_bytes: int) -> Sample:
    """Read and encode about the first SAMPLE_BYTES of one unit of source `name`: for a
    plain text file exactly the rows starting in its first SAMPLE_BYTES (a split of it, as a
    read task would read it), for other files the first read chunks (Block.end_offset)."""
    rows = min(int(cfg.get("block_rows", DEFAULT_BLOCK_ROWS)), SAMPLE_BLOCK_ROWS)
    reader = make_reader({**cfg, "block_rows": rows}, base_dir, f"sources.{name}")
    reader.prepare(schema, max_record_bytes)
    encoder = Encoder(schema, max_record_bytes=max_record_bytes)
    fmt = str(cfg.get("format"))
    text = fmt in TEXT_FORMATS and not unit.path.endswith(COMPRESSED)
    split = _sample_split(name, reader, unit, fmt, text, max_record_bytes)
    counts = [0, 0, 0, 0]  # read, encoded, framed, packed bytes: up to input byte `at`
    pending = [0, 0, 0, 0]  # blocks that end at the same reported offset (one read chunk)
    bad: list[BadRecord] = []  # rejected records, as `counts`
    pending_bad: list[BadRecord] = []
    at = chunk_end = 0
    whole = not split.stop
    blocks = reader.read_split(split)
    try:
        for block in blocks:
            end = chunk_end if block.end_offset is None else block.end_offset
            if not split.stop and end > chunk_end and any(pending):  # a read chunk is complete
                counts = [x + y for x, y in zip(counts, pending, strict=True)]
                bad += pending_bad
                pending, pending_bad, at = [0, 0, 0, 0], [], chunk_end
                if at >= SAMPLE_BYTES:
                    whole = False
                    break
            chunk_end = max(chunk_end, end)
            pending[0] += block.num_read
            pending_bad += block.bad
            if block.num_rows:
                out = encoder.encode(block.columns, source=unit.path, positions=block.positions,
                                     lines=block.lines, offsets=block.offsets)
                pending[1] += len(out.rows)
                pending_bad += out.bad
                pending[2] += int(lengths(binary_column(out.array)).sum()) + FRAMING * len(out.rows)
                pending[3] += packed_size(out.array, len(out.rows)) if len(out.rows) else 0
        else:
            counts = [x + y for x, y in zip(counts, pending, strict=True)]
            bad += pending_bad
            at = split.stop or unit.num_bytes
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            close()
    if split.stop and counts[0] > counts[1]:
        counts[1] += 1  # the row the sample's end cut in two is not a rejected one
        bad = bad[:-1]
    sample = Sample(name, unit.path, fmt, at, *counts[:3], whole, bad=bad,
                    packed_bytes=counts[3])
    if text and not whole:
        sample.spread = _line_spread(unit.path, unit.num_bytes, at)
    return sample


def _sample_split(name: str, reader: Source, unit: ReadUnit, fmt: str, text: bool,
                  max_record_bytes: int) -> Split:
    """What the sample reads: a large plain text file's first SAMPLE_BYTES (at least its first
    line) as a split of it, any other file whole (read until SAMPLE_BYTES are passed)."""
    if text and unit.num_bytes > SAMPLE_BYTES:
        reader.splits(unit.path, WHOLE_FILE)  # the reader's own launch checks (a CSV header)
        array = fmt == "jsonl" and is_json_array(unit.path, max_record_bytes)  # not lines
        first = 0 if array else _first_line_end(unit.path, name, max_record_bytes)
        stop = max(SAMPLE_BYTES, first)
        return Split(unit.path, index=0, count=2, start=0, stop=stop, size=unit.num_bytes)
    return Split(unit.path, size=unit.num_bytes)


def _first_line_end(path: str, source: str, max_record_bytes: int) -> int:
    """Where the first line of a plain text file ends (after its newline), read a MiB at a
    time and nothing kept: the sample then holds at least one whole line. A file whose first
    `max_record_bytes` hold no line break (one huge line, a NUL-filled or sparse file) is
    refused: its first record is over the limit, and no rate can be read from it."""
    with fs.open_read(path) as fh:
        at = 0
        while at <= max_record_bytes:
            window = fh.read(min(SAMPLE_BYTES, max_record_bytes + 1 - at))
            if not window:
                return at
            nl = window.find(b"\n")
            if nl >= 0:
                return at + nl + 1
            at += len(window)
    raise BadInputError(f"source {source}: {path}: line 1 has no line break in its first "
                        f"{max_record_bytes:,} bytes (max_record_bytes): the run would reject "
                        "it as oversized_record; is this a text file?")


def _line_spread(path: str, size: int, head: int) -> float:
    """How many more lines per byte the rest of a text file has than its first `head` bytes:
    newlines counted in WINDOW-byte windows at a quarter, half, three quarters and the end
    (row lengths drift: ids grow, later days are wider). 1.0 where it cannot tell (a gzip
    file has no random access)."""
    if path.endswith(COMPRESSED) or size <= head + WINDOW:
        return 1.0
    with fs.open_read(path) as fh:
        first = fh.read(min(head, WINDOW))
        base = first.count(b"\n") / max(1, len(first))
        rest = []
        for at in (size // 4, size // 2, 3 * size // 4, size - WINDOW):
            fh.seek(max(head, at))
            window = fh.read(WINDOW)
            rest.append(window.count(b"\n") / max(1, len(window)))
    if not base:
        return 1.0
    # the head weighs its share of the file, the windows stand for the rest
    share = head / size
    return share + (1 - share) * (sum(rest) / len(rest)) / base


@dataclass
class Estimate:
    job: str
    runner: str
    inputs: int
    input_bytes: int
    samples: list[Sample]
    records: float
    per_split: dict[str, float]
    framed_bytes: float
    shuffle_bytes: float
    cpu_seconds: float  # at the measured rate
    startup_cpu_seconds: float
    shards: dict[str, int]
    read_tasks: int
    via: str
    object_ops: dict[str, int]
    machine: dict[str, Any] = field(default_factory=dict)
    workers: int = 0
    workers_given: bool = False
    hours: tuple[float, float] = (0.0, 0.0)  # wall hours, low-high
    cost: tuple[float, float] | None = None
    prices: dict[str, Any] = field(default_factory=dict)
    rates: dict[str, Any] = field(default_factory=dict)


def estimate(job: JobConfig, plan: ReadPlan, schema: Schema, *, runner: str, via: str,
             split_bytes: int, local: bool, workers: int | None = None,
             machine_type: str | None = None, disk_gb: int | None = None) -> Estimate:
    """The estimate for `job` whose inputs `plan` lists (nothing else is read but samples)."""
    rates_doc = _load("estimate_rates.json")
    rates = rates_doc["rates"]
    first: dict[str, ReadUnit] = {}  # each source's first unit, in one pass over the plan
    source_bytes: dict[str, int] = {}
    for unit in plan.units:
        first.setdefault(unit.source, unit)
        source_bytes[unit.source] = source_bytes.get(unit.source, 0) + unit.num_bytes
    samples = _sample_sources(job, first, schema)
    records, framed, packed, cpu = _totals(plan, samples, rates)
    fractions = job.fractions or {}
    if fractions:
        per_split = {k: records * v for k, v in fractions.items()}
    else:
        per_split = {name: source_bytes[name] * samples[name].records_per_byte
                     for name in samples}
    shards = {}
    for split, n in per_split.items():
        share = framed * n / max(records, 1)
        shards[split] = num_shards_for(int(share), job.sharding.shards, job.sharding.shard_size,
                                       job.sharding.max_shard_bytes)[0]
    read_tasks = sum(max(1, math.ceil(u.num_bytes / split_bytes)) if split_bytes else 1
                     for u in plan.units)
    shuffle = packed if _runner_shuffle(via) else framed
    ops = object_operations(records, shards, read_tasks, via, job, plan)
    startup = max(r["startup_cpu_seconds"] for r in rates.values())
    est = Estimate(job.path, runner, len(plan.inputs), sum(i["num_bytes"] for i in plan.inputs),
                   list(samples.values()), records, per_split, framed, shuffle, cpu, startup,
                   shards, read_tasks, via, ops, rates=rates_doc)
    if local:
        cores = os.cpu_count() or 1
        est.workers, est.machine = 1, {"name": f"this machine ({cores} cores)", "vcpus": cores}
        wall = (cpu + startup) / (cores * UTILISATION) / 3600
        est.hours = (wall, wall * 1.5)
        return est
    _on_workers(est, cpu, shuffle, via, workers, machine_type, disk_gb)
    return est


def _runner_shuffle(via: str) -> bool:
    """Whether the strategy moves runs through the runner's shuffle (billed per GB, packed
    bytes), not as spill files (object operations, framed bytes): etl.shuffle's table."""
    return bool(strategy_for(via, None).RUNNER_SHUFFLE)


def _sample_sources(job: JobConfig, first: dict[str, ReadUnit],
                    schema: Schema) -> dict[str, Sample]:
    """A sample of each source's first unit (user code is not run: an empty sample)."""
    samples = {}
    for name, cfg in job.sources.items():
        if name in first and cfg.get("format") in UNSAMPLED:
            samples[name] = Sample(name, first[name].path, str(cfg.get("format")), 0, 0, 0, 0,
                                   False, unsampled=True)
        elif name in first:
            samples[name] = sample_source(name, cfg, first[name], schema, job.base_dir,
                                          job.reading.max_record_bytes)
    return samples


def _totals(plan: ReadPlan, samples: dict[str, Sample],
            rates: dict[str, Any]) -> tuple[float, float, float, float]:
    """(records, framed bytes, packed bytes, CPU seconds) of all the plan's units, each scaled
    from its source's sample."""
    records = framed = packed = cpu = 0.0
    for unit in plan.units:
        s = samples[unit.source]
        n = s.encoded if s.whole_file and unit.path == s.path else unit.num_bytes * s.records_per_byte
        records += n
        framed += n * s.framed_per_record
        packed += n * s.packed_per_record
        kind = "text" if s.fmt in TEXT_FORMATS else "binary"
        cpu += unit.num_bytes * rates[kind]["cpu_seconds_per_input_byte"]
    return records, framed, packed, cpu


def _on_workers(est: Estimate, cpu: float, shuffle: float, via: str, workers: int | None,
                machine_type: str | None, disk_gb: int | None) -> None:
    """A cloud run's machine, workers, hours and cost, set on `est`."""
    prices = _load("estimate_prices.json")
    name = machine_type or prices["default_machine_type"]
    machine = prices["machine_types"].get(name)
    if machine is None:
        vcpus = _vcpus_from_name(name)
        machine = {"vcpus": vcpus, "memory_gb": 4.0 * vcpus, "guessed": True}
    machine = {"name": name, **machine}
    if not workers:
        needed = cpu / (machine["vcpus"] * UTILISATION * TARGET_WORK_SECONDS)
        workers = max(1, min(prices["max_workers_assumed"], math.ceil(needed)))
    else:
        est.workers_given = True
    work = [cpu * k / (workers * machine["vcpus"] * UTILISATION) / 3600 for k in (1, 2)]
    est.hours = (WORKER_START_HOURS + work[0], WORKER_START_HOURS + work[1])
    per_worker_hour = (machine["vcpus"] * prices["vcpu_hour"]
                       + machine["memory_gb"] * prices["memory_gb_hour"]
                       + (disk_gb or prices["disk_gb_default"]) * prices["pd_gb_hour"])
    shuffle_gb = shuffle / 1e9 if _runner_shuffle(via) else 0.0
    est.cost = tuple(workers * h * per_worker_hour + shuffle_gb * prices["shuffle_gb"] * k
                     for h, k in zip(est.hours, (1, 2), strict=True))  # type: ignore[assignment]
    est.workers, est.machine, est.prices = workers, machine, prices


def _vcpus_from_name(name: str) -> int:
    """n2-standard-8 -> 8; anything unreadable -> 1."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def object_operations(records: float, shards: dict[str, int], read_tasks: int, via: str,
                      job: JobConfig, plan: ReadPlan) -> dict[str, int]:
    """Object-store requests of a run, counted the way benchmarks/shuffle_ops.py counts them:
    one ranged read stream per read task, one write per shard and metadata file, and on an
    object-store output a copy of each into the version folder at publish."""
    n_shards = sum(shards.values())
    ops = {"input reads": read_tasks, "shard writes": n_shards, "metadata writes": 4}
    if not _runner_shuffle(via):  # files: a spill per block and split, each read by every shard
        total = max(1, sum(u.num_bytes for u in plan.units))  # once: 100k files stay linear
        blocks = sum(max(1, math.ceil(records * u.num_bytes / total / DEFAULT_BLOCK_ROWS))
                     for u in plan.units)
        spills = blocks * max(1, len(shards))
        ops["spill writes"] = spills
        ops["spill reads"] = 2 * spills * max(shards.values(), default=1)
        ops["spill deletes"] = spills
    if job.output.startswith("gs://"):
        ops["publish copies"] = n_shards + 4
    return ops


def sample_verdict(est: Estimate, max_bad_fraction: float) -> tuple[str, int]:
    """('', 0) when the sampled records pass the job's bad-record limit; else one line saying
    the real run would fail, and the exit code it would give (3, as check_threshold in
    etl.output.accounting: more rejected than `max_bad_fraction`)."""
    read = sum(s.read for s in est.samples)
    rejected = sum(s.rejected for s in est.samples)
    if not rejected or rejected / max(read, 1) <= max_bad_fraction:
        return "", 0
    codes: dict[str, int] = {}
    for s in est.samples:
        for b in s.bad:
            codes[b.code] = codes.get(b.code, 0) + b.count
    reasons = ", ".join(f"{c} {n}" for c, n in sorted(codes.items(), key=lambda kv: -kv[1]))
    first = next((b for s in est.samples for b in s.bad), None)
    return (f"  would fail        {rejected:,} of {read:,} sampled records rejected "
            f"({rejected / read:.2%} > max_bad_fraction {max_bad_fraction:.2%})"
            + (f": {reasons}" if reasons else "")
            + f"; the real run would exit {EXIT_BAD_INPUT} and publish nothing."
            + (f" First: {first.message()}" if first is not None else "")), EXIT_BAD_INPUT


def lines(est: Estimate) -> list[str]:
    """The table `run --estimate` prints."""
    rates = est.rates
    out = [f"Estimate for {est.job} on {est.runner} (nothing was launched or written)"]
    mb = est.input_bytes / 1e6
    out.append(f"  inputs            {est.inputs:,} file(s), {mb:,.1f} MB")
    for s in est.samples:
        how = "the whole file" if s.whole_file else f"its first {s.input_bytes / 1e6:.1f} MB"
        bad = s.read - s.encoded
        name = "source" if s.source == "*" else f"source {s.source}"
        if s.unsampled:
            out.append(f"  not sampled       {name} ({s.fmt}): its function is your code, which "
                       "an estimate never runs; its records are not counted below")
            continue
        drift = (f"; rows {1 / s.spread:.2f}x as long further on (newlines at 4 places)"
                 if abs(s.spread - 1) > 0.02 else "")
        out.append(f"  sampled           {name} ({s.fmt}): {how} of {os.path.basename(s.path)}"
                   f": {s.encoded:,} records, {s.framed_per_record:,.0f} B each framed"
                   + (f", {bad:,} rejected of {s.read:,}" if bad else "") + drift)
    splits = ", ".join(f"{k} ~{v:,.0f}" for k, v in est.per_split.items())
    out.append(f"  records           ~{est.records:,.0f} ({splits})")
    ratio = est.shuffle_bytes / max(1.0, est.framed_bytes)
    what = (f"through the runner's shuffle (records packed: {ratio:.2f}x their framed bytes, "
            "from the sample)" if _runner_shuffle(est.via)
            else "through spill files (framed records)")
    out.append(f"  bytes to shuffle  ~{est.shuffle_bytes / 1e6:,.1f} MB {what}; "
               f"shards: " + ", ".join(f"{k} {v}" for k, v in est.shards.items()))
    low = est.cpu_seconds
    amount = (f"{low / 3600:,.2f}-{2 * low / 3600:,.2f} core-hours" if low >= 360
              else f"{low:,.1f}-{2 * low:,.1f} core-seconds")
    if est.cost is None:
        amount = f"{low:,.1f} core-seconds" if low < 360 else f"{low / 3600:,.2f} core-hours"
    out.append(f"  CPU               {amount} + {est.startup_cpu_seconds:.1f} s start-up per "
               f"process, at {_rate_text(rates)}")
    h0, h1 = est.hours
    m = est.machine
    if est.cost is None:
        out.append(f"  wall time         ~{h0 * 3600:,.0f}-{h1 * 3600:,.0f} s on {m['name']}")
    else:
        count = f"{est.workers}" + ("" if est.workers_given else " (assumed: enough to finish in "
                                    "~10 min; set --num_workers or --max_num_workers)")
        out.append(f"  workers × hours   {count} × {m['name']} ({m['vcpus']} vCPU, "
                   f"{m['memory_gb']:g} GB{', guessed from its name' if m.get('guessed') else ''})"
                   f" for ~{h0:.2f}-{h1:.2f} h each, start-up included: "
                   f"{est.workers * h0:.2f}-{est.workers * h1:.2f} worker-hours")
    ops = ", ".join(f"{v:,} {k}" for k, v in est.object_ops.items())
    out.append(f"  object operations ~{ops}")
    if est.cost is not None:
        p = est.prices
        out.append(f"  cost              ${est.cost[0]:,.2f}-${est.cost[1]:,.2f} (vCPU "
                   f"${p['vcpu_hour']}/h, memory ${p['memory_gb_hour']}/GB-h, disk "
                   f"${p['pd_gb_hour']}/GB-h, Shuffle ${p['shuffle_gb']}/GB processed; "
                   f"{p['source']})")
    return out


def _rate_text(rates: dict[str, Any]) -> str:
    r = rates["rates"]
    per = [f"{1 / r[k]['cpu_seconds_per_input_byte'] / 1e6:.0f} MB/core-s {k}" for k in r]
    return f"{' and '.join(per)} (measured {rates['measured']}: etl/job/estimate_rates.json)"
