"""Pause points: make a run stop at a named phase, so a test can signal it or change its
input there deterministically (no sleeps, no timing luck).

    ETL_PAUSE_AT=read,publish:renamed   the phases to stop at (comma-separated)
    ETL_PAUSE_DIR=/some/dir             where the handshake files go

At a listed phase the run writes `DIR/PHASE.reached` (its pid and thread id inside) and waits until
`DIR/PHASE.go` exists. It also stops waiting once the process got a signal
(etl.base.signals): a paused worker thread then raises Cancelled, a paused main thread lets the
Interrupted the handler raised go on. Each phase pauses once per process (the first
worker to get there). Unset (always, outside tests), a pause point costs one dict lookup.

Phases: launch (cli.launch: the early handler in place, cli.main not imported yet), start
(cli.main's entry, before its signal handler is installed), imports
(`run`: the job loaded and checked, before Beam is imported), early-read (the launcher's early
read of an IDX job's first task, in its thread, once its first block is read: transforms/
early_read.py), early-fingerprints (the launcher's early fingerprints, in their thread, all
taken), lock (the output's lock taken,
before leftovers are recovered); run-dir (the local run directory made, before the pipeline); read,
shuffle, write, write:shard (a shard's first batch written, its files open), finalize (in the
pipeline); publish:start, publish:aside, publish:renamed, publish:success
(local publish, etl.output.publish); publish:copied, publish:pointer (gs://); clean-up (the
run's directory about to be removed, whatever the outcome); between-spans (a range, before
each span after the first); range:workers (a range with --parallel: its workers started, a
signal there deferred until they all are); report:read (`report`, between the manifest and the shards).
"""

from __future__ import annotations

import os
import threading
import time

from etl.base import signals

_seen: set[str] = set()
_seen_lock = threading.Lock()
POLL_SECONDS = 0.02


def pause(phase: str) -> None:
    """Stop here if ETL_PAUSE_AT names `phase` (see the module docstring)."""
    wanted = os.environ.get("ETL_PAUSE_AT")
    if not wanted or phase not in wanted.split(","):
        return
    folder = os.environ.get("ETL_PAUSE_DIR") or "."
    with _seen_lock:
        if phase in _seen:
            return
        _seen.add(phase)
    name = phase.replace(":", "-")
    with open(os.path.join(folder, f"{name}.reached"), "w") as fh:
        fh.write(f"{os.getpid()} {threading.get_native_id()}")  # a test may signal the thread
    go = os.path.join(folder, f"{name}.go")
    main = threading.current_thread() is threading.main_thread()
    while not os.path.exists(go):
        if signals.cancelled() and not main:
            signals.check_cancelled(f"paused at {phase}")
        if signals.pending() is not None and main:
            return  # inside a critical section: let it reach its safe point
        time.sleep(POLL_SECONDS)
