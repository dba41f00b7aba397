"""What differs between the databases a `format: sql` source reads: how to connect, how a
query comes back as Arrow batches, how a run holds one version of the data, how the rows'
fingerprint is computed by the database, and what a driver's error means.

- PostgreSQL through ADBC's libpq driver (the rows arrive as Arrow: COPY ... (FORMAT binary)
  under the hood, no Python object per row). One version: the launcher exports a snapshot
  from a REPEATABLE READ transaction it keeps open for the run; every reader imports it.
- DuckDB through its own Python API, read-only: the launcher's read-only connection holds
  DuckDB's file lock, so no writer changes the file while the run reads it.
- SQLite through the standard library, read-only, one read transaction per read (the source
  reads it in one piece, and checks the rows' fingerprint in that same transaction).

Drivers are imported on first use: a job without a database source never loads them.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from etl.base.errors import ConfigError, EtlError, StorageError
from etl.sources.sql_url import SqlTarget

_SNAPSHOT = re.compile(r"^[0-9A-Fa-f-]+$")  # what pg_export_snapshot() returns
ROWS = "rows"  # fingerprint kind: count and order-independent hash of the rows, by the database


def ident(name: str) -> str:
    """A column name as an SQL identifier (the same quoting in all three dialects)."""
    return '"' + name.replace('"', '""') + '"'


def subquery(query: str) -> str:
    """The user's query as a derived table `q` (a trailing `;` dropped)."""
    return f"({query.strip().rstrip(';').strip()}) AS q"


class Dialect:
    """One database's ways; `target` says which database."""

    name = ""

    def __init__(self, target: SqlTarget):
        self.target = target

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """A connection (its driver's errors as ours), closed at the end."""
        try:
            conn = self._open()
        except self.driver_errors() as e:
            raise self.error(e, "") from None
        try:
            yield conn
        finally:
            conn.close()

    def _open(self) -> Any:
        raise NotImplementedError

    def rows_hash(self, columns: Sequence[str]) -> str:
        """An aggregate over the rows of `q`: the same value for the same rows in any order."""
        raise NotImplementedError

    def batches(self, conn: Any, sql: str, rows: int) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError

    def scalar_row(self, conn: Any, sql: str) -> tuple[Any, ...]:
        """The one row of an aggregate query (its columns by position)."""
        table = self.table(conn, sql)
        return tuple(col[0].as_py() for col in table.columns)

    def driver_errors(self) -> tuple[type[BaseException], ...]:
        """The driver's own exception classes: translated by `error`; anything else is a bug
        of ours and keeps its traceback."""
        raise NotImplementedError

    def table(self, conn: Any, sql: str) -> pa.Table:
        return pa.Table.from_batches(list(self.batches(conn, sql, 1 << 16)), self.schema(conn, sql))

    def schema(self, conn: Any, sql: str) -> pa.Schema:
        raise NotImplementedError

    def begin_held(self, conn: Any) -> str | None:
        """Start what keeps one version of the data for the run (the launcher's connection);
        returns what readers need to see it (PostgreSQL: the snapshot id)."""
        return None

    def begin_read(self, conn: Any, snapshot: str | None) -> None:
        """Start a reader's transaction, in the held snapshot when there is one."""

    def end_read(self, conn: Any) -> None:
        """End a reader's transaction."""

    def literal(self, value: int, temporal: bool) -> str:
        """A split bound in SQL: an integer, or a date given as days since 1970-01-01."""
        if temporal:
            return f"(DATE '1970-01-01' + {int(value)})"
        return str(int(value))

    def days(self, expr: str) -> str:
        """A date expression as days since 1970-01-01 (an integer)."""
        return f"({expr} - DATE '1970-01-01')"

    def error(self, e: BaseException, query: str) -> EtlError:
        """A driver's exception as our error: one line naming the database and the query's
        first line, never the password; exit 5 for connection and I/O, 2 for the rest."""
        text = self.target.redact(_essential(str(e)))
        first = query.strip().splitlines()[0][:120] if query.strip() else ""
        where = f"{self.target.display}" + (f", query {first!r}" if first else "")
        kind = StorageError if _is_connection(e, text) else ConfigError
        return kind(f"{where}: {text[:400]}")


def _essential(raw: str) -> str:
    """What a driver's message says, on one line: the server's own ERROR/FATAL text when there
    is one (ADBC wraps it in its status, the SQL it ran and a LINE excerpt), else its first
    line without the driver's prefixes."""
    found = re.search(r"(?:ERROR|FATAL):\s+([^\n]*)", raw)
    if found:
        return " ".join(found.group(1).split())
    first = next((line for line in raw.splitlines() if line.strip()), raw)
    first = re.sub(r"^(?:[A-Z_]+: )?(?:\[libpq\] )?(?:Failed to connect: )?", "", first.strip())
    return " ".join(first.split())


def _is_connection(e: BaseException, text: str) -> bool:
    name = type(e).__name__
    lowered = text.lower()
    return (name in {"OperationalError", "IOException", "InterfaceError"}
            and not any(k in lowered for k in ("does not exist", "password authentication",
                                                "permission denied", "no password supplied",
                                                "syntax error")))


class Postgres(Dialect):
    name = "postgresql"

    def _open(self) -> Any:
        from adbc_driver_postgresql import dbapi  # noqa: PLC0415 - only for PostgreSQL sources

        return dbapi.connect(self.target.uri(), autocommit=True)

    def driver_errors(self) -> tuple[type[BaseException], ...]:
        import adbc_driver_manager  # noqa: PLC0415

        return (adbc_driver_manager.Error,)

    def execute(self, conn: Any, sql: str) -> None:
        cur = conn.cursor()
        try:
            cur.execute(sql)
        finally:
            cur.close()

    def schema(self, conn: Any, sql: str) -> pa.Schema:
        cur = conn.cursor()  # prepared, not run: the server's errors point into `sql` itself
        try:
            return cur.adbc_execute_schema(sql)
        finally:
            cur.close()

    def batches(self, conn: Any, sql: str, rows: int) -> Iterator[pa.RecordBatch]:
        cur = conn.cursor()
        # ADBC cuts its stream by bytes (16 MB by default): about `rows` rows of ~100 bytes
        cur.adbc_statement.set_options(
            **{"adbc.postgresql.batch_size_hint_bytes": str(max(1 << 16, rows * 100))})
        try:
            cur.execute(sql)
            yield from cur.fetch_record_batch()
        finally:
            cur.close()

    def rows_hash(self, columns: Sequence[str]) -> str:
        # each row's text form (exact for every type) hashed to 64 bits by the hash PostgreSQL
        # keeps stable for hash partitioning (about 5x cheaper than md5), summed as numeric
        return "coalesce(sum(hashtextextended(q::text, 0)), 0)::text"

    def begin_held(self, conn: Any) -> str | None:
        self.execute(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = self.scalar_row(conn, "SELECT pg_export_snapshot() AS s")[0]
        return str(snapshot)

    def begin_read(self, conn: Any, snapshot: str | None) -> None:
        self.execute(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        if snapshot is not None:
            if not _SNAPSHOT.match(snapshot):
                raise ConfigError(f"{self.target.display}: not a snapshot id: {snapshot!r}")
            try:
                self.execute(conn, f"SET TRANSACTION SNAPSHOT '{snapshot}'")
            except self.driver_errors() as e:
                if "invalid snapshot identifier" not in str(e):
                    raise
                # its exporting transaction ended: the launcher stopped before the readers
                raise ConfigError(
                    f"{self.target.display}: the run's snapshot {snapshot} is gone: the "
                    "launcher holds it only while it runs, and it stopped before this read; "
                    "nothing was published, run the job again") from None

    def end_read(self, conn: Any) -> None:
        self.execute(conn, "COMMIT")

    def literal(self, value: int, temporal: bool) -> str:
        return f"(DATE '1970-01-01' + {int(value)})" if temporal else f"{int(value)}::bigint"


class DuckDB(Dialect):
    name = "duckdb"

    def _open(self) -> Any:
        import duckdb  # noqa: PLC0415 - only for DuckDB sources

        return duckdb.connect(self.target.path, read_only=True)

    def driver_errors(self) -> tuple[type[BaseException], ...]:
        import duckdb  # noqa: PLC0415

        return (duckdb.Error,)

    def schema(self, conn: Any, sql: str) -> pa.Schema:
        return conn.sql(f"SELECT * FROM ({sql}) AS s LIMIT 0").to_arrow_table().schema

    def batches(self, conn: Any, sql: str, rows: int) -> Iterator[pa.RecordBatch]:
        yield from conn.sql(sql).to_arrow_reader(rows)

    def rows_hash(self, columns: Sequence[str]) -> str:
        return "coalesce(sum(hash(q)::HUGEINT), 0)::VARCHAR"

    def days(self, expr: str) -> str:
        return f"date_diff('day', DATE '1970-01-01', {expr})"


class _RowsHash:
    """SQLite aggregate: the sum (mod 2**64) of each row's 8-byte BLAKE2b over its values'
    types and exact forms (floats by their bits), so the same rows in any order give one value."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, *values: Any) -> None:
        digest = hashlib.blake2b(repr([(type(v).__name__, v.hex() if isinstance(v, float) else v)
                                       for v in values]).encode(), digest_size=8).digest()
        self.total = (self.total + int.from_bytes(digest, "little")) & ((1 << 64) - 1)

    def finalize(self) -> str:
        return f"{self.total:016x}"


class SQLite(Dialect):
    name = "sqlite"

    def _open(self) -> Any:
        if not os.path.isfile(self.target.path):  # sqlite3 would say "unable to open"
            raise ConfigError(f"{self.target.display}: no such SQLite file")
        conn = sqlite3.connect(f"file:{self.target.path}?mode=ro", uri=True,
                               isolation_level=None, check_same_thread=False)
        conn.create_aggregate("etl_rows_hash", -1, _RowsHash)  # type: ignore[arg-type]
        return conn

    def driver_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def schema(self, conn: Any, sql: str) -> pa.Schema:
        cur = conn.execute(f"SELECT * FROM ({sql}) AS s LIMIT 0")
        return pa.schema([(d[0], pa.null()) for d in cur.description])

    def batches(self, conn: Any, sql: str, rows: int) -> Iterator[pa.RecordBatch]:
        cur = conn.execute(sql)
        names = [d[0] for d in cur.description]
        while True:
            chunk = cur.fetchmany(rows)
            if not chunk:
                return
            columns = list(zip(*chunk, strict=True))
            arrays = []
            for name, values in zip(names, columns, strict=True):
                try:
                    arrays.append(pa.array(values))
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                    kinds = sorted({type(v).__name__ for v in values if v is not None})
                    raise ConfigError(
                        f"{self.target.display}: column {name!r} holds values of several types "
                        f"({', '.join(kinds)}: SQLite's columns are not typed); cast it in the "
                        f"query (CAST({name} AS TEXT), ...)") from e
            yield pa.RecordBatch.from_arrays(arrays, names=names)

    def table(self, conn: Any, sql: str) -> pa.Table:
        batches = list(self.batches(conn, sql, 1 << 16))
        if batches:
            return pa.Table.from_batches(batches)
        return pa.table({name: pa.array([], pa.null()) for name in self.schema(conn, sql).names})

    def rows_hash(self, columns: Sequence[str]) -> str:
        return f"etl_rows_hash({', '.join('q.' + ident(c) for c in columns)})"

    def begin_read(self, conn: Any, snapshot: str | None) -> None:
        conn.execute("BEGIN")

    def end_read(self, conn: Any) -> None:
        conn.execute("COMMIT")

    def days(self, expr: str) -> str:
        return f"CAST(julianday({expr}) - 2440587.5 AS INTEGER)"


DIALECTS: dict[str, type[Dialect]] = {"postgresql": Postgres, "duckdb": DuckDB, "sqlite": SQLite}


def dialect_of(target: SqlTarget) -> Dialect:
    return DIALECTS[target.dialect](target)


# ------------------------------------------------------------------------- types we map

def exact_columns(schema: pa.Schema, where: str) -> dict[str, str]:
    """Each column's Arrow type checked: the ones we store exactly pass; a PostgreSQL numeric
    is kept as its decimal text or decimal128 (`convert`); anything else is refused,
    naming the column and its database type. Returns column -> how it is converted."""
    how: dict[str, str] = {}
    for f in schema:
        how[f.name] = _how(f, where)
    return how


_SCALARS = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
            pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary,
            pa.types.is_date32, pa.types.is_timestamp, pa.types.is_decimal, pa.types.is_null)


def _db_type(f: pa.Field) -> str:
    meta = f.metadata or {}
    for key, value in meta.items():
        if key.upper().endswith(b"TYPE"):
            return value.decode(errors="replace")
    return str(f.type)


def _how(f: pa.Field, where: str) -> str:
    t = f.type
    if isinstance(t, pa.ExtensionType) or isinstance(t, pa.BaseExtensionType):
        name = getattr(t, "extension_name", "")
        if name == "arrow.opaque" and getattr(t, "type_name", "") == "numeric":
            return "numeric"
        if name == "arrow.json":
            return "storage"
        raise ConfigError(f"{where}: column {f.name!r} has type {_db_type(f)}, which has no exact "
                          "TFRecord form here; cast it in the query (to text, a number or a "
                          "date)")
    if any(test(t) for test in _SCALARS):
        return "as_is"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and any(
            test(t.value_type) for test in _SCALARS):
        return "as_is"
    raise ConfigError(f"{where}: column {f.name!r} has type {_db_type(f)} ({t}), which has no "
                      "exact TFRecord form here; cast it in the query (intervals to seconds, "
                      "uuid/json to text, composite types to their fields)")


def convert(batch: pa.RecordBatch, how: dict[str, str]) -> dict[str, Any]:
    """A batch's columns as the encoder takes them: numeric(p, s) as decimal128(p, s), an
    unconstrained numeric as its exact decimal text, JSON as its text."""
    columns: dict[str, Any] = {}
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        kind = how.get(name, "as_is")
        if kind == "numeric":
            text = col.storage
            p, s = _numeric_typmod(batch.schema.field(name))
            columns[name] = pc.cast(text, pa.decimal128(p, s)) if p else text
        elif kind == "storage":
            columns[name] = col.storage
        else:
            columns[name] = col
    return columns


def _numeric_typmod(f: pa.Field) -> tuple[int, int]:
    """numeric(p, s)'s precision and scale from the driver's typmod metadata ((0, 0): none,
    or a precision beyond decimal128's 38 digits)."""
    for key, value in (f.metadata or {}).items():
        if key.lower().endswith(b"typmod"):
            try:
                typmod = int(value) - 4
            except ValueError:
                return 0, 0
            if typmod < 0:
                return 0, 0
            p, s = (typmod >> 16) & 0xFFFF, typmod & 0xFFFF
            return (p, s) if 0 < p <= 38 and s <= p else (0, 0)
    return 0, 0
