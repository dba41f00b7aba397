"""etl.base.runners: the one list of runners that run a pipeline on this machine."""

from __future__ import annotations

import pytest
from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from etl.base.runners import is_local, runner_class_name
from etl.shuffle import strategy_for
from transforms.staging import worker_staging


@pytest.mark.parametrize(("runner", "name", "local"), [
    (None, "DirectRunner", True),  # Beam's default
    ("FnApiRunner", "FnApiRunner", True),
    ("apache_beam.runners.portability.fn_api_runner.FnApiRunner", "FnApiRunner", True),
    ("PrismRunner", "PrismRunner", True),
    ("InteractiveRunner", "InteractiveRunner", True),
    ("DataflowRunner", "DataflowRunner", False),
    ("PortableRunner", "PortableRunner", False),
])
def test_runner_names(runner: str | None, name: str, local: bool) -> None:
    assert runner_class_name(runner) == name
    assert is_local(runner) is local


def test_runner_objects_by_their_class() -> None:
    assert runner_class_name(FnApiRunner()) == "FnApiRunner"
    assert is_local(SwitchingDirectRunner())


def test_every_user_of_the_list_agrees() -> None:
    """The shuffle's default and worker staging ask the same list."""
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    for runner, local in (("InteractiveRunner", True), ("FnApiRunner", True),
                          ("PortableRunner", False)):
        assert strategy_for(None, runner).NAME == ("files" if local else "engine")
        if local:
            assert worker_staging(PipelineOptions([f"--runner={runner}"])).args == ()
