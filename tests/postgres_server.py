"""A real PostgreSQL server for tests: one per test session, on loopback, torn down at the end.

Why not mocks: the database readers depend on what a real server does (authentication, error
messages, snapshots, the types a driver hands back), and a mock would only repeat our own
guesses. `initdb` + `pg_ctl` start a throwaway cluster in about two seconds, so each session
gets its own: user `etl` with a random password, scram-sha-256 for every connection, listening
on 127.0.0.1 only (a free port) and on a Unix socket inside its own temporary directory.

tests/conftest.py registers the `postgres` fixture for every test module. It skips only
when `initdb` is not on PATH; any other failure to start is an error.
PostgreSQL refuses to run as root, so as root the server programs run as the `postgres` user
(`runuser`), and the directory is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest

from tests.gcs_emulator import free_port

USER = "etl"
DBNAME = "warehouse"
HOST = "127.0.0.1"


@dataclass
class PostgresServer:
    """A running cluster: where it listens and how to log in (the superuser `etl`)."""

    datadir: str
    port: int
    password: str
    host: str = HOST
    user: str = USER
    dbname: str = DBNAME
    _as_postgres: bool = field(default=False, repr=False)

    def url(self, with_password: bool = True, dbname: str | None = None) -> str:
        """`postgresql://etl[:pw]@127.0.0.1:PORT/warehouse`."""
        auth = f"{self.user}:{quote(self.password, safe='')}" if with_password else self.user
        return f"postgresql://{auth}@{self.host}:{self.port}/{dbname or self.dbname}"

    def connect(self, dbname: str | None = None, **kwargs: Any) -> Any:
        """A psycopg connection (autocommit unless told otherwise) for setting up tables."""
        import psycopg

        kwargs.setdefault("autocommit", True)
        return psycopg.connect(host=self.host, port=self.port, user=self.user,
                               password=self.password, dbname=dbname or self.dbname, **kwargs)

    def table(self, name: str, ddl: str, rows: list[tuple[Any, ...]]) -> str:
        """(Re)create table `name` with `ddl` and insert `rows`; returns `SELECT * FROM name`."""
        with self.connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {name}")
            conn.execute(ddl)
            if rows:
                with conn.cursor() as cur:
                    marks = ", ".join(["%s"] * len(rows[0]))
                    cur.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
        return f"SELECT * FROM {name}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = ["runuser", "-u", "postgres", "--", *args] if self._as_postgres else list(args)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    def _check(self, *args: str) -> None:
        done = self._run(*args)
        if done.returncode != 0:
            log = _read(os.path.join(self.datadir, "server.log"))
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}"
                               f"{done.stderr}{log}")

    def start(self) -> None:
        pgdata = os.path.join(self.datadir, "data")
        pwfile = os.path.join(self.datadir, "pwfile")
        with open(pwfile, "w") as fh:
            fh.write(self.password + "\n")
        if self._as_postgres:
            pg = pwd.getpwnam("postgres")
            for path in (self.datadir, pwfile):
                os.chown(path, pg.pw_uid, pg.pw_gid)
        os.chmod(self.datadir, 0o700)
        os.chmod(pwfile, 0o600)
        self._check("initdb", "-D", pgdata, "-U", self.user, "--pwfile", pwfile,
                    "-A", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync")
        os.remove(pwfile)
        opts = f"-p {self.port} -k {self.datadir} -c listen_addresses={self.host} -c fsync=off"
        self._check("pg_ctl", "-D", pgdata, "-w", "-t", "60",
                    "-l", os.path.join(self.datadir, "server.log"), "-o", opts, "start")
        with self.connect(dbname="postgres") as conn:
            conn.execute(f"CREATE DATABASE {self.dbname}")

    def stop(self) -> None:
        pgdata = os.path.join(self.datadir, "data")
        if os.path.exists(os.path.join(pgdata, "postmaster.pid")):
            self._run("pg_ctl", "-D", pgdata, "-m", "fast", "-w", "stop")


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()[-4000:]
    except OSError:
        return ""


def start_server(attempts: int = 3) -> PostgresServer:
    """initdb + pg_ctl start in a fresh temporary directory; the caller must `stop_server`.
    A port taken between choosing and binding it (another process was quicker) means a new
    directory and port, up to `attempts` times."""
    for attempt in range(attempts):
        server = PostgresServer(datadir=tempfile.mkdtemp(prefix="pg-"), port=free_port(),
                                password=secrets.token_urlsafe(24),
                                _as_postgres=os.geteuid() == 0)
        try:
            server.start()
            return server
        except RuntimeError as e:
            stop_server(server)
            if "Address already in use" not in str(e) or attempt == attempts - 1:
                raise
        except BaseException:
            stop_server(server)
            raise
    raise AssertionError("unreachable")


def stop_server(server: PostgresServer) -> None:
    try:
        server.stop()
    finally:
        shutil.rmtree(server.datadir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (database `warehouse`, superuser `etl`)."""
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        pytest.skip("PostgreSQL server programs (initdb, pg_ctl) are not on PATH")
    server = start_server()
    try:
        yield server
    finally:
        stop_server(server)
