#!/usr/bin/env python
"""Command line entry (a shim): `python run_pipeline.py [COMMAND] ...`; `--help` lists the
commands. The parser and the commands live in cli/main.py, the driver in cli/."""

import signal
import sys

UNCHANGED = "before publishing: nothing was published, the previous output is unchanged"


def _stop(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM before cli.main installs its handler (etl.base.signals), while
    Python imports our modules (about 0.5 s): Python's default would kill the process on
    SIGTERM without a line (exit -15). Raised as a KeyboardInterrupt carrying the signal, so
    entry() and the import below tell it in one line with exit 130 / 143."""
    raise KeyboardInterrupt(signum)


def _stopped(e: KeyboardInterrupt) -> int:
    """The one line and exit code of a signal that came while cli.main was imported."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)  # the process is ending: a second signal changes nothing
    signum = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
    print(f"error: interrupted by {signal.Signals(signum).name} {UNCHANGED}", file=sys.stderr)
    return 128 + signum


if __name__ == "__main__":
    for _s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_s, _stop)
    try:
        from cli.main import entry
    except KeyboardInterrupt as stopped:
        sys.exit(_stopped(stopped))
    sys.exit(entry())

from cli.main import entry, main  # noqa: E402, F401 - main: the console script and Flex Template entry
