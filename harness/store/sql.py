"""The event store on SQLAlchemy Core: one implementation for SQLite and PostgreSQL.

A reader that resumes after the last position it saw never skips an event that commits
late. SQLite's appends are serialized (`harness.store.writer`), so its positions (dense
until archiving deletes some) become visible in order. PostgreSQL's are not: positions
follow transaction ids, increasing but not dense, and may commit out of order, so every
read that hands out a position a reader could resume from (`read_all`, `read_last`,
`last_position`, `first_position_since`, a tracking transaction's horizon) passes only
positions below the oldest transaction still writing, `tickwork_events_horizon(seen)`
(migrations 0005 and 0034), computed in the same statement as the rows, from the same
snapshot.

Reads of whole records go through the raw DBAPI cursor: SQLAlchemy's per-row processing
costs more than the database's own work, and orjson parses JSON text faster than the
drivers do.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import chain, pairwise
from operator import attrgetter
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Engine

from harness.contracts import NewEvent, StoredEvent
from harness.folds import (
    Database,
    Folded,
    Kernel,
    PackedQuery,
    RangeQuery,
    Workers,
    event_slices,
    fetched,
    open_cursor,
)
from harness.store.base import EventStore, Tracking
from harness.store.engine import BEGIN_MODE, SQLITE_BUSY_TIMEOUT_MS, sqlite_path
from harness.store.merging import merged
from harness.store.partitions import is_tick_stream, partitioned
from harness.store.records import (
    ANY,
    AppendResult,
    ConcurrencyError,
    EventData,
    EventIdConflictError,
    ExpectedVersion,
    StoreUnavailableError,
    Window,
)
from harness.store.schema import event_ids, events, projection_checkpoints
from harness.store.tick_rows import (
    UNBOUNDED,
    WIDEST_SPAN,
    compacted,
    count_between,
    data_between,
    first_since,
    holds_types,
    packed_ids,
    packed_version,
    positions_between,
    reach_after,
    reach_before,
    records_between,
    records_first,
    records_last,
    rows_reach,
    widest_span,
    with_compacted,
)
from harness.store.writer import (
    TRANSACTION_EVENTS,
    Clock,
    Contended,
    Refused,
    Writer,
    driver_error,
    is_integrity_error,
    utc_now,
)

MAX_BATCH = 1000
"""Events one append may carry (a batch is one transaction and, on PostgreSQL, one statement)."""
STORE_TABLES = (
    "SELECT quote_ident(relname) FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
    "AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY relname"
)
"""PostgreSQL: the tables of the store's schema, a partitioned one named once for all its days."""

_COLUMNS = (
    "global_position, event_id, stream_id, stream_position, type, version, data, metadata, "
    "recorded_at"
)

_position = attrgetter("global_position")
"""Where a stored record stands in the log: how hot and packed records are merged."""


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn driver errors into the store's own, in this one place (see `driver_error`).

    SQLAlchemy wraps the errors of the statements it runs; the raw cursors' errors come
    bare. An integrity error is the caller's to interpret and passes unchanged.
    """
    try:
        yield
    except Exception as exc:
        if is_integrity_error(exc):
            raise
        cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
        translated = None if cause is None else driver_error(cause)
        if translated is None:
            raise
        raise translated from exc


def upsert(conn: sa.Connection, table: sa.Table) -> Any:
    """INSERT … ON CONFLICT for the connection's dialect (both have the same API).

    PostgreSQL's dialect module is imported only for a PostgreSQL connection: a SQLite
    store's commands need not pay for it.
    """
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    return sqlite.insert(table)


def among(
    conn: sa.Connection, column: sa.ColumnElement[Any], values: Iterable[Any]
) -> sa.ColumnElement[bool]:
    """`column IN values`; on PostgreSQL `column = ANY(array)`, the list one parameter.

    SQLAlchemy expands an IN list into a parameter a value at every execution, so the
    statement psycopg gets is rebuilt, parsed and planned again each time: the dashboard
    sends five lists of its 1,000 levels a draw. One array parameter keeps the statement
    the same whatever the list, so it is built once and psycopg prepares it. SQLite has no
    arrays, and its IN list is parsed in-process.
    """
    wanted = list(values)
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        array = sa.bindparam(None, wanted, type_=postgresql.ARRAY(column.type))
        return column == sa.any_(array)
    return column.in_(wanted)


def clear_tables(conn: sa.Connection, tables: Sequence[sa.Table]) -> None:
    """Empty read-model tables in the caller's transaction, to fold them again from zero.

    PostgreSQL: one TRUNCATE, which gives each table a new, empty file when the
    transaction commits; a DELETE would leave every old row behind as a dead tuple until
    VACUUM (three rebuilds of a 369k-row `ticks` left 737k). It locks the tables against
    readers until the commit, as long as the rebuild's first transaction. SQLite: DELETE,
    whose freed pages the file reuses.
    """
    if not tables:
        return
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"TRUNCATE {', '.join(table.name for table in tables)}"))
        return
    for table in tables:
        conn.execute(table.delete())


def add_sums(
    conn: sa.Connection, table: sa.Table, keys: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """Add rows to a read model of sums: a new key is inserted, a known one adds its sums.

    Each row holds the table's columns in their order, the key columns among them and every
    other column a number to add. One statement on the raw cursor: on PostgreSQL the
    rows travel as one array per column through `unnest`, on SQLite as an executemany.
    For the ~3,600 rows of a million-event spend rebuild SQLAlchemy's executemany took
    0.3 s on PostgreSQL and 0.18 s on SQLite (its multi-row VALUES, compiled, 2.5 s);
    this takes 0.1 s and 0.02 s.
    """
    if not rows:
        return
    columns = [column.name for column in table.columns]
    sets = ", ".join(f"{c} = {table.name}.{c} + excluded.{c}" for c in columns if c not in keys)
    conflict = f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}"
    into = f"INSERT INTO {table.name} ({', '.join(columns)})"
    cursor = conn.connection.cursor()
    try:
        if conn.dialect.name == "postgresql":
            arrays = ", ".join(
                f"%s::{column.type.compile(dialect=conn.dialect)}[]" for column in table.columns
            )
            cursor.execute(
                f"{into} SELECT * FROM unnest({arrays}) {conflict}",
                [list(values) for values in zip(*rows, strict=True)],
            )
        else:
            cursor.executemany(f"{into} VALUES ({_marks(columns)}) {conflict}", rows)
    finally:
        cursor.close()


def _cursor(conn: sa.Connection, sql: str, parameters: Sequence[Any]) -> Any:
    """A raw cursor of the connection that ran `sql` (written with `?` marks); see `open_cursor`."""
    return open_cursor(conn.connection, conn.dialect.name, sql, parameters)


def _records(conn: sa.Connection, where: str, parameters: Sequence[Any]) -> list[StoredEvent]:
    """Whole records of the events `where` selects, in its ORDER BY; JSON parsed on access."""
    cursor = _cursor(conn, f"SELECT {_COLUMNS} FROM events {where}", parameters)
    try:
        return _decoded(conn, cursor.fetchall())
    finally:
        cursor.close()


def _hot_and_span(
    conn: sa.Connection, where: str, parameters: Sequence[Any]
) -> tuple[list[StoredEvent], int | None]:
    """`_records` of `where`, and the tick rows' widest span, from one statement.

    The span's one row is joined to the page of events: a page with no event still gives
    a row (its event columns NULL), so the span comes back whatever the page holds. The
    join hands the page on in its order, which SQL does not promise: the records are
    sorted here, at no cost when they are in order, where an ORDER BY around the join made
    PostgreSQL sort a page of 1,000 again (0.5 ms of a 9 ms page).
    """
    page = f"SELECT {_COLUMNS} FROM events {where}"
    joined = f"({WIDEST_SPAN}) AS rows LEFT JOIN ({page}) AS page ON TRUE"
    cursor = _cursor(conn, f"SELECT page.*, rows.span FROM {joined}", parameters)
    try:
        rows = cursor.fetchall()
    finally:
        cursor.close()
    span = rows[0][-1]
    hot = _decoded(conn, [row[:-1] for row in rows if row[0] is not None])
    hot.sort(key=_position)
    return hot, None if span is None else int(span)


def _decoded(conn: sa.Connection, rows: Sequence[Any]) -> list[StoredEvent]:
    """Records of fetched rows; PostgreSQL's binary cursor already typed them.

    SQLite keeps event ids as hex text and times as UTC text without a zone; the times
    of one append are equal, so each distinct text is parsed once.
    """
    if conn.dialect.name == "postgresql":
        return list(map(StoredEvent.from_row, rows))
    stamps: dict[str, datetime] = {}
    found = []
    for position, event_id, stream, version_, type_, v, d, m, at in rows:
        recorded_at = stamps.get(at)
        if recorded_at is None:
            recorded_at = stamps[at] = datetime.fromisoformat(at).replace(tzinfo=UTC)
        found.append(
            StoredEvent.from_row(
                (position, UUID(event_id), stream, version_, type_, v, d, m, recorded_at)
            )
        )
    return found


def _settled(conn: sa.Connection) -> str:
    """The condition that keeps a read below the writers' horizon (see the module docstring).

    An uncorrelated subquery evaluated once per statement (an InitPlan), not per row; on
    SQLite, whose appends are serialized, no condition at all.
    """
    if conn.dialect.name == "postgresql":
        return "global_position < (SELECT tickwork_events_horizon(pg_current_snapshot()))"
    return "TRUE"


def _last_settled(conn: sa.Connection) -> int:
    """The highest position below the writers' horizon: one backward index lookup."""
    query = f"SELECT MAX(global_position) FROM events WHERE {_settled(conn)}"
    return int(conn.exec_driver_sql(query).scalar() or 0)


def _marks(values: Sequence[Any]) -> str:
    """One `?` per value, for an IN list."""
    return ", ".join("?" * len(values))


def _range_sql(kinds: Sequence[str]) -> str:
    """The events of `kinds` in a range of positions (two `?`, then one per kind), in order.

    One kind (a spend fold's) is not read back row by row: see `event_slices`.
    """
    type_column = "" if len(kinds) == 1 else "type, "
    return (
        f"SELECT global_position, {type_column}data FROM events "
        f"WHERE global_position > ? AND global_position <= ? AND type IN ({_marks(kinds)}) "
        "ORDER BY global_position"
    )


class SqlEventStore(EventStore):
    """The event store over an engine whose schema is already at head."""

    def __init__(self, engine: Engine, clock: Clock = utc_now) -> None:
        self.engine = engine
        self._writer = Writer(engine, clock)
        self._held = threading.local()
        """The connection this thread's open transaction holds, if any (`_holding`)."""
        self._folding: dict[str, threading.Lock] = {}
        self._folding_lock = threading.Lock()

    @contextmanager
    def write_transaction(self) -> Iterator[sa.Connection]:
        """A read-then-write transaction; on SQLite it takes the write lock at BEGIN."""
        with translate_errors(), self.engine.connect() as conn:
            conn = conn.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
            with conn.begin():
                yield conn

    @contextmanager
    def driver_transaction(self) -> Iterator[Any]:
        """The DB-API connection under `write_transaction`'s, for SQL in its driver's dialect."""
        with self.write_transaction() as conn:
            yield conn.connection.driver_connection

    @contextmanager
    def read_transaction(self) -> Iterator[sa.Connection]:
        """A transaction for reads: unlike `write_transaction`, it takes no write lock at BEGIN.

        Inside another transaction of this thread, that one's connection (`_holding`).
        """
        held = self._held_connection()
        if held is not None:
            yield held
            return
        with translate_errors(), self.engine.connect() as conn, conn.begin(), self._holding(conn):
            yield conn

    def _held_connection(self) -> sa.Connection | None:
        """The connection of this thread's open transaction or statement (`_holding`)."""
        held: sa.Connection | None = getattr(self._held, "conn", None)
        return None if held is None or held.closed else held

    @contextmanager
    def _holding(self, conn: sa.Connection) -> Iterator[None]:
        """Reads this thread makes inside a read, statement or tracking block use its connection.

        A thread that held one pooled connection while it took a second (a fold's window
        counted inside its tracking transaction) could wait for the pool for ever: with
        every connection held by threads doing the same, none comes back. So a thread holds
        one connection at most, and a pool as large as the threads never runs dry. A plain
        `write_transaction` keeps its writes to itself: a read beside it sees what is
        committed, on a connection of its own (the pool's overflow, `harness.store.engine`).
        """
        outer = getattr(self._held, "conn", None)
        self._held.conn = conn
        try:
            yield
        finally:
            if getattr(self._held, "conn", None) is conn:
                self._held.conn = outer

    @contextmanager
    def _one_statement(self) -> Iterator[sa.Connection]:
        """A connection for a read of one statement, which is its own snapshot.

        On PostgreSQL it runs outside a transaction: one round trip to the server instead
        of four (BEGIN, the query, COMMIT, and the pool's ROLLBACK when it takes the
        connection back), which is most of a page's time on a busy server. Inside a
        transaction of this thread, on its connection (`_holding`).
        """
        held = self._held_connection()
        if held is not None:
            yield held
            return
        with translate_errors(), self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
                with self._holding(autocommit):
                    yield autocommit
            else:
                with conn.begin(), self._holding(conn):
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
                f"{len(events_)} events in one append: at most {MAX_BATCH} (one transaction "
                "and, on PostgreSQL, one statement inserts the batch)"
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
        if sum(map(len, streams.values())) > TRANSACTION_EVENTS:
            raise ValueError(f"a wave of new streams holds at most {TRANSACTION_EVENTS} events")
        items = list(streams.items())
        try:
            created = self._writer.create_streams(items)
        except Contended:
            raise StoreUnavailableError(
                f"a wave of {len(items)} new streams collided with concurrent writes to the "
                "same streams on every retry; nothing was written, and it may be claimed again"
            ) from None
        except Refused:
            raise EventIdConflictError(
                "an event id of the batch is stored already; nothing was written"
            ) from None
        return {stream_id for (stream_id, _), new in zip(items, created, strict=True) if new}

    def _diagnose_refusal(
        self, stream_id: str, events_: Sequence[NewEvent], expected: ExpectedVersion
    ) -> AppendResult:
        """Tell a retried append (a no-op) from a real conflict, after the rollback.

        A packed stream's ids are looked for in its row too: no unique index holds them,
        so an append to a packed stream is refused until this check has found none of its
        ids there, and is then sent again (`Writer.append`). The hot ids are read first:
        compaction moves an id into its row before it leaves `event_ids`.
        """
        wanted = [event.event_id for event in events_]
        with self.read_transaction() as conn:
            # PostgreSQL's partitions hold no index on the id: `event_ids` does (0010).
            ids = event_ids if partitioned(self.engine) else events
            stored: dict[UUID, int] = dict(
                conn.execute(
                    sa.select(ids.c.event_id, ids.c.global_position).where(
                        ids.c.event_id.in_(wanted)
                    )
                ).all()
            )
            packed = packed_ids(conn, stream_id)
            version = _version(conn, stream_id)
        if packed is not None:
            stored.update((i, p) for i, p in packed.ids.items() if i in set(wanted))
        if len(stored) == len(wanted):
            return AppendResult(tuple(stored[i] for i in wanted), version, duplicate=True)
        if stored:
            raise EventIdConflictError(
                f"stream {stream_id!r}: {len(stored)} of {len(wanted)} event ids are stored "
                "already; a batch is retried whole or not at all"
            )
        if packed is not None and expected in (ANY, version):
            try:
                positions, landed = self._writer.append(
                    stream_id, events_, expected, checked=packed.version
                )
            except Refused:
                return self._diagnose_refusal(stream_id, events_, expected)
            return AppendResult(positions, landed)
        raise ConcurrencyError(stream_id, expected, version)

    def read_stream(
        self, stream_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        """One indexed range query on (stream_id, stream_position), read on the raw cursor.

        A tick's stream also reads its packed row: one more index lookup
        (`harness.store.tick_rows`). A compaction committing between the two statements
        (PostgreSQL runs each in its own snapshot) leaves a record in both, given once.
        """
        where = (
            f"WHERE stream_id = ?{_hot_scope(self.engine, stream_id)} AND stream_position > ? "
            "ORDER BY stream_position"
        )
        parameters: list[Any] = [stream_id, after]
        if limit is not None:
            where += " LIMIT ?"
            parameters.append(limit)
        with self._one_statement() as conn:
            found = _records(conn, where, parameters)
            entries = compacted(conn, [stream_id]).get(stream_id, [])
        return with_compacted(found, entries, after, limit)

    def read_streams(
        self, stream_ids: Iterable[str], types: Iterable[str] | None = None
    ) -> dict[str, list[StoredEvent]]:
        """Queried in slices of `MAX_BATCH` ids, under the driver's parameter cap."""
        wanted = list(dict.fromkeys(stream_ids))
        kinds = [] if types is None else list(types)
        only = "" if types is None else f" AND type IN ({_marks(kinds)})"
        found: dict[str, list[StoredEvent]] = {stream_id: [] for stream_id in wanted}
        with self.read_transaction() as conn:
            for start in range(0, len(wanted), MAX_BATCH):
                chunk = wanted[start : start + MAX_BATCH]
                where = (
                    f"WHERE stream_id IN ({_marks(chunk)}){only} "
                    "ORDER BY stream_id, stream_position"
                )
                for event in _records(conn, where, [*chunk, *kinds]):
                    found[event.stream_id].append(event)
                if holds_types(None if types is None else kinds):
                    for stream_id, entries in compacted(conn, chunk).items():
                        typed = [e for e in entries if types is None or e.type in kinds]
                        found[stream_id] = with_compacted(found[stream_id], typed)
        return found

    def read_all(
        self,
        after_position: int = 0,
        limit: int = 1000,
        types: Iterable[str] | None = None,
    ) -> list[StoredEvent]:
        """A range of the primary key, below the writers' horizon (the module docstring).

        With the packed records of the rows that reach into it: up to the last of the
        `limit` hot events read, and (of every type) no further than the rows that hold
        `limit` records themselves reach. The rows' widest span, which bounds both, is read
        once. On PostgreSQL it comes in the hot events' statement (`_hot_and_span`): with no
        packed row, the read is that one round trip, as before rows were packed (a reader
        polling the head of the log sent three, and took as much CPU as four writers'
        appends). SQLite answers in-process, where the join cost more than the statement it
        saves (a page of 1,000: 6.1-8.4 ms of CPU against 5.4-6.1).
        """
        only = ""
        parameters: list[Any] = [after_position]
        kinds = None if types is None else list(types)
        if kinds is not None:
            only = f" AND type IN ({_marks(kinds)})"
            parameters += kinds
        with self._one_statement() as conn:
            where = f"WHERE global_position > ? AND {_settled(conn)}{only}"
            where += " ORDER BY global_position LIMIT ?"
            if not holds_types(kinds):
                return _records(conn, where, [*parameters, limit])
            if conn.dialect.name == "postgresql":
                hot, span = _hot_and_span(conn, where, [*parameters, limit])
            else:
                hot, span = _records(conn, where, [*parameters, limit]), widest_span(conn)
            if span is None:
                return hot
            upper = hot[-1].global_position if len(hot) == limit else UNBOUNDED
            if kinds is None:
                upper = min(upper, reach_after(conn, after_position, limit, span))
            packed = records_first(conn, after_position, upper, limit, kinds, span)
        return list(merged([hot, packed], _position))[:limit] if packed else hot

    def read_unpacked(self, after_position: int, upper: int, limit: int) -> list[StoredEvent]:
        """The first `limit` records of `events` in (after, upper], without the packed ones.

        For a pass that reads the packed rows of the range itself, each once (archiving).
        """
        with self._one_statement() as conn:
            where = (
                f"WHERE global_position > ? AND global_position <= ? AND {_settled(conn)} "
                "ORDER BY global_position LIMIT ?"
            )
            return _records(conn, where, [after_position, upper, limit])

    def read_last(self, limit: int, types: Iterable[str] | None = None) -> list[StoredEvent]:
        """Backwards on the primary key from the writers' horizon: cheap however long the log.

        With the packed records of the rows that reach past the `limit`-th hot event back.
        """
        kinds = None if types is None else list(types)
        only = "" if kinds is None else f" AND type IN ({_marks(kinds)})"
        with self._one_statement() as conn:
            where = f"WHERE {_settled(conn)}{only} ORDER BY global_position DESC LIMIT ?"
            hot = _records(conn, where, [*(kinds or []), limit])
            if not holds_types(kinds):
                return hot
            after = hot[-1].global_position - 1 if len(hot) == limit else 0
            if kinds is None:
                after = max(after, reach_before(conn, limit))
                packed = records_between(conn, after, UNBOUNDED, kinds)
            else:
                packed = records_last(conn, after, limit, kinds)
        if not packed:
            return hot
        return list(merged([reversed(hot), packed], _position))[::-1][:limit]

    def checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        """One query for every name; a projection never folded has no row yet and reads as 0."""
        wanted = list(names)
        query = sa.select(projection_checkpoints.c.name, projection_checkpoints.c.position).where(
            projection_checkpoints.c.name.in_(wanted)
        )
        with self._one_statement() as conn:
            stored = dict(conn.execute(query).all())
        return {name: int(stored.get(name, 0)) for name in wanted}

    @contextmanager
    def tracking(self, name: str) -> Iterator[Tracking]:
        """SQLite: the write lock taken at BEGIN; PostgreSQL: SELECT … FOR UPDATE of the row.

        The horizon is the last position below the writers' horizon: every transaction
        that could still write a position at or below it had ended when it was read, so
        the window's later statements (each its own snapshot on PostgreSQL) see the same
        events up to it.
        """
        with self._folding_turn(name), self.write_transaction() as conn, self._holding(conn):
            row = {"name": name, "position": 0, "updated_at": datetime.now(UTC)}
            conn.execute(upsert(conn, projection_checkpoints).on_conflict_do_nothing(), row)
            query = (
                sa.select(projection_checkpoints.c.position)
                .where(projection_checkpoints.c.name == name)
                .with_for_update()
            )
            position = int(conn.execute(query).scalar_one())
            yield Tracking(conn, name, position, _last_settled(conn))

    @contextmanager
    def _folding_turn(self, name: str) -> Iterator[None]:
        """This process's threads track a projection one at a time, before taking a connection.

        Each would otherwise hold a pooled connection while its transaction waits for the
        checkpoint's row lock (PostgreSQL) or the write lock (SQLite): sixteen ticks
        preparing at once, each folding the calibrations, held every connection of the
        pool waiting on the one thread that folded.
        """
        with self._folding_lock:
            turn = self._folding.setdefault(name, threading.Lock())
        with turn:
            yield

    def window(self, after: int, upper: int, size: int | None = None) -> Window:
        """Counted on the primary key: a LIMIT of `size` keys, or a COUNT of them all.

        SQLite's key is the table itself, so a COUNT of a range reads every row's page
        (0.2 s a million events); from position 0 (a rebuild) it counts the whole table
        from its pages' headers instead (0.02 s) and takes away what lies above `upper`.
        Packed records count too: those of the rows that reach into the range.
        """
        with self._one_statement() as conn:
            hot = self._hot_window(conn, after, upper, size)
            if size is None:
                return Window(after, upper, hot.events + count_between(conn, after, upper))
            if size < 1:
                return hot
            span = widest_span(conn)
            end = min(hot.end, reach_after(conn, after, size, span))
            packed = positions_between(conn, after, end, span)
        if not packed:
            return hot
        found = list(heapq.merge(self._hot_positions(after, end, size), packed))
        if len(found) >= size:
            return Window(after, found[size - 1], size)
        return Window(after, upper, len(found))

    def reach(self, after: int, upper: int, size: int) -> int:
        """A LIMIT on each key, nothing decoded.

        The `size`-th position of `events`, or the first of the row by which `size`
        packed records are counted, whichever comes first.
        """
        with self._one_statement() as conn:
            hot = self._hot_window(conn, after, upper, size).end
            return min(hot, rows_reach(conn, after, size))

    @contextmanager
    def reading(self, name: str, position: int, horizon: int) -> Iterator[Tracking]:
        """A `read_transaction`: SQLite's takes no lock, PostgreSQL's locks no row."""
        with self.read_transaction() as conn:
            yield Tracking(conn, name, position, horizon)

    def _hot_window(self, conn: sa.Connection, after: int, upper: int, size: int | None) -> Window:
        """The window of `events` alone."""
        where = "WHERE global_position > ? AND global_position <= ?"
        if size is None and after == 0 and conn.dialect.name == "sqlite":
            cursor = _cursor(
                conn,
                "SELECT (SELECT COUNT(*) FROM events) - "
                "(SELECT COUNT(*) FROM events WHERE global_position > ?), NULL",
                (upper,),
            )
        elif size is None:
            cursor = _cursor(conn, f"SELECT COUNT(*), NULL FROM events {where}", (after, upper))
        else:
            cursor = _cursor(
                conn,
                "SELECT COUNT(*), MAX(global_position) FROM (SELECT global_position "
                f"FROM events {where} ORDER BY global_position LIMIT ?) AS w",
                (after, upper, size),
            )
        try:
            events, last = cursor.fetchone()
        finally:
            cursor.close()
        return Window(after, last if size is not None and events == size else upper, events)

    def _hot_positions(self, after: int, upper: int, limit: int) -> list[int]:
        """The first `limit` positions of `events` in (after, upper]."""
        with self._one_statement() as conn:
            query = (
                sa.select(events.c.global_position)
                .where(events.c.global_position > after, events.c.global_position <= upper)
                .order_by(events.c.global_position)
                .limit(limit)
            )
            return list(conn.execute(query).scalars())

    def read_window(
        self, tracking: Tracking, types: Iterable[str], upper: int
    ) -> Iterator[EventData]:
        """Streamed from the raw cursor, `fetchmany` slices at a time (see `event_slices`).

        `upper` is at most the tracking's horizon: above it an event may still commit.
        The packed records of the window (of its types) are read after the hot query has
        run, and merged in: a compaction committing between gives a record twice, once.
        """
        if upper > tracking.horizon:
            raise ValueError(f"window end {upper} is past the horizon {tracking.horizon}")
        kinds = sorted(types)
        hot = self._window_slices(tracking, kinds, upper)
        first = next(hot, None)
        packed = data_between(tracking.conn, tracking.position, upper, kinds)
        slices = chain([] if first is None else [first], hot)
        return merged([chain.from_iterable(slices), packed])

    def _window_slices(
        self, tracking: Tracking, kinds: list[str], upper: int
    ) -> Iterator[Iterable[EventData]]:
        """The window's slices, each decoding on demand; the query runs at the first."""
        if not kinds:
            return
        cursor = _cursor(tracking.conn, _range_sql(kinds), (tracking.position, upper, *kinds))
        try:
            yield from event_slices(fetched(cursor), kinds)
        finally:
            cursor.close()

    def fold_range(
        self, after: int, upper: int, types: Iterable[str], kernel: Kernel, parts: int
    ) -> Folded:
        """Split by `reach`: each end found by a LIMIT from the one before, nothing decoded.

        `window` would decode every packed tick of the parts but the last, and hold
        their positions: for two parts, half the history's (5M ints, ~180 MB, at 10M events).
        """
        kinds = tuple(sorted(types))
        if not kinds:
            return Folded({}, 0, self.window(after, upper).events)
        with translate_errors(), Workers(parts - 1, self.engine.dialect.name) as workers:
            whole = self.window(after, upper)
            size = max(-(-whole.events // parts), 1)
            ends = [after]
            for _ in range(parts - 1):
                ends.append(self.reach(ends[-1], upper, size))
            ends.append(upper)
            # Sums commute: the parts read their events' data alone, in whatever order.
            database = self.worker_database()
            sql = (
                "SELECT data FROM events WHERE global_position > ? AND global_position <= ? "
                f"AND type IN ({_marks(kinds)})"
            )
            queries = [
                RangeQuery(database, sql, (a, b, *kinds), _packed_query(a, b, kinds))
                for a, b in pairwise(ends)
            ]
            sums, folded = workers.fold(kernel, queries)
        return Folded(sums, folded, whole.events)

    def worker_database(self) -> Database:
        """How another process connects to this store; a PostgreSQL password travels apart."""
        url = self.engine.url
        if url.get_backend_name() == "postgresql":
            _, arguments = self.engine.dialect.create_connect_args(url)
            # SQLAlchemy's adapters (its JSON serializer) stay here: a fold only reads.
            arguments.pop("context", None)
            password = arguments.pop("password", None)
            return Database("postgresql", arguments, None if password is None else str(password))
        path = sqlite_path(url)
        if path is None:
            raise ValueError("an in-memory SQLite store cannot be read from another connection")
        return Database("sqlite", {"database": str(path), "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    def save_checkpoint(self, tracking: Tracking, position: int) -> None:
        """An UPDATE in the tracking transaction, so it commits with the read model's writes."""
        tracking.conn.execute(
            projection_checkpoints.update()
            .where(projection_checkpoints.c.name == tracking.name)
            .values(position=position, updated_at=datetime.now(UTC))
        )

    def first_position_since(self, when: datetime) -> int:
        """The first settled position recorded at or after `when` (last settled + 1 if none).

        A reader starting there misses no event that commits late: both are below the
        writers' horizon. The index on recorded_at, whose entries hold positions
        (migration 0006), holds the answer: a range of it from `when`, read without the
        table, costs what the window holds, however long the log before it. Recording
        times do not follow positions exactly (a time is taken before the append waits
        for its turn, and clocks step), so the smallest position of the range need not
        be its first entry, and the range is read whole. `+ 0` keeps the planners from
        the MIN-by-primary-key plan, which walks the log from its start looking for the
        first recent event: what this cost before the index, and what PostgreSQL's
        estimate picks still when its statistics place the window evenly in the log.
        Packed ticks answer from their rows' index of last times (`first_since`).
        """
        with self.read_transaction() as conn:
            query = sa.select(sa.func.min(events.c.global_position + 0)).where(
                events.c.recorded_at >= when, sa.text(_settled(conn))
            )
            found = [p for p in (conn.execute(query).scalar(), first_since(conn, when)) if p]
            if not found:
                return _last_settled(conn) + 1
            return int(min(found))

    def last_position(self) -> int:
        """MAX of the primary key below the writers' horizon: one index lookup."""
        with self._one_statement() as conn:
            return _last_settled(conn)

    def newest_position(self) -> int:
        """MAX of the primary key, the writers' horizon ignored: one index lookup."""
        with self._one_statement() as conn:
            return int(
                conn.exec_driver_sql("SELECT MAX(global_position) FROM events").scalar() or 0
            )

    def lookback(self, count: int) -> int:
        """SQLite: arithmetic, checked by a count. PostgreSQL: an index walk.

        SQLite's positions are dense until archiving deletes some; PostgreSQL's never are.
        The walk reads `count` entries of the primary key backwards from the horizon, a few
        milliseconds for 50,000; so does the count on SQLite. With packed ticks, the answer
        is the `count + 1`-th newest position of both: it lies after the later of the two
        bounds that hold `count + 1` of each, where both are merged.
        """
        with self._one_statement() as conn:
            span = widest_span(conn)
            if span is None:
                return _hot_lookback(conn, count)
            after = max(_hot_lookback(conn, count + 1), reach_before(conn, count + 1))
            query = (
                sa.select(events.c.global_position)
                .where(events.c.global_position > after, sa.text(_settled(conn)))
                .order_by(events.c.global_position)
            )
            hot = conn.execute(query).scalars()
            found = list(heapq.merge(hot, positions_between(conn, after, UNBOUNDED, span)))
        return found[-count - 1] if len(found) > count else 0

    def vacuum(self, tables: Sequence[str] = ()) -> None:
        """PostgreSQL: VACUUM (ANALYZE), outside a transaction; it stops no append or read.

        Without `tables`, every table of the store's schema (a partitioned one takes its
        partitions along), not the whole database: the system catalogs are autovacuum's,
        and vacuuming and analysing them was nearly all of a whole-database run's cost
        (`ops/bench/vacuum_bench.py`).
        """
        if self.engine.dialect.name != "postgresql":
            return
        with translate_errors(), self.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            names = list(tables) or conn.exec_driver_sql(STORE_TABLES).scalars().all()
            if names:  # none named would be the whole database's VACUUM
                conn.exec_driver_sql(f"VACUUM (ANALYZE) {', '.join(names)}")

    def stream_version(self, stream_id: str) -> int:
        """MAX of the stream's positions: one index lookup."""
        with self._one_statement() as conn:
            return _version(conn, stream_id)

    def close(self) -> None:
        """Stop the writer's connection and dispose of the engine's pool."""
        self._writer.close()
        self.engine.dispose()


def _packed_query(after: int, upper: int, kinds: tuple[str, ...]) -> PackedQuery | None:
    """The rows a fold worker reads for (after, upper] beside `events` (`tick_rows.between`).

    The widest span is read in the worker's snapshot, with the rows.
    """
    if not holds_types(kinds):
        return None
    sql = (
        "SELECT tick_id, data FROM tick_rows WHERE first_position > ? - "
        "(SELECT COALESCE(MAX(last_position - first_position), 0) FROM tick_rows) "
        "AND first_position <= ? AND last_position > ?"
    )
    return PackedQuery(sql, (after, upper, after), after, upper, kinds)


def _hot_lookback(conn: sa.Connection, count: int) -> int:
    """`lookback` of `events` alone."""
    if conn.dialect.name != "postgresql":
        guess = max(_last_settled(conn) - count, 0)
        query = sa.select(sa.func.count()).where(events.c.global_position > guess)
        if guess == 0 or conn.execute(query).scalar() == count:
            return guess
    query = (
        sa.select(events.c.global_position)
        .where(sa.text(_settled(conn)))
        .order_by(events.c.global_position.desc())
        .limit(1)
        .offset(count)
    )
    return int(conn.execute(query).scalar() or 0)


def _version(conn: sa.Connection, stream_id: str) -> int:
    """The stream's last position: in `events`, or else in its packed row."""
    query = sa.select(sa.func.max(events.c.stream_position)).where(events.c.stream_id == stream_id)
    if _hot_scope(conn.engine, stream_id):
        query = query.where(sa.text("tick_day IS NULL"))
    found = conn.execute(query).scalar()
    if found is None:
        found = packed_version(conn, stream_id)
    return int(found or 0)


def _hot_scope(engine: Engine, stream_id: str) -> str:
    """PostgreSQL: the condition that keeps a read of a stream other than a tick's in `events_hot`.

    A tick stream's reads look in every day's partition's stream index.
    """
    if partitioned(engine) and not is_tick_stream(stream_id):
        return " AND tick_day IS NULL"
    return ""
