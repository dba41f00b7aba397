"""What OpenBLAS's threads cost a process that never multiplies a matrix: `import numpy` and
half a second of Python, in fresh interpreters, with OpenBLAS's default thread count and with
the one thread our command line gives it (cli.launch.one_blas_thread); CPU seconds of each
child, medians, alternating.

    python -m benchmarks.blas_threads [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

CHILD = "import numpy, time\nt = time.time()\nwhile time.time() - t < 0.5:\n    pass\n"
USER_SETTINGS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def cpu_of(env: dict[str, str]) -> float:
    """User + system seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.blas_threads",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)
    base = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS}
    default, one = [], []
    for _ in range(args.repeat):
        default.append(cpu_of(base))
        one.append(cpu_of({**base, "OPENBLAS_NUM_THREADS": "1"}))
    for name, runs in (("OpenBLAS default", default), ("OpenBLAS one thread", one)):
        print(f"{name}: {statistics.median(runs):.3f} CPU-s (runs {min(runs):.2f}-{max(runs):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
