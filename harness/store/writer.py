"""The append hot path, on one raw DBAPI connection per store.

Every tick records each model call's spend the moment it happens, so appends are many and
small. SQLAlchemy Core spends about ten times the database's own work per statement here;
this writer keeps SQLAlchemy's types (their bind processors format UUIDs, datetimes and
JSON exactly as the rest of the store reads them) but sends one hand-written statement on
a connection it keeps, under a lock, for the life of the store.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from harness.contracts.records import NewEvent
from harness.store.engine import DURABILITY
from harness.store.records import (
    ANY,
    NO_STREAM,
    ExpectedVersion,
    SchemaError,
    StoreError,
    StoreUnavailableError,
)
from harness.store.schema import events


class Refused(Exception):
    """The database refused the append (version mismatch or unique violation); rolled back."""


def _pep249(name: str) -> tuple[type[Exception], ...]:
    """PEP 249's exception class `name` as sqlite3, psycopg and SQLAlchemy's wrappers define it.

    psycopg's classes are taken only once something imported it (the engine of a
    PostgreSQL store does): a process on SQLite cannot meet its errors, and importing it
    would cost every tick a tenth of a second.
    """
    modules = (sqlite3, sa.exc, sys.modules.get("psycopg"))
    return tuple(getattr(module, name) for module in modules if module is not None)


def driver_error(exc: BaseException) -> StoreError | None:
    """Classify a driver error (or SQLAlchemy's wrapper of one) by its PEP 249 class."""
    text = str(exc).strip()
    if _missing_table(exc):
        return SchemaError(f"the store has no schema ({text}): run `tickwork migrate`")
    if isinstance(exc, _pep249("OperationalError") + _pep249("InterfaceError")):
        return StoreUnavailableError(f"event store unavailable: {text}")
    if isinstance(exc, _pep249("ProgrammingError")):
        return SchemaError(f"the store's schema does not match: {text}")
    return None


def _missing_table(exc: BaseException) -> bool:
    """Whether the statement named a table the database lacks (the store was never migrated).

    PostgreSQL gives this its own SQLSTATE (`UndefinedTable`); SQLite only the generic
    SQLITE_ERROR it gives any statement it cannot prepare, so there the message tells.
    """
    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        exc = exc.orig
    if isinstance(exc, sqlite3.OperationalError):
        return exc.sqlite_errorcode == sqlite3.SQLITE_ERROR and "no such table" in str(exc)
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.errors.UndefinedTable)


class Writer:
    """Serialized appends: positions are handed out and committed in the same order.

    One statement does the whole append: it reads the stream's version, checks the
    expectation and inserts the batch, so a version mismatch inserts no row. On PostgreSQL
    the lock, the insert and the commit go out in one pipelined round trip, which keeps the
    time the table lock is held (and so the ceiling on appends a second) near the commit's
    own fsync.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._connection: Any = None
        self._postgres = engine.dialect.name == "postgresql"
        self._async_commit = engine.get_execution_options().get(DURABILITY) == "process"
        self._mark: Callable[[str], str] = ("%({})s" if self._postgres else ":{}").format
        self._statements: dict[int, str] = {}
        dialect = engine.dialect
        self._bind = {
            name: processor
            for name in ("event_id", "data", "metadata", "recorded_at")
            if (processor := events.c[name].type.dialect_impl(dialect).bind_processor(dialect))
        }

    def _statement(self, size: int) -> str:
        """INSERT … SELECT for a batch of `size`, cached per size."""
        if size not in self._statements:
            mark = self._mark
            rows = ", ".join(
                "(" + ", ".join(mark(f"{field}{i}") for field in "oetvdm") + ")"
                for i in range(size)
            )
            self._statements[size] = (
                "INSERT INTO events (event_id, stream_id, stream_position, type, version, "
                "data, metadata, recorded_at) "
                f"SELECT v.column2, {mark('stream_id')}, current.v + v.column1, v.column3, "
                f"v.column4, v.column5, v.column6, {mark('recorded_at')} "
                f"FROM (VALUES {rows}) AS v CROSS JOIN ("
                "SELECT COALESCE(MAX(stream_position), 0) AS v FROM events "
                f"WHERE stream_id = {mark('stream_id')}) AS current "
                f"WHERE {mark('expected')} < 0 OR current.v = {mark('expected')} "
                "RETURNING global_position, stream_position"
            )
        return self._statements[size]

    def _parameters(
        self, stream_id: str, batch: Sequence[NewEvent], expected: ExpectedVersion
    ) -> dict[str, Any]:
        bind = self._bind.get
        identity = _identity
        event_id, data, metadata = (bind(n, identity) for n in ("event_id", "data", "metadata"))
        parameters: dict[str, Any] = {
            "stream_id": stream_id,
            "recorded_at": bind("recorded_at", identity)(datetime.now(UTC)),
            "expected": -1 if expected is ANY else 0 if expected is NO_STREAM else expected,
        }
        for i, event in enumerate(batch):
            parameters[f"o{i}"] = i + 1
            parameters[f"e{i}"] = event_id(event.event_id)
            parameters[f"t{i}"] = event.type
            parameters[f"v{i}"] = event.version
            parameters[f"d{i}"] = data(event.data)
            parameters[f"m{i}"] = metadata(event.metadata)
        return parameters

    def append(
        self, stream_id: str, batch: Sequence[NewEvent], expected: ExpectedVersion
    ) -> tuple[tuple[int, ...], int]:
        """Insert the batch; returns (global positions, new stream version) or raises Refused."""
        (rows,) = self._transaction([(stream_id, batch)], expected)
        if not rows:
            raise Refused
        return tuple(sorted(row[0] for row in rows)), max(row[1] for row in rows)

    def create_streams(self, streams: Sequence[tuple[str, Sequence[NewEvent]]]) -> list[bool]:
        """Start each stream that does not exist yet, all in one transaction.

        Returns, per stream, whether it was created; a stream that exists is left as it is.
        Raises Refused (nothing written) on a unique violation, e.g. an event id reused.
        """
        return [bool(rows) for rows in self._transaction(streams, NO_STREAM)]

    def _transaction(
        self, streams: Sequence[tuple[str, Sequence[NewEvent]]], expected: ExpectedVersion
    ) -> list[list[Any]]:
        """One transaction of one checked INSERT per stream; the rows each returned."""
        statements = [
            (self._statement(len(batch)), self._parameters(stream_id, batch, expected))
            for stream_id, batch in streams
        ]
        with self._lock:
            try:
                if self._connection is None:
                    self._connection = self._open()
                if self._postgres:
                    return self._append_postgres(statements)
                return self._append_sqlite(statements)
            except Exception as exc:
                if isinstance(exc, _pep249("IntegrityError")):
                    self._connection.rollback()
                    raise Refused from exc
                self._discard()
                translated = driver_error(exc)
                if translated is None:
                    raise
                raise translated from exc

    def _open(self) -> Any:
        """Open a connection of the writer's own, taken out of the pool for good.

        On PostgreSQL it runs in autocommit with explicit BEGIN/COMMIT, and (durability
        `process`) with `synchronous_commit = off`: settings pooled connections must never
        inherit.
        """
        pooled = self._engine.raw_connection()
        pooled.detach()
        connection: Any = pooled.dbapi_connection
        if self._postgres:
            connection.autocommit = True
            if self._async_commit:
                connection.execute("SET synchronous_commit = off")
        return connection

    def _append_sqlite(self, statements: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
        cursor = self._connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            results = [cursor.execute(sql, values).fetchall() for sql, values in statements]
            if any(results):
                self._connection.commit()
            else:
                self._connection.rollback()
            return results
        finally:
            cursor.close()

    def _append_postgres(self, statements: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
        # One pipeline, one round trip: the table lock is held for the inserts and the
        # commit only, never while a network reply travels back to this process.
        connection = self._connection
        with connection.pipeline():
            connection.execute("BEGIN")
            connection.execute("LOCK TABLE events IN EXCLUSIVE MODE")
            cursors = [connection.execute(sql, values) for sql, values in statements]
            connection.execute("COMMIT")  # a mismatch inserted nothing: committing is harmless
        return [cursor.fetchall() for cursor in cursors]

    def _discard(self) -> None:
        """Drop a connection in an unknown state; the next append opens a fresh one."""
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
            self._connection = None

    def close(self) -> None:
        """Drop the writer's own connection; the next append opens a new one."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


def _identity(value: Any) -> Any:
    return value
