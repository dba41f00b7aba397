"""Where a `format: sql` source reads: its `url` parsed, its password found, and the one
form of it we ever show (`display`, without the password).

    postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=...]   (also postgres://)
    duckdb:///abs/path.duckdb   duckdb://relative/to/the/job.duckdb
    sqlite:///abs/path.db       sqlite://relative/to/the/job.db

A password written in the URL is accepted but never shown: messages, logs, the manifest and
the pipeline's own settings carry `display`; the pipeline's readers find it in the launcher's
environment (`SqlTarget.for_workers`). `password_env: VAR` names an environment variable to
take it from instead; with neither, libpq finds it itself (PGPASSWORD, ~/.pgpass, a service
file), as psql would.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from etl.base.errors import ConfigError

DIALECTS = {"postgresql": "postgresql", "postgres": "postgresql", "duckdb": "duckdb",
            "sqlite": "sqlite"}
EMBEDDED = ("duckdb", "sqlite")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SqlTarget:
    """One database: `dialect` (postgresql, duckdb, sqlite); a server's host, port, database,
    user and connection parameters, or an embedded database's file `path`."""

    dialect: str
    host: str = ""
    port: int = 5432
    database: str = ""
    user: str = ""
    params: tuple[tuple[str, str], ...] = ()
    path: str = ""
    password: str | None = field(default=None, repr=False, compare=False)

    @property
    def display(self) -> str:
        """The URL as we show it: never the password."""
        if self.dialect in EMBEDDED:
            return f"{self.dialect}://{self.path}"
        return self._server_url(None)

    def uri(self) -> str:
        """The libpq URI a driver connects with, the password included when there is one
        (held in memory only, for the connection)."""
        return self._server_url(self.password)

    def _server_url(self, password: str | None) -> str:
        auth = quote(self.user, safe="")
        if password is not None:
            auth += f":{quote(password, safe='')}"
        query = f"?{urlencode(self.params)}" if self.params else ""
        return (f"postgresql://{auth + '@' if auth else ''}{self.host}:{self.port}/"
                f"{quote(self.database, safe='')}{query}")

    def redact(self, text: str) -> str:
        """`text` (a driver's message) with the password, plain or URL-quoted, replaced."""
        if self.password:
            for form in {self.password, quote(self.password, safe="")}:
                text = text.replace(form, "***")
        return text


def dialect_named(url: object) -> str | None:
    """The database a URL names (postgresql, duckdb, sqlite), None when it names none."""
    if not isinstance(url, str) or "://" not in url:
        return None
    return DIALECTS.get(url.split("://", 1)[0].lower())


def parse(url: object, base_dir: str, where: str, password_env: object = None) -> SqlTarget:
    """The source's `url` and `password_env`; a ConfigError in one line (never quoting the
    password) for anything we cannot read."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"{where}: 'url' must be a database URL such as "
                          "postgresql://user@host:5432/db, duckdb:///path/file.duckdb or "
                          "sqlite:///path/file.db")
    scheme = url.split("://", 1)[0].lower()
    dialect = dialect_named(url)
    if dialect is None:
        raise ConfigError(f"{where}: unknown database {scheme!r} in 'url'; expected one of "
                          f"{sorted(DIALECTS)}")
    if dialect in EMBEDDED:
        if password_env is not None:
            raise ConfigError(f"{where}: 'password_env' is for PostgreSQL; a {dialect} file "
                              "has no password")
        rest = url.split("://", 1)[1]
        if not rest:
            raise ConfigError(f"{where}: {dialect} URL without a file: {url!r}")
        path = rest if rest.startswith("/") else os.path.normpath(os.path.join(base_dir, rest))
        return SqlTarget(dialect, path=os.path.abspath(path))
    try:
        parts = urlsplit(url)
        port = parts.port or 5432
    except ValueError as e:  # a port that is not a number; the message never quotes the URL
        raise ConfigError(f"{where}: cannot read 'url' ({scheme}://...): {e}") from None
    password = unquote(parts.password) if parts.password is not None else None
    if password_env is not None:
        if not isinstance(password_env, str) or not _ENV_NAME.match(password_env):
            raise ConfigError(f"{where}: 'password_env' must name an environment variable, "
                              f"got {password_env!r}")
        if password_env not in os.environ:
            raise ConfigError(f"{where}: password_env {password_env} is not set in the "
                              "environment")
        password = os.environ[password_env]
    params = tuple(sorted(parse_qsl(parts.query)))
    if any(k == "password" for k, _ in params):
        password = password if password_env is not None else dict(params)["password"]
        params = tuple((k, v) for k, v in params if k != "password")
    database = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not database:
        raise ConfigError(f"{where}: 'url' needs a host and a database: "
                          f"postgresql://user@host:5432/database, got "
                          f"{SqlTarget('postgresql', parts.hostname or '', port, database).display}")
    return SqlTarget("postgresql", parts.hostname, port, database,
                     unquote(parts.username or ""), params, password=password)


def for_workers(config: dict[str, object], target: SqlTarget, variable: str) -> dict[str, object]:
    """The source's settings as the pipeline gets them: the URL without its password, which
    the readers take from the environment variable `variable`, set here in the launcher's
    environment (its worker processes inherit it; remote workers set their own)."""
    if target.password is None or config.get("password_env") is not None:
        return {**config, "url": target.display}
    os.environ[variable] = target.password
    return {**config, "url": target.display, "password_env": variable}
