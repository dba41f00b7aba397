#!/usr/bin/env python
"""Command line entry (a shim): `python run_pipeline.py [COMMAND] ...`; `--help` lists the
commands. The parser and the commands live in cli/main.py, the driver in cli/; cli/launch.py
catches a signal from the first moment."""

import sys

if __name__ == "__main__":
    from cli.launch import entry as _entry

    sys.exit(_entry())

from cli.main import entry, main  # noqa: E402, F401 - main: the console script and Flex Template entry
