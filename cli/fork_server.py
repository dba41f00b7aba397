"""Imported first by a range's fork server (cli.ranges.worker_context), which starts with
SIGINT and SIGTERM blocked (etl.base.signals.blocked): from here on it ignores them, and so
does every worker it forks until a span installs its handler (etl.base.signals.handled).
Without this a worker forked with Python's default handlers dies of a signal its parent
forwards before the worker has set itself up (silently for SIGTERM, with a traceback for
SIGINT), and a Ctrl-C reaching the fork server while it imports Beam prints a traceback.
A signal that came while they were blocked is discarded as they become ignored."""

import signal

_HANDLED = (signal.SIGINT, signal.SIGTERM)
for _s in _HANDLED:
    signal.signal(_s, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)
