"""Python's cyclic GC during the run's big imports: off while they run, then what they made
frozen out of later scans.

The GC rescans every live object of Beam, pyarrow and protobuf's modules again and again while
they import (~200k objects), and once more at exit. benchmarks/README.md ("Fixed cost of a
run") has the figures.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def imports_done() -> None:
    """Everything imported so far lives to the end: keep it out of the GC's scans."""
    gc.freeze()
    gc.enable()


@contextmanager
def importing() -> Iterator[None]:
    """A late import (Beam's, once the run is known to convert something) with the GC off,
    then frozen like the imports before it. The GC is on again afterwards only if it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()
