"""Which Beam runners run a pipeline on this machine: one list for everything that depends on
it (the shuffle's default strategy, staging our package for remote workers, how a run is
cancelled and cleaned up). A runner is named by its class name; `--runner` may also be a
dotted path or a runner object, and no runner (None) is Beam's default, the DirectRunner."""

from __future__ import annotations

from typing import Any

LOCAL_RUNNERS = frozenset({"FnApiRunner", "DirectRunner", "SwitchingDirectRunner",
                           "BundleBasedDirectRunner", "PrismRunner", "InteractiveRunner"})


def runner_class_name(runner: Any) -> str:
    """The class name of a StandardOptions.runner value."""
    if runner is None:
        return "DirectRunner"
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1]


def is_local(runner: Any) -> bool:
    """Whether `runner` (a StandardOptions.runner value) runs the pipeline on this machine."""
    return runner_class_name(runner) in LOCAL_RUNNERS
