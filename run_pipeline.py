#!/usr/bin/env python
"""Command line entry (a shim): `python run_pipeline.py [COMMAND] ...`; `--help` lists the
commands. The parser and the commands live in cli/main.py, the driver in cli/."""

import sys

from cli.main import entry, main  # noqa: F401 - main: the console script and Flex Template entry

if __name__ == "__main__":
    sys.exit(entry())
