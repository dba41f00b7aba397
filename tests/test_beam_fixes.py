"""transforms/beam_fixes.py's end for control streams closed before they start: an in-process
SDK worker that connects after the runner closed its connection (a run stopped by a signal while
its workers started) gets the done marker first and ends, instead of waiting for a request for
ever while the runner joins its thread (the hang tests/stress_signals.py found)."""

from __future__ import annotations

import queue

import pytest
from apache_beam.runners.portability.fn_api_runner import worker_handlers as wh

from transforms import beam_fixes


def first_request_after_a_late_connect(timeout: float) -> object:
    """Close a connection, then connect to it as the worker's Control stream does (set_input,
    then get_req): what the stream gets first, within `timeout`."""
    conn = wh.ControlConnection()
    conn.close()  # the runner gives up before the worker connected
    conn.set_input(iter([]))  # the worker connects: no responses to read
    return conn._push_queue.get(timeout=timeout)


def test_a_worker_connecting_after_the_close_gets_the_done_marker() -> None:
    beam_fixes.apply()
    assert first_request_after_a_late_connect(5) is wh.BeamFnControlServicer._DONE_MARKER


def test_beams_own_close_leaves_that_worker_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beam's close() alone: nothing for the late worker (why the fix exists). When this
    fails, Beam ends such streams itself and the fix can go."""
    beam_fixes.apply()
    monkeypatch.setattr(wh.ControlConnection, "close", wh.ControlConnection.close.__wrapped__)
    with pytest.raises(queue.Empty):
        first_request_after_a_late_connect(0.5)


def test_closing_a_started_connection_is_beams_own() -> None:
    """A connection whose worker is connected gets exactly one done marker, as before."""
    beam_fixes.apply()
    conn = wh.ControlConnection()
    conn.set_input(iter([]))
    conn.close()
    assert conn._push_queue.get(timeout=5) is wh.BeamFnControlServicer._DONE_MARKER
    assert conn._push_queue.empty()
