"""A Beam worker pool on 127.0.0.1 for PortableRunner runs (`--environment_type=EXTERNAL`):
the pure-Python pool of apache_beam.runners.worker.worker_pool_main, started in its own
process group and killed with it, whatever happened. Used by the worker-pool tests and the
fault cases that run our CLI against it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def portable_flags(port: int) -> list[str]:
    """The Beam options that send a pipeline's work to the pool on `port`."""
    return ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{port}"]


@contextmanager
def worker_pool(python: str, cwd: str | Path, env: dict[str, str], log: Path) -> Iterator[int]:
    """The port of a running pool whose workers run `python` (its folder goes first on PATH,
    where the pool looks for `python`); its output goes to `log`. RuntimeError when it does not
    listen within START_TIMEOUT."""
    env = {**env, "PATH": f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"}
    port = free_port()
    with open(log, "w") as out:
        pool = subprocess.Popen([python, "-m", "apache_beam.runners.worker.worker_pool_main",
                                 f"--service_port={port}"], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if pool.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker pool did not start: {log.read_text()}") from None
                time.sleep(0.2)
        yield port
    finally:
        os.killpg(pool.pid, signal.SIGKILL)
        pool.wait()
