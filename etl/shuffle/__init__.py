"""The shuffle: from encoded blocks to exact, shuffled (or input-ordered) shards.

    keys.py         shuffle keys, record ids, split assignment
    runs.py         a sorted run: one block's records of one split, framed and sorted; its
                    on-disk layout and the slices of it a shard reads
    planning.py     block statistics merged in bounded memory -> every shard's key/rank range
    merge.py        a shard's slices merged in (key, id) order in bounded memory
    shard_writer.py one shard from its slice of every run (merge, trim, write, rename)
    placement.py    records of inputs with a known count and one frame size, copied to
                    their rank as they are read (files strategy, one process): a shard is
                    a slice, written as it is
    files.py        strategy `files` (Beam-free half): runs go to spill files; shards read
                    ranges of them (Beam steps: transforms/shuffle_files.py)
    engine.py       strategy `engine` (Beam-free half): runs travel in per-shard chunks through
                    the runner's GroupByKey, read once by the shard writer
                    (Beam steps: transforms/shuffle_engine.py)
    chunk_codec.py  the bytes of a run or chunk in the runner's shuffle: zstd, CRC32C

Both strategies use the same plan and the same shard writer, so they write the same bytes.
A strategy is one module here (its Beam-free half: `NAME`, what callers ask of it, its shard
writer) and one ShuffleSteps object in transforms/ (its Beam steps); `STRATEGIES` is the table
of them, and `strategy_for` the one place a job's `shuffle.via` is checked and chosen.
Callers ask the chosen module (`HOLDS_SPILLS`, `RUNNER_SHUFFLE`), never compare its name.
Imports etl.base, etl.storage and etl.formats only (layer 4, beside etl.contract), never Beam.
"""

from __future__ import annotations

from types import ModuleType

from etl.base.errors import ConfigError
from etl.base.runners import is_local
from etl.shuffle import engine, files

# the one table of shuffle strategies (each module: NAME, HOLDS_SPILLS, RUNNER_SHUFFLE, and
# its Beam steps in transforms.shuffles.STEPS)
STRATEGIES: dict[str, ModuleType] = {files.NAME: files, engine.NAME: engine}
LOCAL_DEFAULT = files.NAME  # spills on the local disk are cheapest on this machine
ELSEWHERE_DEFAULT = engine.NAME  # the runner's shuffle moves the data between workers


def strategy_for(via: str | None, runner: str | None) -> ModuleType:
    """The strategy a job asked for (`shuffle.via`), else `files` on the local runner (spills
    on the local disk are cheapest there) and `engine` on every other runner."""
    if via is None:
        via = LOCAL_DEFAULT if is_local(runner) else ELSEWHERE_DEFAULT
    if via not in STRATEGIES:
        raise ConfigError(f"shuffle.via must be one of {sorted(STRATEGIES)}, got {via!r}")
    return STRATEGIES[via]
