"""Test-only: a run under test that hangs can show where. With ETL_TEST_STACKS set (a file
path) and this folder on PYTHONPATH, SIGUSR1 writes every thread's stack to that file. Not
stderr: a run sends fd 2 into its log through a pipe (etl/schedule/run_log.py), which a
dying process may never drain. Appended to: the processes a run forks (a range's fork server and
its workers) inherit the handler and the file, and the test writes a header naming the process
before it signals each one (tests/test_signals.py, finish)."""

import faulthandler
import os
import signal

_path = os.environ.get("ETL_TEST_STACKS")
if _path:
    _file = open(_path, "a")  # noqa: SIM115 - kept open for the process's life
    faulthandler.register(signal.SIGUSR1, file=_file, all_threads=True)
