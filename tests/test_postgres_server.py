"""The session's PostgreSQL server (tests/postgres_server.py): password logins work, wrong ones
are refused, and it listens on 127.0.0.1 only."""

from __future__ import annotations

import socket

import psycopg
import pytest

from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.slow  # subprocesses, servers or Beam pipelines (make test-fast skips them)


def test_connects_with_password_and_creates_tables(postgres: PostgresServer) -> None:
    with postgres.connect() as conn:
        conn.execute("CREATE TABLE probe_fixture (id bigint, s text)")
        conn.execute("INSERT INTO probe_fixture VALUES (1, 'a'), (2, 'b')")
        assert conn.execute("SELECT count(*), current_user, current_database() "
                            "FROM probe_fixture").fetchone() == (2, "etl", "warehouse")
        conn.execute("DROP TABLE probe_fixture")
    with psycopg.connect(postgres.url(with_password=True)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_wrong_or_missing_password_is_refused(postgres: PostgresServer) -> None:
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(host=postgres.host, port=postgres.port, user=postgres.user,
                        password=postgres.password + "x", dbname=postgres.dbname)
    # no password at all (and none in PGPASSWORD/.pgpass): scram is required even on loopback
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(postgres.url(with_password=False), passfile="/nonexistent",
                        password="")
    assert postgres.password not in postgres.url(with_password=False)


def _other_addresses() -> list[str]:
    """Addresses of this machine other than 127.0.0.1: another loopback address (127.0.0.2,
    ::1), the host name's addresses and the address outgoing traffic leaves from."""
    found = {"127.0.0.2", "::1"}
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            for info in socket.getaddrinfo(socket.gethostname(), None, family):
                found.add(str(info[4][0]))
        except OSError:
            pass
    for family, probe in ((socket.AF_INET, "198.51.100.1"), (socket.AF_INET6, "2001:db8::1")):
        try:  # a UDP "connect" sends nothing; it only picks the outgoing interface
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                found.add(str(s.getsockname()[0]))
        except OSError:
            pass
    found.discard("127.0.0.1")
    return sorted(found)


def test_listens_on_loopback_only(postgres: PostgresServer) -> None:
    with postgres.connect() as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
    with socket.create_connection((postgres.host, postgres.port), timeout=5):
        pass
    for address in _other_addresses():
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            try:
                s.connect((address, postgres.port))
            except OSError:
                continue  # refused (or unroutable): not listening there
            pytest.fail(f"the server also accepts connections on {address}")
