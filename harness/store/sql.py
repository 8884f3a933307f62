"""The event store on SQLAlchemy Core: one implementation for SQLite and PostgreSQL.

Appends are serialized so that global positions become visible in order: SQLite has one
writer by design (`BEGIN IMMEDIATE`), and on PostgreSQL each append transaction takes
`LOCK TABLE events IN EXCLUSIVE MODE` (readers are not blocked). A reader that resumes after
the last position it saw therefore never skips an event that commits late.

The happy path (`harness.store.writer`) is one INSERT … SELECT that checks the stream's
version and inserts the batch; duplicate and conflict diagnosis happens only after a
refusal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from harness.contracts.records import NewEvent, StoredEvent
from harness.store.base import EventStore, Tracking
from harness.store.engine import BEGIN_MODE
from harness.store.records import (
    ANY,
    AppendResult,
    ConcurrencyError,
    EventData,
    EventIdConflictError,
    ExpectedVersion,
)
from harness.store.schema import events, projection_checkpoints
from harness.store.writer import Refused, Writer, driver_error

MAX_BATCH = 1000
"""Events one append may carry: six parameters each, under SQLite's 32,766 per statement."""

_COLUMNS = (
    events.c.global_position,
    events.c.event_id,
    events.c.stream_id,
    events.c.stream_position,
    events.c.type,
    events.c.version,
    events.c.data,
    events.c.metadata,
    events.c.recorded_at,
)


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn driver errors into the store's own, in this one place (see `driver_error`)."""
    try:
        yield
    except sa.exc.DBAPIError as exc:
        if isinstance(exc, sa.exc.IntegrityError):
            raise
        translated = None if exc.orig is None else driver_error(exc.orig)
        if translated is None:
            raise
        raise translated from exc


def upsert(conn: sa.Connection, table: sa.Table) -> Any:
    """INSERT … ON CONFLICT for the connection's dialect (both have the same API)."""
    module = postgresql if conn.dialect.name == "postgresql" else sqlite
    return module.insert(table)


def _row_to_event(row: Any) -> StoredEvent:
    recorded_at = row.recorded_at
    if recorded_at.tzinfo is None:  # SQLite keeps no zone; everything stored is UTC.
        recorded_at = recorded_at.replace(tzinfo=UTC)
    return StoredEvent(
        global_position=row.global_position,
        event_id=row.event_id,
        stream_id=row.stream_id,
        stream_position=row.stream_position,
        type=row.type,
        version=row.version,
        data=row.data,
        metadata=row.metadata,
        recorded_at=recorded_at,
    )


class SqlEventStore(EventStore):
    """The event store over an engine whose schema is already at head."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = Writer(engine)

    @contextmanager
    def write_transaction(self) -> Iterator[sa.Connection]:
        """A read-then-write transaction; on SQLite it takes the write lock at BEGIN."""
        with translate_errors(), self.engine.connect() as conn:
            conn = conn.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
            with conn.begin():
                yield conn

    @contextmanager
    def read_transaction(self) -> Iterator[sa.Connection]:
        """A transaction for reads: unlike `write_transaction`, it takes no write lock at BEGIN."""
        with translate_errors(), self.engine.connect() as conn, conn.begin():
            yield conn

    def append(
        self,
        stream_id: str,
        events_: Sequence[NewEvent],
        expected_version: ExpectedVersion = ANY,
    ) -> AppendResult:
        """The writer's single INSERT … SELECT; only a refusal pays for diagnosis."""
        if isinstance(expected_version, int) and expected_version < 1:
            raise ValueError("an exact expected version is >= 1; use NO_STREAM for a new stream")
        if len(events_) > MAX_BATCH:
            raise ValueError(
                f"{len(events_)} events in one append: at most {MAX_BATCH} (one statement "
                "inserts the batch, and SQLite caps the parameters of a statement)"
            )
        if not events_:
            return AppendResult((), self.stream_version(stream_id))
        try:
            positions, version = self._writer.append(stream_id, events_, expected_version)
        except Refused:
            return self._diagnose_refusal(stream_id, events_, expected_version)
        return AppendResult(positions, version)

    def create_streams(self, streams: Mapping[str, Sequence[NewEvent]]) -> set[str]:
        """The whole wave in one writer transaction; a stream already started is skipped."""
        for stream_id, events_ in streams.items():
            if not 0 < len(events_) <= MAX_BATCH:
                raise ValueError(
                    f"stream {stream_id!r}: {len(events_)} events; a new stream starts with "
                    f"1 to {MAX_BATCH}"
                )
        if not streams:
            return set()
        items = list(streams.items())
        try:
            created = self._writer.create_streams(items)
        except Refused:
            raise EventIdConflictError(
                "an event id of the batch is stored already; nothing was written"
            ) from None
        return {stream_id for (stream_id, _), new in zip(items, created, strict=True) if new}

    def _diagnose_refusal(
        self, stream_id: str, events_: Sequence[NewEvent], expected: ExpectedVersion
    ) -> AppendResult:
        """Tell a retried append (a no-op) from a real conflict, after the rollback."""
        wanted = [event.event_id for event in events_]
        with self.read_transaction() as conn:
            stored: dict[UUID, int] = dict(
                conn.execute(
                    sa.select(events.c.event_id, events.c.global_position).where(
                        events.c.event_id.in_(wanted)
                    )
                ).all()
            )
            version = _version(conn, stream_id)
        if len(stored) == len(wanted):
            return AppendResult(tuple(stored[i] for i in wanted), version, duplicate=True)
        if stored:
            raise EventIdConflictError(
                f"stream {stream_id!r}: {len(stored)} of {len(wanted)} event ids are stored "
                "already; a batch is retried whole or not at all"
            )
        raise ConcurrencyError(stream_id, expected, version)

    def read_stream(
        self, stream_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        """One indexed range query on (stream_id, stream_position)."""
        query = (
            sa.select(*_COLUMNS)
            .where(events.c.stream_id == stream_id, events.c.stream_position > after)
            .order_by(events.c.stream_position)
            .limit(limit)
        )
        with self.read_transaction() as conn:
            return [_row_to_event(row) for row in conn.execute(query)]

    def read_streams(
        self, stream_ids: Iterable[str], types: Iterable[str] | None = None
    ) -> dict[str, list[StoredEvent]]:
        """Queried in slices of `MAX_BATCH` ids, under the driver's parameter cap."""
        wanted = list(dict.fromkeys(stream_ids))
        kinds = None if types is None else list(types)
        found: dict[str, list[StoredEvent]] = {stream_id: [] for stream_id in wanted}
        with self.read_transaction() as conn:
            for start in range(0, len(wanted), MAX_BATCH):
                query = (
                    sa.select(*_COLUMNS)
                    .where(events.c.stream_id.in_(wanted[start : start + MAX_BATCH]))
                    .order_by(events.c.stream_id, events.c.stream_position)
                )
                if kinds is not None:
                    query = query.where(events.c.type.in_(kinds))
                for row in conn.execute(query):
                    event = _row_to_event(row)
                    found[event.stream_id].append(event)
        return found

    def read_all(
        self,
        after_position: int = 0,
        limit: int = 1000,
        types: Iterable[str] | None = None,
    ) -> list[StoredEvent]:
        """On the primary key; appends are serialized, so no commit lands behind a reader."""
        query = (
            sa.select(*_COLUMNS)
            .where(events.c.global_position > after_position)
            .order_by(events.c.global_position)
            .limit(limit)
        )
        if types is not None:
            query = query.where(events.c.type.in_(list(types)))
        with self.read_transaction() as conn:
            return [_row_to_event(row) for row in conn.execute(query)]

    def read_last(self, limit: int, types: Iterable[str] | None = None) -> list[StoredEvent]:
        """Backwards on the primary key: the newest events cost the same however long the log."""
        query = sa.select(*_COLUMNS).order_by(events.c.global_position.desc()).limit(limit)
        if types is not None:
            query = query.where(events.c.type.in_(list(types)))
        with self.read_transaction() as conn:
            return [_row_to_event(row) for row in conn.execute(query)]

    def checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        """One query for every name; a projection never folded has no row yet and reads as 0."""
        wanted = list(names)
        query = sa.select(projection_checkpoints.c.name, projection_checkpoints.c.position).where(
            projection_checkpoints.c.name.in_(wanted)
        )
        with self.read_transaction() as conn:
            stored = dict(conn.execute(query).all())
        return {name: int(stored.get(name, 0)) for name in wanted}

    @contextmanager
    def tracking(self, name: str) -> Iterator[Tracking]:
        """SQLite: the write lock taken at BEGIN; PostgreSQL: SELECT … FOR UPDATE of the row."""
        with self.write_transaction() as conn:
            row = {"name": name, "position": 0, "updated_at": datetime.now(UTC)}
            conn.execute(upsert(conn, projection_checkpoints).on_conflict_do_nothing(), row)
            query = (
                sa.select(projection_checkpoints.c.position)
                .where(projection_checkpoints.c.name == name)
                .with_for_update()
            )
            position = int(conn.execute(query).scalar_one())
            horizon = conn.execute(sa.select(sa.func.max(events.c.global_position))).scalar()
            yield Tracking(conn, name, position, horizon or 0)

    def read_window(
        self, tracking: Tracking, types: Iterable[str], upper: int
    ) -> Iterator[EventData]:
        """The raw cursor: SQLAlchemy's per-row processing would cost more than the fold.

        orjson parses the JSON text faster than the driver's own JSON handling.
        """
        conn = tracking.conn
        data = "data::text" if conn.dialect.name == "postgresql" else "data"
        mark = "%s" if conn.dialect.name == "postgresql" else "?"
        kinds = sorted(types)
        if not kinds:
            return
        sql = (
            f"SELECT global_position, type, {data} FROM events "
            f"WHERE global_position > {mark} AND global_position <= {mark} "
            f"AND type IN ({', '.join([mark] * len(kinds))}) "
            "ORDER BY global_position"
        )
        loads = orjson.loads
        cursor = conn.connection.cursor()
        try:
            cursor.execute(sql, (tracking.position, upper, *kinds))
            while rows := cursor.fetchmany(5000):
                for position, type_, text in rows:
                    yield position, type_, loads(text)
        finally:
            cursor.close()

    def save_checkpoint(self, tracking: Tracking, position: int) -> None:
        """An UPDATE in the tracking transaction, so it commits with the read model's writes."""
        tracking.conn.execute(
            projection_checkpoints.update()
            .where(projection_checkpoints.c.name == tracking.name)
            .values(position=position, updated_at=datetime.now(UTC))
        )

    def first_position_since(self, when: datetime) -> int:
        """The first global position recorded at or after `when` (last + 1 if none)."""
        with self.read_transaction() as conn:
            first = conn.execute(
                sa.select(sa.func.min(events.c.global_position)).where(events.c.recorded_at >= when)
            ).scalar()
            if first is None:
                last = conn.execute(sa.select(sa.func.max(events.c.global_position))).scalar()
                return (last or 0) + 1
            return int(first)

    def last_position(self) -> int:
        """MAX of the primary key: one index lookup."""
        with self.read_transaction() as conn:
            return conn.execute(sa.select(sa.func.max(events.c.global_position))).scalar() or 0

    def stream_version(self, stream_id: str) -> int:
        """MAX of the stream's positions: one index lookup."""
        with self.read_transaction() as conn:
            return _version(conn, stream_id)

    def close(self) -> None:
        """Stop the writer's connection and dispose of the engine's pool."""
        self._writer.close()
        self.engine.dispose()


def _version(conn: sa.Connection, stream_id: str) -> int:
    query = sa.select(sa.func.max(events.c.stream_position)).where(events.c.stream_id == stream_id)
    return conn.execute(query).scalar() or 0
