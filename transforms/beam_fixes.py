"""Work-arounds for bugs in the Beam releases we run on: each says what breaks, the evidence,
and when it can go.

Lost records on Beam's local runner (FnApiRunner; also the embedded job service of
`PortableRunner --job_endpoint=embed`), since the time-based flush came in (apache/beam#10246,
2019) up to at least 2.77, the release measured here:

- `fn_api_runner/worker_handlers.py` builds the runner's data service with
  `DATA_BUFFER_TIME_LIMIT_MS = 1000`, and the in-process SDK workers of `multi_threading`
  mode with the same default, so every data-plane output stream is a
  `data_plane.TimeBasedBufferingClosableOutputStream`. Its `PeriodicThread` calls `flush()`
  once a second from another thread. `flush()` holds `_flush_lock`, but `write()` does not:
  `flush()` sends `get()`, then `_clear()`s the buffer. When sending blocks (the 100 MB send
  queue is full, as it is with large elements) or the flusher simply loses the GIL between
  the two calls, the bundle's own thread keeps writing elements into the buffer, and
  `_clear()` throws them away. Nothing fails: the records are just gone. A flush that lands
  in the middle of an element's encoding tears it across two data messages instead, which
  the runner later deals to different bundles (`ListBuffer.partition` splits by message):
  "Error decoding input stream with coder WindowedValueCoder", "Invalid PaneInfoEncoding".
- Measured with our 4M-row engine-shuffle job, two runs at once: every failed run had
  flushes with 0.6-32 MB written during the flush callback (traced by wrapping `flush()`);
  tensorflow/data-validation#247 reports the same symptom (12M records read, 8M counted
  with `direct_running_mode=multi_processing`, whose runner side uses the same streams).
- The fix: no periodic flusher on the local runner. Beam's own SDK harness default is 0
  ("disabled", `sdk_worker_main._get_data_buffer_time_limit_ms`), which is what Dataflow's
  and portable workers run with; a batch runner gains nothing from it (a bundle's output is
  complete only at its end, and size-based flushes happen between elements, on the writing
  thread). Remove this when Beam's time-based stream flushes only between whole elements
  (tests/test_engine_stress.py keeps the scale and process model where it failed).

Idle time at the end of every bundle, same releases (a cost, not a loss):

- `bundle_processor.BundleProcessor` gives each bundle a `statesampler.StateSampler` with the
  default period, `DEFAULT_SAMPLING_PERIOD_MS = 200`. Its sampling thread sleeps in steps that
  grow from 2 ms to that period; `stop()`, at the end of each bundle, sets a flag and joins the
  thread ("May have to wait up to sampling_period_ms", statesampler_fast.pyx). A bundle of
  more than about a second therefore ends with up to 200 ms in which nothing runs: on the
  10M-row benchmark CSV, sampled every 0.1 s, both cores idled for 0.2 s between stage 1 and
  stage 2, with one bundle thread in `StateSampler.stop` (py-spy dump).
- The fix: a 10 ms period on the local runner. The sampler only attributes time to steps
  (Beam's msecs counters and its lull log), so a shorter period costs one wake-up of a
  sleeping thread every 10 ms per running bundle. Remove this when `stop()` wakes the
  sampler instead of joining its sleep.

Pipeline options parsed again on every look, same releases (a cost, not a loss):

- `PipelineOptions.view_as(cls)` builds `cls(self._flags)`: an argparse parser of every
  registered option class, and a parse of the flags, each time. Beam looks at its options
  ~200 times per run of ours (`typehints.is_consistent_with` reads `TypeOptions` for every
  type check while the pipeline is built, `Pipeline.apply` its update-compatibility version,
  the runner its options): 205 calls, 0.11-0.15 s of each run's start (wrapped and timed,
  0.55-0.7 ms a call), about a tenth of a small run's fixed cost.
- The fix: one view per (options, view class), made by Beam's own `view_as` the first time.
  A view holds nothing of its own: reads and writes go to the `_all_options` dictionary it
  shares with the options object, so a cached view sees every change a new one would. A
  cached view is used only while it still shares that dictionary and the same flags;
  options are held weakly. Remove this when `view_as` stops re-parsing (or caches:
  tests/test_beam_fixes.py counts the views Beam's own makes).

A run that never ends after a signal, same releases (tests/stress_signals.py found it: one
run in 80, under load, stayed at "starting, 0 read" for good):

- `worker_handlers.ControlConnection.close()` pushes the "done" marker that ends the control
  stream only if the SDK worker's stream has started. A run that fails (our Interrupted,
  raised by a signal) while an in-process worker of `multi_threading` mode is still
  connecting closes the connection in its "unstarted" state, then
  `EmbeddedGrpcWorkerHandler.stop_worker()` joins the worker's thread without a timeout. The
  worker connects a moment later, its stream starts and waits for a request that never
  comes: every thread's stack showed the main thread in `stop_worker`'s join inside
  `run_stages`' clean-up, the runner's `Control` stream in `get_req`, and the worker in its
  control read.
- The fix: closing an unstarted connection queues the same marker, so a worker that connects
  afterwards gets it first and ends. Remove this when `close()` ends a stream that starts
  after it (tests/test_beam_fixes.py shows the unfixed behaviour as a failure).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_lock = threading.Lock()


SAMPLING_PERIOD_MS = 10  # the state sampler's longest sleep in our process (Beam's: 200)


def apply() -> None:
    """Turn off the FnApiRunner's periodic data-plane flusher, shorten the state sampler's
    period, make each options view once and end control streams closed before they start
    (see the module docstring).

    Beam reads both when a run starts its data service and in-process workers, so this must
    run before `Pipeline.run()`; `ConvertToShards` calls it while the pipeline is built,
    which covers a user's own pipeline that embeds our transforms too. Idempotent."""
    _shorten_sampling()
    _cache_option_views()
    try:
        from apache_beam.runners.portability.fn_api_runner import (  # noqa: PLC0415
            worker_handlers,
        )
    except ImportError:  # a Beam without the FnApiRunner: nothing to fix
        return
    with _lock:
        if getattr(worker_handlers, "DATA_BUFFER_TIME_LIMIT_MS", 0):
            worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0
        _end_streams_closed_before_they_start(worker_handlers)


def _end_streams_closed_before_they_start(worker_handlers: Any) -> None:
    """ControlConnection.close() queues the done marker when the worker has not connected
    yet (see the module docstring); Beam's own close() does the rest, as before."""
    conn = getattr(worker_handlers, "ControlConnection", None)
    servicer = getattr(worker_handlers, "BeamFnControlServicer", None)
    if conn is None or servicer is None or getattr(conn.close, "ends_unstarted", False):
        return
    unstarted, done = servicer.UNSTARTED_STATE, servicer._DONE_MARKER
    original = conn.close

    def close(self: Any) -> None:
        with conn._lock:
            if self._state == unstarted:
                self._push_queue.put(done)
        original(self)

    close.ends_unstarted = True  # type: ignore[attr-defined]
    close.__wrapped__ = original  # type: ignore[attr-defined]
    conn.close = close


def _cache_option_views() -> None:
    """`PipelineOptions.view_as` made once per (options, view class): see the docstring."""
    try:
        from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415
    except ImportError:
        return
    with _lock:
        original = PipelineOptions.view_as
        if getattr(original, "cached", False):
            return
        views: weakref.WeakKeyDictionary[Any, dict[type, Any]] = weakref.WeakKeyDictionary()

        def view_as(self: Any, cls: type) -> Any:
            mine = views.get(self)
            view = mine.get(cls) if mine is not None else None
            if (view is None or view._all_options is not self._all_options
                    or view._flags is not self._flags):
                view = original(self, cls)
                views.setdefault(self, {})[cls] = view
            return view

        view_as.cached = True  # type: ignore[attr-defined]
        view_as.__wrapped__ = original  # type: ignore[attr-defined]
        view_as.__doc__ = original.__doc__
        PipelineOptions.view_as = view_as  # type: ignore[method-assign]


def _shorten_sampling() -> None:
    """New bundle processors in this process sample every SAMPLING_PERIOD_MS at most."""
    try:
        from apache_beam.runners.worker import statesampler  # noqa: PLC0415
    except ImportError:
        return
    init = statesampler.StateSampler.__init__
    with _lock:
        if init.__defaults__ == (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):
            init.__defaults__ = (SAMPLING_PERIOD_MS,)


def applied() -> bool:
    """Whether the local runner's data plane runs without the periodic flusher."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers  # noqa: PLC0415

    return not getattr(worker_handlers, "DATA_BUFFER_TIME_LIMIT_MS", 0)
