"""The append hot path, on one raw DBAPI connection per store.

Every tick records each model call's spend the moment it happens, so appends are many and
small. SQLAlchemy Core spends about ten times the database's own work per statement here;
this writer keeps SQLAlchemy's types (their bind processors format UUIDs, datetimes and
JSON exactly as the rest of the store reads them) but sends three hand-written statements
on a connection it keeps, under a lock, for the life of the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Engine

from harness.store.records import (
    NO_STREAM,
    ExpectedVersion,
    NewEvent,
    SchemaError,
    StoreError,
    StoreUnavailableError,
)
from harness.store.schema import events

_INSERTED = (
    "event_id",
    "stream_id",
    "stream_position",
    "type",
    "version",
    "data",
    "metadata",
    "recorded_at",
)


class Refused(Exception):
    """The database refused the append (version mismatch or unique violation); rolled back."""


def driver_error(exc: BaseException) -> StoreError | None:
    """Classify a PEP 249 driver error by its standard class names (any driver has them)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    text = str(exc).strip()
    if "no such table" in text or "UndefinedTable" in names:
        return SchemaError(f"the store has no schema ({text}): run `tickwork migrate`")
    if names & {"OperationalError", "InterfaceError"}:
        return StoreUnavailableError(f"event store unavailable: {text}")
    if "ProgrammingError" in names:
        return SchemaError(f"the store's schema does not match: {text}")
    return None


class Writer:
    """Serialized appends: positions are handed out and committed in the same order."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._connection: Any = None
        dialect = engine.dialect
        postgres = dialect.name == "postgresql"
        mark: Callable[[str], str] = ("%({})s" if postgres else ":{}").format
        self._begin = "LOCK TABLE events IN EXCLUSIVE MODE" if postgres else "BEGIN IMMEDIATE"
        self._version_sql = (
            f"SELECT max(stream_position) FROM events WHERE stream_id = {mark('stream_id')}"
        )
        self._insert_sql = (
            f"INSERT INTO events ({', '.join(_INSERTED)}) "
            f"VALUES ({', '.join(mark(name) for name in _INSERTED)}) RETURNING global_position"
        )
        self._bind = {
            name: processor
            for name in _INSERTED
            if (processor := events.c[name].type.dialect_impl(dialect).bind_processor(dialect))
        }

    def _cursor(self) -> Any:
        if self._connection is None:
            self._connection = self._engine.raw_connection()
        return self._connection.cursor()

    def append(
        self, stream_id: str, batch: Sequence[NewEvent], expected: ExpectedVersion
    ) -> tuple[tuple[int, ...], int]:
        """Insert the batch; returns (global positions, new stream version) or raises Refused."""
        with self._lock:
            try:
                return self._append(stream_id, batch, expected)
            except Refused:
                self._connection.rollback()
                raise
            except Exception as exc:
                if "IntegrityError" in {cls.__name__ for cls in type(exc).__mro__}:
                    self._connection.rollback()
                    raise Refused from exc
                self._discard()
                translated = driver_error(exc)
                if translated is None:
                    raise
                raise translated from exc

    def _append(
        self, stream_id: str, batch: Sequence[NewEvent], expected: ExpectedVersion
    ) -> tuple[tuple[int, ...], int]:
        cursor = self._cursor()
        cursor.execute(self._begin)
        current = 0
        if expected is not NO_STREAM:
            cursor.execute(self._version_sql, {"stream_id": stream_id})
            current = cursor.fetchone()[0] or 0
            if isinstance(expected, int) and current != expected:
                raise Refused
        now = datetime.now(UTC)
        positions = []
        for offset, event in enumerate(batch, start=1):
            row = {
                "event_id": event.event_id,
                "stream_id": stream_id,
                "stream_position": current + offset,
                "type": event.type,
                "version": event.version,
                "data": event.data,
                "metadata": event.metadata,
                "recorded_at": now,
            }
            for name, process in self._bind.items():
                row[name] = process(row[name])
            cursor.execute(self._insert_sql, row)
            positions.append(cursor.fetchone()[0])
        self._connection.commit()
        return tuple(positions), current + len(batch)

    def _discard(self) -> None:
        """Drop a connection in an unknown state; the next append opens a fresh one."""
        if self._connection is not None:
            try:
                self._connection.invalidate()
            finally:
                self._connection = None

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
