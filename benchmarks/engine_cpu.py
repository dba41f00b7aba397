"""CPU of OUR stage functions in one in-process run of a job, against the run's process CPU:
what the engine path costs in our DoFns (read+encode, packing runs and chunks, unpacking,
merge and write) vs the files path (read+encode, spill, merge and write), apart from Beam's
runner and data plane (issue 29, goal 4).

Each function is wrapped with time.thread_time (the CPU of the thread that calls it: zstd,
CRC32C and Arrow run in that thread); a function called inside another wrapped one counts
once, in the outer one. The CSV reader runs in prefetch threads: its generator's steps are
timed there. Nothing else changes; the shards written are the job's.

    python -m benchmarks.engine_cpu JOB.yaml [beam args]
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


def main(argv: list[str]) -> int:
    import transforms.coders as co  # noqa: PLC0415
    import transforms.convert as tc  # noqa: PLC0415
    from cli.run import run_job  # noqa: PLC0415
    from etl.job.config import load_job  # noqa: PLC0415
    from etl.shuffle import engine, files  # noqa: PLC0415
    from etl.sources import csv_source  # noqa: PLC0415

    spent: collections.Counter[str] = collections.Counter()
    inside = threading.local()

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrap(*a: Any, **k: Any) -> Any:
            if getattr(inside, "on", False):  # inside another timed function: counted there
                return fn(*a, **k)
            inside.on = True
            t = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.thread_time() - t
                inside.on = False
        return wrap

    tc.encode_block = timed("read+encode: encode_block", tc.encode_block)
    files.write_spill = timed("files: write_spill", files.write_spill)
    files.write_files_shard = timed("files: write_files_shard", files.write_files_shard)
    engine.partition = timed("engine: partition (packs chunks)", engine.partition)
    engine.write_engine_shard = timed("engine: write_engine_shard (unpack, scratch, merge, "
                                      "write)", engine.write_engine_shard)
    co.SortedRunCoder.encode = timed("engine: SortedRunCoder.encode (packs a run)",
                                     co.SortedRunCoder.encode)
    co.SortedRunCoder.decode = timed("engine: SortedRunCoder.decode (unpacks a run)",
                                     co.SortedRunCoder.decode)
    read_split = csv_source.CsvReader.read_split

    def timed_read(self: Any, split: Any) -> Iterator[Any]:
        blocks = read_split(self, split)
        while True:
            t = time.thread_time()
            try:
                block = next(blocks)
            except StopIteration:
                return
            finally:
                spent["read: CsvReader.read_split"] += time.thread_time() - t
            yield block

    csv_source.CsvReader.read_split = timed_read
    job = load_job(argv[0])
    t0 = os.times()
    run_job(job, ["--runner=FnApiRunner", *argv[1:]], force=True)
    t1 = os.times()
    total = (t1.user - t0.user) + (t1.system - t0.system)
    for name, seconds in sorted(spent.items()):
        print(f"{seconds:7.2f}  {name}")
    print(f"{sum(spent.values()):7.2f}  ours in all; process CPU of the run {total:.2f} "
          "(the rest: Beam's runner and data plane, other threads, finalize)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
