"""The Beam half of the table of shuffle strategies: etl.shuffle.STRATEGIES names each
strategy and holds its Beam-free module; `STEPS` holds its Beam steps (a ShuffleSteps
object, transforms/shuffle_steps.py) under the same name. A new strategy is its two modules
and one line in each table (docs/architecture.md)."""

from __future__ import annotations

from etl.shuffle import engine, files, strategy_for
from transforms.shuffle_engine import EngineSteps
from transforms.shuffle_files import FilesSteps
from transforms.shuffle_steps import ShuffleSteps

STEPS: dict[str, ShuffleSteps] = {files.NAME: FilesSteps(), engine.NAME: EngineSteps()}


def steps_for(via: str) -> ShuffleSteps:
    """The Beam steps of the strategy `via` (checked against etl.shuffle's table)."""
    return STEPS[strategy_for(via, None).NAME]
