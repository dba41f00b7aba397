"""A real GCS emulator (gcp-storage-emulator) on loopback, started and stopped by tests.

One emulator serves a whole test session (fixtures in tests/conftest.py); each test gets
its own bucket. Clients find it through STORAGE_EMULATOR_HOST (google-cloud-storage and
Beam's gs:// file system both honour it); `env()` gives the variables a CLI subprocess
needs. `endpoint`/`client()` may be pointed at another host:port (a fault-injecting proxy
in front of the emulator) with `env(endpoint=...)` / `client(endpoint=...)`.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

_BUCKET_IDS = itertools.count()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _executable() -> str:
    """gcp-storage-emulator beside this interpreter (the venv's bin dir)."""
    here = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    return here if os.path.exists(here) else "gcp-storage-emulator"


def emulator_env(endpoint: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) with the variables that send GCS clients to `endpoint`:
    no credential file, no metadata-server probe (an emulator has no credentials)."""
    env = dict(os.environ if base is None else base)
    env["STORAGE_EMULATOR_HOST"] = endpoint
    env["NO_GCE_CHECK"] = "true"
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    return env


class GcsEmulator:
    """`gcp-storage-emulator start --in-memory` on a free loopback port, as a subprocess."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1",
                 start_timeout: float = 30.0):
        self.host = host
        self.port = port or free_port()
        self.endpoint = f"http://{host}:{self.port}"
        self._log = open(os.devnull, "wb")  # noqa: SIM115 - lives as long as the process
        # no preexec_fn: running Python between fork and exec in a process that already has
        # threads (Beam's, from earlier tests) can abort the child (seen: exit -6 in CI)
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _DIE_WITH_PARENT, _executable(), "start", "--host", host,
             "--port", str(self.port), "--in-memory"],
            stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"gcp-storage-emulator exited with {self._proc.returncode}")
            try:
                with urllib.request.urlopen(self.endpoint + "/storage/v1/b?project=test",
                                            timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gcp-storage-emulator did not answer on {self.endpoint}")
            time.sleep(0.1)

    def env(self, base: dict[str, str] | None = None, endpoint: str | None = None) -> dict[str, str]:
        """Environment for a process that should talk to this emulator (or to `endpoint`,
        e.g. a proxy in front of it)."""
        return emulator_env(endpoint or self.endpoint, base)

    def client(self, endpoint: str | None = None) -> Any:
        """An anonymous google-cloud-storage client against the emulator (or `endpoint`)."""
        return _anonymous_client(endpoint or self.endpoint)

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket; returns "gs://name"."""
        name = name or f"etl-test-{os.getpid()}-{next(_BUCKET_IDS)}"
        client = _anonymous_client(self.endpoint)
        client.create_bucket(name)
        return f"gs://{name}"

    def upload(self, local: str, url: str) -> None:
        """Copy one local file to gs://bucket/key."""
        bucket, key = split_url(url)
        _anonymous_client(self.endpoint).bucket(bucket).blob(key).upload_from_filename(local)

    def upload_bytes(self, data: bytes, url: str) -> None:
        bucket, key = split_url(url)
        _anonymous_client(self.endpoint).bucket(bucket).blob(key).upload_from_string(data)

    def download(self, url: str) -> bytes:
        bucket, key = split_url(url)
        return bytes(_anonymous_client(self.endpoint).bucket(bucket).blob(key).download_as_bytes())

    def list(self, url: str) -> list[str]:
        """gs:// names of every object under a gs://bucket/prefix, sorted."""
        bucket, key = split_url(url)
        blobs = _anonymous_client(self.endpoint).list_blobs(bucket, prefix=key)
        return sorted(f"gs://{bucket}/{b.name}" for b in blobs)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if not self._log.closed:
            self._log.close()

    def __enter__(self) -> GcsEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Linux: the emulator gets SIGTERM when the test process dies (a killed pytest leaves no
# emulator behind): set in the new process itself, then exec the emulator (the setting
# survives exec); elsewhere it just execs.
_DIE_WITH_PARENT = """
import os, signal, sys
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
os.execv(sys.argv[1], sys.argv[1:])
"""


def offline_dataflow(emulator: GcsEmulator, monkeypatch: Any) -> None:
    """This process talks to `emulator` as Dataflow's launcher would talk to GCS, without a
    credential lookup (Beam would retry one for ~25 s against an emulator)."""
    from apache_beam.internal.gcp import auth  # noqa: PLC0415 - Beam only for these tests

    for key, value in emulator.env().items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setattr(auth._Credentials, "_credentials_init", True)
    monkeypatch.setattr(auth._Credentials, "_credentials", None)


def split_url(url: str) -> tuple[str, str]:
    """gs://bucket/key -> (bucket, key)."""
    if not url.startswith("gs://"):
        raise ValueError(f"not a gs:// URL: {url}")
    bucket, _, key = url[len("gs://"):].partition("/")
    return bucket, key


def _anonymous() -> Any:
    from google.auth.credentials import AnonymousCredentials  # noqa: PLC0415

    return AnonymousCredentials()


def _anonymous_client(endpoint: str) -> Any:
    """A client bound to `endpoint` whatever STORAGE_EMULATOR_HOST says right now."""
    from google.cloud import storage  # noqa: PLC0415

    return storage.Client(project="test", credentials=_anonymous(),
                          client_options={"api_endpoint": endpoint})
