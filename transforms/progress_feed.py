"""Where a running pipeline's progress comes from (feeds), and the reporter thread that shows it
(etl.run.progress renders) while the main thread runs the pipeline, so Ctrl-C still reaches it.

Why two feeds. Our DoFns count Beam metrics (namespace "etl": records_read, records_rejected,
records_encoded, records_written, shards_written, bytes_read). A runner whose `p.run()` returns
at once (Dataflow, portable runners) serves them while the job runs: `MetricsFeed` polls
`result.metrics().query(...)` (attempted counters) every tick while `wait_until_finish` runs.
The local FnApiRunner does not: its `run_pipeline` returns only after the last stage
(apache_beam/runners/portability/fn_api_runner/fn_runner.py ~line 510 returns
RunnerResult(DONE, ...)), and even the embedded portable job service's GetJobMetrics answers
nothing until the job is done (local_job_service.py line 154). So when every stage runs in this
process (cli.run.shares_process: in_memory, multi_threading), the DoFns also add to this
run's `Tally`, shared through Beam's `Shared` handle exactly as the held-spill store is, and
`TallyFeed` reads it. In the local runner's multi_processing mode the counting happens in
worker processes with no shared memory: `ClockFeed` shows the elapsed time and stage only, and
the counts come with the metrics at the end.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from apache_beam.metrics.metric import MetricsFilter

from etl.run.progress import STAGES, ProgressConfig, Snapshot, Tally, renderer

NAMESPACE = "etl"


class Feed(Protocol):
    def snapshot(self, elapsed: float, stage: str) -> Snapshot: ...


class ClockFeed:
    """Only the elapsed time and the stage the launcher knows of (no live counts)."""

    def __init__(self, bytes_total: int):
        self.bytes_total = bytes_total

    def snapshot(self, elapsed: float, stage: str) -> Snapshot:
        return Snapshot(elapsed, stage if stage != "starting" else "running", self.bytes_total)


class TallyFeed:
    """This process's live tally (local runner, every stage in this process)."""

    def __init__(self, tally: Tally, bytes_total: int):
        self.tally, self.bytes_total = tally, bytes_total

    def snapshot(self, elapsed: float, stage: str) -> Snapshot:
        tallied, c = self.tally.counts()
        if _rank(stage) > _rank(tallied):  # the launcher's own later stages (publishing)
            tallied = stage
        return Snapshot(elapsed, tallied, self.bytes_total, read=c["read"], written=c["written"],
                        rejected=c["rejected"], encoded=c["encoded"], bytes_done=c["bytes"],
                        shards=c["shards"])


class MetricsFeed:
    """The runner's metrics of our namespace (attempted values: Dataflow serves them live,
    committed ones lag), read through `PipelineResult.metrics()`."""

    def __init__(self, result: Any, bytes_total: int):
        self.result, self.bytes_total = result, bytes_total

    def counters(self) -> dict[str, int]:
        found = self.result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
        out: dict[str, int] = {}
        for c in found.get("counters", []):
            value = c.attempted if c.attempted is not None else c.committed
            out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(value or 0)
        return out

    def snapshot(self, elapsed: float, stage: str) -> Snapshot:
        c = self.counters()
        if _rank(stage) <= _rank("starting"):  # the runner does not say: infer it
            stage = ("writing shards" if c.get("records_written") else
                     "reading+encoding" if c.get("records_read") else "running")
        return Snapshot(elapsed, stage, self.bytes_total, read=c.get("records_read", 0),
                        written=c.get("records_written", 0),
                        rejected=c.get("records_rejected", 0),
                        encoded=c.get("records_encoded", 0), bytes_done=c.get("bytes_read", 0),
                        shards=c.get("shards_written", 0))


def _rank(stage: str) -> int:

    return STAGES.index(stage) if stage in STAGES else 0


class Reporter:
    """A daemon thread rendering the feed's snapshot every tick until `stop()`. The feed can
    be swapped (`attach`: the runner's result once `p.run()` returned) and the launcher's
    stage set (`stage`: checking, publishing). A failing feed (a metrics call that errs) only
    skips that tick: progress never fails a run."""

    def __init__(self, config: ProgressConfig, feed: Feed):
        self.feed = feed
        self.view = renderer(config)
        self.started = time.monotonic()
        self._stage = "starting"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="etl-progress", daemon=True)
        self._thread.start()

    def attach(self, feed: Feed) -> None:
        self.feed = feed

    def stage(self, name: str) -> None:
        self._stage = name

    def snapshot(self) -> Snapshot | None:
        try:
            return self.feed.snapshot(time.monotonic() - self.started, self._stage)
        except Exception:  # noqa: BLE001 - a metrics call may fail; the run must not
            return None

    def _loop(self) -> None:
        while not self._stop.wait(self.view.tick):
            s = self.snapshot()
            if s is not None:
                with self._lock:
                    if not self._stop.is_set():
                        self.view.update(s)

    def stop(self, final: bool = True) -> None:
        """Stop rendering (before the summary is printed); `final`: draw the last state."""
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self.view.close(self.snapshot() if final else None)


def start(config: ProgressConfig | None, tally: Tally | None, bytes_total: int) -> Reporter | None:
    """A reporter on the live tally when there is one, else on the clock alone (until the
    runner's result can be polled)."""
    if config is None:
        return None
    feed: Feed = TallyFeed(tally, bytes_total) if tally is not None else ClockFeed(bytes_total)
    return Reporter(config, feed)
