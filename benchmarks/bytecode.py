"""A checkout's own modules compiled to bytecode before a benchmark times it, as pip does when
it installs a package.

This machine sets PYTHONDONTWRITEBYTECODE=1, so Python never caches the bytecode of a checkout
run from source: every run compiled our ~100 modules again (0.10-0.15 CPU-s of each run's
fixed cost; benchmarks/README.md, "Fixed cost of a run"), while Beam, NumPy and the baselines'
libraries come compiled from their wheels. `make run` compiles the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys

PACKAGES = ("cli", "etl", "transforms")


def compile_tree(tree: str) -> None:
    """`python -m compileall` of the packages `tree` has (an old checkout may lack one): a
    module already compiled and unchanged since is left as it is."""
    present = [p for p in PACKAGES if os.path.isdir(os.path.join(tree, p))]
    if present:
        subprocess.run([sys.executable, "-m", "compileall", "-q", *present], cwd=tree,
                       check=True, stdout=subprocess.DEVNULL)
