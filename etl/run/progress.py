"""Progress of a running conversion: the model (counts, stage, percent, ETA) and how a person
sees it: a live bar on a terminal (rich), one plain line every few seconds elsewhere (CI logs,
schedulers, pipes).

Beam-free. The pipeline's DoFns add to a `Tally` (one per run, shared in-process) or count
Beam metrics; transforms/progress_feed.py turns either into `Snapshot`s and a reporter thread hands
them to a renderer here. Percent and ETA come from the input bytes counted before the run
(every read unit's size): the read stage credits each block's bytes as it is read
(`TaskBytes`), then writing shards moves the rest (records written out of records encoded).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, TextIO

from etl.base.units import format_size

MODES = ("auto", "bar", "lines", "none")
DEFAULT_EVERY = 10.0  # seconds between plain lines
# the stages of a run, in order; a tally only moves forward through them
STAGES = ("starting", "reading+encoding", "planning", "writing shards", "finalizing",
          "checking", "publishing", "done")
# share of the whole run the read stage stands for in percent and ETA. Measured on the 1M-row
# benchmark CSV (local runner, 2 workers): reading+encoding ~80% of the pipeline's time,
# planning and writing the shards the rest.
READ_SHARE = 0.8
COUNTS = ("read", "rejected", "encoded", "written", "shards", "bytes")


class Tally:
    """Live counts of one run, added to by the DoFns of this process (per block or shard,
    never per record) and read by the reporter thread. Thread-safe; one per run (no
    module-global state: the run shares it through Beam's `Shared`, like its held spills)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTS, 0)
        self._stage = 0

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                self._counts[name] += int(n)

    def stage(self, name: str) -> None:
        """Move to stage `name` unless the run is past it already (parallel tasks)."""
        rank = STAGES.index(name)
        with self._lock:
            self._stage = max(self._stage, rank)

    def counts(self) -> tuple[str, dict[str, int]]:
        with self._lock:
            return STAGES[self._stage], dict(self._counts)


@dataclass
class TaskBytes:
    """The input bytes one read task stands for, [lo, hi) of its file, credited as its blocks
    arrive: each block's `end_offset` (clamped to the range) advances it, and `finish()`
    credits what is left, so every task, and the run, ends on its exact byte count."""

    lo: int
    hi: int
    done: int = 0

    def advance(self, end_offset: int | None) -> int:
        """Bytes newly credited by a block that ends at `end_offset` (None: unknown)."""
        if end_offset is None:
            return 0
        reached = min(max(int(end_offset), self.lo), self.hi) - self.lo
        if reached <= self.done:
            return 0
        delta, self.done = reached - self.done, reached
        return delta

    def finish(self) -> int:
        delta = max(self.hi - self.lo - self.done, 0)
        self.done += delta
        return delta


@dataclass(frozen=True)
class Snapshot:
    """What is known about a run at one moment; None: not known on this runner (the local
    runner's multi-process mode counts in other processes and reports only at the end)."""

    elapsed: float
    stage: str
    bytes_total: int
    read: int | None = None
    written: int | None = None
    rejected: int | None = None
    encoded: int | None = None
    bytes_done: int | None = None
    shards: int | None = None

    @property
    def fraction(self) -> float | None:
        """Share of the run done, 0..1: READ_SHARE for the bytes read, the rest for the
        records written out of those encoded; None when the bytes read are not known."""
        if self.stage in ("finalizing", "checking", "publishing", "done"):
            return 1.0
        if self.bytes_done is None:
            return None
        read = min(self.bytes_done / self.bytes_total, 1.0) if self.bytes_total > 0 else 0.0
        write = 0.0
        if self.encoded and self.written is not None and (read >= 1.0 or not self.bytes_total):
            write = min(self.written / self.encoded, 1.0)
        return READ_SHARE * read + (1.0 - READ_SHARE) * write

    @property
    def percent(self) -> float | None:
        f = self.fraction
        return None if f is None else 100.0 * f

    @property
    def eta(self) -> float | None:
        """Seconds left at the pace so far; None before anything is done or when unknown."""
        f = self.fraction
        if f is None or f <= 0.0:
            return None
        if f >= 1.0:
            return 0.0
        return self.elapsed * (1.0 - f) / f

    @property
    def rate(self) -> float | None:
        """Records read per second so far."""
        if self.read is None or self.elapsed <= 0:
            return None
        return self.read / self.elapsed


def clock(seconds: float | None) -> str:
    """H:MM:SS (or M:SS under an hour); '-' when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def format_line(s: Snapshot) -> str:
    """One plain progress line (the same facts the bar shows)."""
    pct = "" if s.percent is None else f" {s.percent:5.1f}%"
    parts = [f"progress:{pct} {s.stage}"]
    if s.read is None:
        parts.append("counts at the end (the runner reports them when done)")
    else:
        parts.append(f"{_count(s.read)} read, {_count(s.written)} written, "
                     f"{_count(s.rejected)} rejected")
    if s.rate is not None:
        parts.append(f"{s.rate:,.0f} records/s")
    if s.bytes_done is not None:
        parts.append(f"{format_size(s.bytes_done)} of {format_size(s.bytes_total)}")
    parts.append(f"elapsed {clock(s.elapsed)}")
    if s.eta is not None:
        parts.append(f"ETA {clock(s.eta)}")
    return ", ".join(parts)


@dataclass(frozen=True)
class ProgressConfig:
    """How a run shows its progress: `bar` (rich, for a terminal) or `lines` (every `every`
    seconds), written to `stream` (the real stderr, also while fd 2 goes to the run's log)."""

    mode: str
    stream: TextIO
    every: float = DEFAULT_EVERY


def resolve(mode: str, stream: TextIO | None, every: float = DEFAULT_EVERY) -> ProgressConfig | None:
    """`--progress` as given -> what to show; auto: a bar on a terminal, lines otherwise."""
    if mode not in MODES:
        raise ValueError(f"progress mode must be one of {MODES}, got {mode!r}")
    if mode == "none" or stream is None:
        return None
    if mode == "auto":
        try:
            mode = "bar" if stream.isatty() else "lines"
        except (ValueError, OSError):
            mode = "lines"
    return ProgressConfig(mode, stream, float(every))


class LineRenderer:
    """One line every `every` seconds (the first after `every`: a short run prints none, its
    summary says it all)."""

    def __init__(self, stream: TextIO, every: float):
        self.stream, self.every = stream, max(float(every), 0.05)
        self.last = time.monotonic()

    @property
    def tick(self) -> float:
        return min(self.every, 0.5)

    def update(self, s: Snapshot) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._write(format_line(s))

    def close(self, s: Snapshot | None) -> None:
        """Nothing more: the summary follows."""

    def _write(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not fail the run


class BarRenderer:
    """A live bar (rich.progress) on a terminal, two lines that fit 80 columns: stage, bar,
    percent, elapsed and ETA (ours, from the model above, not rich's own estimate); under it
    records read, written and rejected, rate and bytes read."""

    tick = 0.2

    def __init__(self, stream: TextIO):
        from rich.console import Console  # noqa: PLC0415
        from rich.progress import BarColumn, Progress, TextColumn  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        class _TwoLines(Progress):
            def get_renderables(self) -> Any:
                yield self.make_tasks_table(self.tasks)
                for task in self.tasks:
                    yield Text("  " + task.fields["detail"], overflow="ellipsis", no_wrap=True)

        console = Console(file=stream, force_terminal=True, stderr=False)
        self.progress = _TwoLines(
            TextColumn("[bold cyan]{task.fields[stage]:<16}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[pct]:>6}"),
            TextColumn("elapsed {task.fields[elapsed]}  ETA {task.fields[eta]}"),
            console=console, auto_refresh=False, transient=False,
            redirect_stdout=False, redirect_stderr=False)
        self.task: Any = self.progress.add_task("run", total=1000, **self._fields(None))
        self.progress.start()
        self.handlers = _LogAbove.install(stream, console)

    def _fields(self, s: Snapshot | None) -> dict[str, Any]:
        if s is None:
            return {"stage": STAGES[0], "pct": "", "detail": "", "elapsed": "0:00", "eta": "-"}
        if s.read is None:
            detail = "records: counted by the runner's workers, shown at the end"
        else:
            detail = f"{_count(s.read)} read · {_count(s.written)} written"
            if s.rejected:
                detail += f" · {s.rejected:,} rejected"
            if s.rate is not None:
                detail += f" · {s.rate:,.0f} records/s"
            if s.bytes_done is not None:
                detail += f" · {format_size(s.bytes_done)} of {format_size(s.bytes_total)}"
        return {"stage": s.stage, "pct": "" if s.percent is None else f"{s.percent:5.1f}%",
                "detail": detail, "elapsed": clock(s.elapsed), "eta": clock(s.eta)}

    def update(self, s: Snapshot) -> None:
        f = s.fraction
        self.progress.update(self.task, completed=None if f is None else round(1000 * f),
                             **self._fields(s))
        try:
            self.progress.refresh()
        except (OSError, ValueError):
            pass

    def close(self, s: Snapshot | None) -> None:
        if s is not None:
            self.update(s)
        try:
            self.progress.stop()
        except (OSError, ValueError):
            pass
        finally:
            _LogAbove.restore(self.handlers)


class _LogAbove:
    """While the bar is live, the log handlers writing to its terminal write through rich's
    console instead: a record then prints on its own lines above the bar, which redraws below
    it (written straight to the stream, it lands in the middle of the bar and the next redraw
    overwrites it). `install` swaps the streams of the root logger's stream handlers that write
    to the bar's stream or the same terminal; `restore` puts them back when the bar stops."""

    def __init__(self, console: Any):
        self.console = console
        self.pending = ""

    def write(self, text: str) -> int:
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        for line in lines:
            try:
                self.console.out(line, highlight=False)
            except (OSError, ValueError):
                pass  # a closed terminal must not fail the run
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.write("\n")

    @classmethod
    def install(cls, stream: TextIO, console: Any) -> list[tuple[logging.StreamHandler, Any]]:
        swapped = []
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and \
                    _same_terminal(getattr(handler, "stream", None), stream):
                swapped.append((handler, handler.setStream(cls(console))))  # type: ignore[arg-type]
        return swapped

    @staticmethod
    def restore(swapped: list[tuple[logging.StreamHandler, Any]]) -> None:
        for handler, old in swapped:
            handler.setStream(old)  # flushes what is pending through the console first


def _same_terminal(a: Any, b: Any) -> bool:
    """The same stream object, or two descriptors of the same open terminal (a handler on
    sys.stderr while the bar writes to a copy of fd 2)."""
    if a is None or b is None:
        return False
    if a is b:
        return True
    try:
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (sa.st_dev, sa.st_ino, sa.st_rdev) == (sb.st_dev, sb.st_ino, sb.st_rdev)


def renderer(config: ProgressConfig) -> LineRenderer | BarRenderer:
    if config.mode == "bar":
        return BarRenderer(config.stream)
    return LineRenderer(config.stream, config.every)
