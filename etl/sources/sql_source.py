"""`format: sql`: the rows of a query on PostgreSQL, DuckDB or SQLite, as Arrow batches.

    source:
      format: sql
      url: postgresql://etl@db.example:5432/warehouse   # duckdb:///f.duckdb, sqlite:///f.db
      password_env: ETL_PG_PASSWORD                      # optional (etl.sources.sql_url)
      query: "SELECT id, x, s, label FROM events WHERE day = '{date}'"
      key: id          # optional: an integer column, unique per row
      split_by: id     # optional: an integer or date column; its ranges are read in parallel

A record's position (what its shuffle key and id derive from) never depends on the order the
database returns rows in: with `key`, it is the key's value (0 <= key < 2**40, checked unique
in the pass below); without, the query is read in one piece ordered by every column, and it is
the row's rank in that order (rows equal in every column are the same record bytes, so their
order among themselves changes nothing). So the shards are byte-identical between runs over
the same rows, with or without `split_by` (which needs a key; an integer `split_by` is its own
key when `key` is not given).

Before anything is read, one pass of the database over the query (`survey`) checks the
columns' types (etl.sources.sql_dialects.exact_columns), the key, the split column's range,
and computes the rows' fingerprint (count and an order-independent hash): a rerun over the
same rows is current, an UPDATE of one row rebuilds the span. A run does that pass inside
what `held` keeps for it (one PostgreSQL snapshot every reader imports, DuckDB's file lock,
an SQLite read transaction), so what was fingerprinted is exactly what is read.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from etl.base.errors import ConfigError, StorageError
from etl.sources import sql_url
from etl.sources.base import Block, Source, Split, options
from etl.sources.file_source import block_rows, int_option
from etl.sources.sql_dialects import (
    ROWS,
    Dialect,
    convert,
    dialect_of,
    exact_columns,
    ident,
    subquery,
)

MAX_KEY = 1 << 40  # etl.shuffle.keys.ID_POSITION_BITS: a position is below 2**40
DEFAULT_SPLIT_ROWS = 1_000_000
RETRIES = 3  # a connection that fails before the first batch: tried again after 1, 2, 4 s
_NAME = re.compile(r"[^A-Za-z0-9_]")


class SqlReader(Source):
    """`format: sql`; options: url, password_env, query, key, split_by, split_rows, block_rows.
    (`snapshot` and `survey` are set by `held` for the run's readers, not by a job file.)"""

    OPTIONS = {"url", "password_env", "query", "key", "split_by", "split_rows", "block_rows",
               "snapshot", "survey"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        opts = options(config, self.OPTIONS, where)
        if "paths" in config:
            raise ConfigError(f"{where}: a sql source takes 'url' and 'query', not 'paths'")
        self.where = where
        self.target = sql_url.parse(opts.get("url"), base_dir, where, opts.get("password_env"))
        self.dialect: Dialect = dialect_of(self.target)
        query = opts.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(f"{where}: 'query' must be an SQL SELECT, got {query!r}")
        self.query = query.strip().rstrip(";").strip()
        self.key = _column_option(opts, "key", where)
        self.split_by = _column_option(opts, "split_by", where)
        if self.split_by is not None and self.target.dialect == "sqlite":
            raise ConfigError(f"{where}: split_by is for PostgreSQL and DuckDB; an SQLite file is "
                              "read in one piece, in one read transaction")
        self.split_rows = int_option(opts, "split_rows", DEFAULT_SPLIT_ROWS, where, minimum=1)
        self.block_rows = block_rows(opts, where)
        self.snapshot = opts.get("snapshot")
        self._survey: dict[str, Any] | None = opts.get("survey")

    # ------------------------------------------------------------------ what the plan sees

    @property
    def unit(self) -> str:
        """The one read unit: the database (as shown, no password) and the query's digest;
        its last part is the unit's identity (keys.identities), so moving the database to
        another host keeps the shards."""
        digest = hashlib.sha256(self.query.encode()).hexdigest()[:12]
        return f"sql:{self.target.display}#query-{digest}"

    def files(self) -> list[str]:
        return [self.unit]

    def sizes(self) -> dict[str, int]:
        return {self.unit: 0}  # rows, not bytes: progress counts records

    def fingerprints(self) -> dict[str, dict[str, str]]:
        survey = self.survey()
        return {self.unit: {"kind": ROWS, "value": f"{survey['rows']}:{survey['hash']}"}}

    def survey(self) -> dict[str, Any]:
        """The pass over the query (types, key, split range, fingerprint); the one `held`
        made for the run when there is one, else one of its own."""
        if self._survey is None:
            with connected(self.dialect) as conn:
                self.dialect.begin_read(conn, self.snapshot)
                try:
                    self._survey = self.survey_in(conn)
                finally:
                    self._end(conn)
        return self._survey

    def survey_in(self, conn: Any) -> dict[str, Any]:
        """The pass, on `conn` (in the run's snapshot when it holds one)."""
        where = f"{self.where} ({self.target.display})"
        d = self.dialect
        try:
            schema = d.schema(conn, self.query)
        except d.driver_errors() as e:  # syntax errors, unknown tables and columns
            raise d.error(e, self.query) from None
        columns = list(schema.names)
        how = {} if d.name == "sqlite" else exact_columns(schema, where)
        key, temporal = self._roles(schema, where)
        row, distinct = self._aggregate(conn, columns, key, temporal)
        rows = int(row[0])
        survey: dict[str, Any] = {"rows": rows, "hash": str(row[1]), "how": how,
                                  "columns": columns, "key": key, "temporal": temporal}
        if key is not None:
            present, low, high = row[2:5]
            self._check_key(key, rows, present, distinct, low, high, where)
        if self.split_by is not None:
            low, high = row[-2:]
            survey["split_range"] = None if low is None else [int(low), int(high)]
        return survey

    def _roles(self, schema: pa.Schema, where: str) -> tuple[str | None, bool]:
        """The key column (an integer `split_by` is its own key when none is named) and
        whether the split column is a date; each checked against the query's columns."""
        columns = schema.names
        key = self.key
        if key is None and self.split_by is not None:
            key = self.split_by
        for role, name in (("key", key), ("split_by", self.split_by)):
            if name is not None and name not in columns:
                raise ConfigError(f"{where}: {role} {name!r} is not a column of the query; it "
                                  f"returns {columns}")
        temporal = False
        if self.split_by is not None:
            t = schema.field(self.split_by).type
            temporal = pa.types.is_date(t)
            if not (temporal or pa.types.is_integer(t)):
                raise ConfigError(f"{where}: split_by {self.split_by!r} must be an integer or "
                                  f"date column, it is {t}")
        if (key is not None and self.dialect.name != "sqlite"
                and not pa.types.is_integer(schema.field(key).type)):
            role = "key" if self.key is not None else "split_by (the key when none is given)"
            raise ConfigError(f"{where}: {role} {key!r} must be an integer column unique per "
                              f"row, it is {schema.field(key).type}; name one with key:")
        return key, temporal

    def _aggregate(self, conn: Any, columns: list[str], key: str | None,
                   temporal: bool) -> tuple[tuple[Any, ...], int | None]:
        """count, rows hash[, key count, min, max][, split min, max], and the key's distinct
        values as a query of its own: beside count(DISTINCT) PostgreSQL would not run the pass
        in parallel (benchmarks/README.md, "Databases": the survey as one query or two)."""
        d = self.dialect
        parts = ["count(*)", d.rows_hash(columns)]
        if key is not None:
            k = f"q.{ident(key)}"
            parts += [f"count({k})", f"min({k})", f"max({k})"]
        if self.split_by is not None:
            s = f"q.{ident(self.split_by)}"
            expr = d.days(s) if temporal else s
            parts += [f"min({expr})", f"max({expr})"]
        try:
            row = d.scalar_row(conn, f"SELECT {', '.join(parts)} FROM {subquery(self.query)}")
            distinct = (d.scalar_row(conn, f"SELECT count(DISTINCT q.{ident(key)}) FROM "
                                           f"{subquery(self.query)}")[0]
                        if key is not None and row[2] == row[0] else None)
        except d.driver_errors() as e:
            raise d.error(e, self.query) from None
        return row, distinct

    def _check_key(self, key: str, rows: int, present: int, distinct: int | None, low: Any,
                   high: Any, where: str) -> None:
        """A key names every row once, with an integer in [0, 2**40) (its position)."""
        role = "key" if self.key is not None else "split_by"
        if rows and not (isinstance(low, int) and isinstance(high, int)):  # SQLite: untyped
            raise ConfigError(f"{where}: {role} {key!r} must be an integer column unique per "
                              f"row; it holds {type(low).__name__} values")
        if present != rows:
            raise ConfigError(f"{where}: {role} {key!r} is NULL in {rows - present} of "
                              f"{rows} rows; a key must name every row")
        if distinct != rows:
            raise ConfigError(f"{where}: {role} {key!r} is not unique: {rows} rows, {distinct} "
                              "distinct values; name a unique integer column with key:")
        if rows and (int(low) < 0 or int(high) >= MAX_KEY):
            raise ConfigError(f"{where}: {role} {key!r} ranges over [{low}, {high}]; a key "
                              f"must lie in [0, 2**40) (it is the record's position)")

    def prepare(self, schema: Any, max_record_bytes: int) -> None:
        """The query's columns against the schema: a column no feature reads (other than the
        key and split column) or a required feature's column the query lacks is an error,
        before anything is read (a typo in a SELECT never becomes a silently missing value)."""
        super().prepare(schema, max_record_bytes)
        check_columns(self.survey(), schema, self.split_by, f"{self.where} ({self.target.display})")

    # --------------------------------------------------------------------------- reading

    def splits(self, path: str, target_bytes: int) -> list[Split]:
        survey = self.survey()
        span = survey.get("split_range")
        if self.split_by is None or span is None or survey["rows"] <= self.split_rows:
            return [Split(path)]
        low, high = span
        count = min(math.ceil(survey["rows"] / self.split_rows), high - low + 1)
        step = math.ceil((high - low + 1) / count)
        cuts = list(range(low, high + 1, step))
        n = len(cuts)
        return [Split(path, i, n, a, cuts[i + 1] if i + 1 < n else None)
                for i, a in enumerate(cuts)]

    def read_split(self, split: Split) -> Iterator[Block]:
        survey = self.survey()
        key = survey["key"]
        sql = f"SELECT * FROM {subquery(self.query)}{self._range(split, survey)}"
        if key is None:  # the row's rank in this order is its position
            sql += " ORDER BY " + ", ".join(str(i + 1) for i in range(len(survey["columns"])))
        position = 0
        for attempt in range(RETRIES + 1):
            try:
                with ExitStack() as stack:
                    conn = stack.enter_context(connected(self.dialect))
                    self.dialect.begin_read(conn, self.snapshot)
                    stack.callback(self._end, conn)
                    self._same_rows(conn, survey)
                    for batch in self._batches(conn, sql):
                        n = batch.num_rows
                        if key is not None:
                            positions = np.asarray(batch.column(key).to_numpy(zero_copy_only=False),
                                                   np.int64)
                        else:
                            positions = np.arange(position, position + n, dtype=np.int64)
                        position += n
                        yield Block(convert(batch, survey["how"]), positions, source=split.path)
                return
            except StorageError:
                if position or attempt == RETRIES:  # records given already: Beam retries it
                    raise
                time.sleep(2 ** attempt)

    def _range(self, split: Split, survey: dict[str, Any]) -> str:
        if split.whole:
            return ""
        col = f"q.{ident(self.split_by or '')}"
        temporal = survey["temporal"]
        lower = f"{col} >= {self.dialect.literal(split.start, temporal)}"
        upper = (f"{col} < {self.dialect.literal(split.stop, temporal)}"
                 if split.stop is not None else None)
        if split.first:
            return f" WHERE {upper}"
        if upper is None:  # the last range also takes the rows without a value
            return f" WHERE ({lower} OR {col} IS NULL)"
        return f" WHERE {lower} AND {upper}"

    def _same_rows(self, conn: Any, survey: dict[str, Any]) -> None:
        """SQLite: readers do not share the launcher's transaction, so the read checks, in its
        own, that the rows are the ones the run fingerprinted."""
        if self.dialect.name != "sqlite" or self._survey is None or "held" not in survey:
            return
        now = self.survey_in(conn)
        if (now["rows"], now["hash"]) != (survey["rows"], survey["hash"]):
            raise ConfigError(f"{self.where}: {self.target.display} changed while the run read "
                              f"it ({survey['rows']} rows fingerprinted, {now['rows']} rows "
                              "now); nothing was published: the next run reads it again")

    def _batches(self, conn: Any, sql: str) -> Iterator[pa.RecordBatch]:
        try:
            yield from self.dialect.batches(conn, sql, self.block_rows)
        except self.dialect.driver_errors() as e:
            raise self.dialect.error(e, self.query) from None

    def _end(self, conn: Any) -> None:
        try:
            self.dialect.end_read(conn)
        except self.dialect.driver_errors():  # the connection closes next; its error says more
            pass


@contextmanager
def connected(dialect: Dialect) -> Iterator[Any]:
    """A connection, tried again after 1, 2 and 4 s when the server cannot be reached or drops
    it (StorageError: a refused or reset connection; a wrong password is not retried)."""
    with ExitStack() as stack:
        for attempt in range(RETRIES + 1):
            try:
                conn = stack.enter_context(dialect.connect())
                break
            except StorageError:
                if attempt == RETRIES:
                    raise
                time.sleep(2 ** attempt)
        yield conn


def check_columns(survey: dict[str, Any], schema: Any, split_by: str | None, where: str) -> None:
    have = survey["columns"]
    wanted = set(schema.source_columns)
    extra = [c for c in have if c not in wanted and c not in (survey["key"], split_by)]
    if extra:
        raise ConfigError(f"{where}: the query returns column(s) {extra} that no schema feature "
                          "reads; leave them out of the SELECT or add features for them")
    missing = [c for f in schema.features if f.required and f.default is None
               for c in f.sources if c not in have]
    if missing:
        raise ConfigError(f"{where}: the query returns no column(s) {missing}, which required "
                          f"schema features read; it returns {have}")


def _column_option(opts: Mapping[str, Any], name: str, where: str) -> str | None:
    value = opts.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{where}: {name!r} must be a column name, got {value!r}")
    return value


@contextmanager
def held(sources: Mapping[str, dict[str, Any]], base_dir: str, where: str = "job",
         schema: Any = None) -> Iterator[dict[str, dict[str, Any]]]:
    """For a run: each sql source's one version of the data, held until the run ends, and
    the source settings its readers get (the snapshot, the survey made in it, the URL without
    its password). Other sources pass through unchanged."""
    out: dict[str, dict[str, Any]] = {}
    before: dict[str, str | None] = {}  # the launcher's variables we set: restored at the end
    with ExitStack() as stack:
        for name, cfg in sources.items():
            if not isinstance(cfg, Mapping) or cfg.get("format") != "sql":
                out[name] = cfg
                continue
            reader = SqlReader(dict(cfg), base_dir, f"{where}: sources.{name}")
            conn = stack.enter_context(connected(reader.dialect))
            try:
                snapshot = reader.dialect.begin_held(conn)
                if reader.dialect.name == "sqlite":
                    reader.dialect.begin_read(conn, None)  # its shared lock keeps writers out
                survey = {**reader.survey_in(conn), "held": True}
                if schema is not None:
                    check_columns(survey, schema, reader.split_by,
                                  f"{reader.where} ({reader.target.display})")
            except reader.dialect.driver_errors() as e:
                raise reader.dialect.error(e, reader.query) from None
            # ETL_SQL_PASSWORD for a job's one `source:`, ETL_SQL_PASSWORD_<NAME> in `sources:`
            variable = "ETL_SQL_PASSWORD" + ("" if name == "*" else
                                             "_" + _NAME.sub("_", name).upper())
            before.setdefault(variable, os.environ.get(variable))
            out[name] = sql_url.for_workers(
                {**cfg, "snapshot": snapshot, "survey": survey}, reader.target, variable)
        try:
            yield out
        finally:
            for variable, value in before.items():
                if value is None:
                    os.environ.pop(variable, None)
                else:
                    os.environ[variable] = value
