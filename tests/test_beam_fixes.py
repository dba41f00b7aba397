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


def test_an_options_view_is_made_once_and_sees_every_change() -> None:
    """transforms/beam_fixes.py's view cache: one view per (options, class), which reads and
    writes the options' shared values like a new view would; other options get their own."""
    import pickle  # noqa: PLC0415

    from apache_beam.options.pipeline_options import (  # noqa: PLC0415
        PipelineOptions,
        StandardOptions,
        TypeOptions,
    )

    beam_fixes.apply()
    options = PipelineOptions(["--runner=FnApiRunner", "--type_check_strictness=ALL_REQUIRED"])
    view = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is view and view.runner == "FnApiRunner"
    view.runner = "DirectRunner"  # through the view: the options' own values
    assert options.get_all_options()["runner"] == "DirectRunner"
    assert options.view_as(TypeOptions).type_check_strictness == "ALL_REQUIRED"
    options.view_as(TypeOptions).pipeline_type_check = False
    assert options.view_as(TypeOptions) is options.view_as(TypeOptions)
    assert options.view_as(TypeOptions).pipeline_type_check is False
    copy = pickle.loads(pickle.dumps(options))
    assert copy.view_as(StandardOptions) is not view
    assert copy.view_as(StandardOptions).runner == "DirectRunner"
    other = PipelineOptions(["--runner=FnApiRunner"])
    assert other.view_as(StandardOptions).runner == "FnApiRunner"
    options._all_options = dict(options._all_options, runner="X")  # values replaced whole
    assert options.view_as(StandardOptions) is not view
    assert options.view_as(StandardOptions).runner == "X"


def views_made_building() -> int:
    """Options objects made (each view is one: Beam's view_as parses the flags again) while a
    pipeline of 8 Create -> Map -> GroupByKey chains is built."""
    import apache_beam as beam  # noqa: PLC0415
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    made = []
    init = PipelineOptions.__init__

    def counted(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        made.append(type(self).__name__)
        init(self, *a, **k)

    PipelineOptions.__init__ = counted
    try:
        p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
        for i in range(8):
            _ = (p | f"C{i}" >> beam.Create([(1, 2)]) | f"M{i}" >> beam.Map(lambda kv: kv)
                 | f"G{i}" >> beam.GroupByKey())
    finally:
        PipelineOptions.__init__ = init
    return len(made)


def test_building_a_pipeline_makes_each_options_view_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fix 15 (the pipeline's construction views each class it looks at once or
    twice; the 24 transforms add none); Beam's own view_as makes one per look, 187 here. When
    the second figure drops, Beam caches views itself and the fix can go."""
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    beam_fixes.apply()
    assert views_made_building() <= 20
    monkeypatch.setattr(PipelineOptions, "view_as", PipelineOptions.view_as.__wrapped__)
    assert views_made_building() > 100
