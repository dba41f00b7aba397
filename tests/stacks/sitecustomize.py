"""Test-only: a run under test that hangs can show where. With ETL_TEST_STACKS set (a file
path) and this folder on PYTHONPATH, SIGUSR1 writes every thread's stack to that file. Not
stderr: a run sends fd 2 into its log through a pipe (etl/schedule/run_log.py), which a
dying process may never drain."""

import faulthandler
import os
import signal

_path = os.environ.get("ETL_TEST_STACKS")
if _path:
    _file = open(_path, "w")  # noqa: SIM115 - kept open for the process's life
    faulthandler.register(signal.SIGUSR1, file=_file, all_threads=True)
