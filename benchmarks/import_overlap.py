"""How much of a job's first read overlaps `import apache_beam` on this machine: the read alone,
the import alone (GC off and without pymongo, as cli.run imports it), or both at once (the read
in a thread). What transforms/early_read.py rests on (benchmarks/README.md, "Read while Beam
is imported").

    python -m benchmarks.import_overlap JOB.yaml --mode both

Run each mode in a fresh process (the import happens once per process); alternate them.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time

START = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job")
    parser.add_argument("--mode", choices=("read", "import", "both"), required=True)
    args = parser.parse_args()

    from etl.contract.schema import load_schema  # noqa: PLC0415 - timed from the start
    from etl.job.config import load_job  # noqa: PLC0415
    from etl.job.read_plan import plan_units, tasks_of  # noqa: PLC0415
    from etl.sources import make_reader  # noqa: PLC0415

    job = load_job(args.job)
    unit = plan_units(job.sources, job.base_dir, job.path).units[0]
    reader = make_reader(job.sources[unit.source], job.base_dir, "sources")
    reader.prepare(load_schema(job.schema_path), job.reading.max_record_bytes)
    task = next(tasks_of(unit, reader, 0))
    ready = time.perf_counter() - START
    took: dict[str, tuple[float, float]] = {}
    rows = [0]

    def read() -> None:
        began = time.perf_counter()
        for block in reader.read_split(task.split):
            rows[0] += block.num_rows
        took["read"] = (time.perf_counter() - began, time.perf_counter() - START)

    def imports() -> None:
        from cli.lean_imports import without_unused_extras  # noqa: PLC0415

        began = time.perf_counter()
        gc.disable()
        with without_unused_extras():
            import apache_beam  # noqa: F401, PLC0415 - what is timed
        gc.enable()
        took["import"] = (time.perf_counter() - began, time.perf_counter() - START)

    cpu = time.process_time()
    if args.mode == "read":
        read()
    elif args.mode == "import":
        imports()
    else:
        thread = threading.Thread(target=read)
        thread.start()
        imports()
        thread.join()
    shown = "  ".join(f"{name} {spent:.3f} s (ends at {end:.3f})"
                      for name, (spent, end) in took.items())
    print(f"{args.mode}: job ready at {ready:.3f} s  {shown}  "
          f"CPU {time.process_time() - cpu:.2f} s  rows {rows[0]:,}")


if __name__ == "__main__":
    main()
