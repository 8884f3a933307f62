"""The append hot path, on one raw DBAPI connection per store.

Every tick records each model call's spend the moment it happens, so appends are many and
small, and the spool, the governor's ledger and wave claims append batches. SQLAlchemy
Core spends about ten times the database's own work per statement here; this writer
sends hand-written statements with positional parameters, formatted exactly as the
store's reads expect, on a connection it keeps, under a lock, for the life of the store.

A reader that resumes after the last position it saw must never skip an event that
commits late. SQLite has one writer at a time (`BEGIN IMMEDIATE`) and AUTOINCREMENT
positions: they become visible in order. PostgreSQL appends take no lock: an event's
position is `(transaction id << 20) + k`, k its 1-based ordinal in the transaction, so
position order is transaction order, and readers pass only positions below the oldest
transaction still writing (`tickwork_events_horizon(seen)`, migrations 0005 and 0034). To
tell writers from every other transaction, the writer's connection carries its own
`application_name` (`WRITER_NAME`) and does nothing but append.

A single append on PostgreSQL is one autocommit statement: the version check, the
positions and the insert in an INSERT … SELECT. At durability `power` its commit waits
for the WAL flush (`synchronous_commit = on`), and since no lock is held meanwhile, the
commits of concurrent appenders share their fsyncs; at `process` it does not wait
(`synchronous_commit = off` on the writer's connection). Without the lock, two appends to
one stream can both read its version before either commits: the second then breaks
`uq_events_stream_position` (or, starting a tick stream, `tick_streams`' key), and is sent
again, when its check is evaluated afresh (an append with ANY lands after the other, an
exact expected version is refused).

On PostgreSQL `events` is partitioned by the day tick streams began (migration 0010,
`harness.store.partitions`): the statement also records the event ids in `event_ids`
and a new tick stream's day in `tick_streams`, and the writer makes its day's partition
before its first append of the day. A tick stream's later appends from the same writer
name the day its last append landed in, so only that day's partitions are opened.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from typing import Any, Literal

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from harness.contracts import NewEvent
from harness.store.engine import DURABILITY, SQLITE_CACHE_KIB
from harness.store.partitions import TICK_STREAM_PREFIX, day_made, ensure_days, is_tick_stream
from harness.store.records import (
    ANY,
    NO_STREAM,
    ExpectedVersion,
    SchemaError,
    StoreError,
    StoreUnavailableError,
)

_INSERT = (
    "INSERT INTO events (event_id, stream_id, stream_position, type, version, data, "
    "metadata, recorded_at) "
)
SQLITE_LANDED = "tickwork_landed"
"""The function the writer registers on its SQLite connection: SQLite hands it the stream
position the checked insert computed, and it returns it unchanged."""
_SQLITE_FIRST = (
    _INSERT + "VALUES (?1, ?2, (SELECT CASE WHEN (?3 < 0 OR v = ?3) AND (p IS NULL OR p = ?9) "
    f"THEN {SQLITE_LANDED}(v + 1) END FROM (SELECT COALESCE((SELECT MAX(stream_position) "
    "FROM events WHERE stream_id = ?2), p, 0) AS v, p FROM (SELECT (SELECT version "
    "FROM tick_rows WHERE tick_id = ?10) AS p))), ?4, ?5, ?6, ?7, ?8)"
)
"""The first event of a batch: checks the stream's version and inserts in one statement.

Its third parameter is the expected version (-1: any). A tick stream packed in a row of
`tick_rows` (its tenth parameter, the tick id) is at least at the row's version, and is
refused unless its ninth parameter is that version: the row as the store found it when
it checked the batch's ids against it (`Writer.append`). A stream at another version gets
the position NULL, which the NOT NULL column refuses: the statement inserts nothing and
the transaction goes on. `INSERT … SELECT … WHERE` said the same with no error, but
SQLite runs a SELECT from the table being written through a temporary table, and the
`RETURNING` it needed to tell where the row landed costs as much again: together a
quarter of a single append's time at `synchronous = OFF`. Instead the row's global
position is `lastrowid`, and its stream position is what SQLite passed to
`SQLITE_LANDED` on its way into the row (reading it back by rowid cost a statement more).

The bare MAX in its own scalar subquery is what SQLite's min/max optimization reads off
the end of the (stream_id, stream_position) index; `COALESCE(MAX(…))` as a derived table
scanned every event of the stream instead, 0.25 ms at 3,000 events and growing with it.
"""
_SQLITE_REST = _INSERT + "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

WRITER_NAME = "tickwork-writer"
"""The writer connection's `application_name` on PostgreSQL: the horizon function
(migrations 0005 and 0034) counts only transactions of sessions so named as writers."""

APPENDS_WAIT = 10.0
"""Seconds `appends_settled` waits for the appends running when it is called to end."""

_APPENDS_BEFORE = (
    "SELECT EXISTS (SELECT FROM pg_stat_get_activity(NULL) AS a "
    "WHERE a.application_name = :name AND a.xact_start < :since "
    "AND a.datid = (SELECT oid FROM pg_database WHERE datname = current_database()))"
)

TRANSACTION_EVENTS = (1 << 20) - 1
"""Events one transaction may append: on PostgreSQL its positions are (xid << 20) + 1 … ."""

COLLISION_RETRIES = 20
"""Times an append is sent again after colliding with a concurrent one (PostgreSQL)."""

WAVE_LOCK_CLASS = 0x74776176
"""The first key of the advisory locks a wave of new streams takes before it inserts (PostgreSQL).

Replicas claim the same wave with its streams in their own orders; inserting them so, two
claims each held an index entry the other waited for, and PostgreSQL broke the deadlock a
second later by aborting one, which ran again at once and met the others again: on a loaded
machine three replicas claiming 300 streams took up to seven rounds (25 s) and at times all
twenty retries, and the claim failed. Locked first, in the order of their keys, the claims
wait for one another and never deadlock; the one that waited finds the other's streams
committed and skips them. Two-key locks: a key space of their own, apart from the single-key
locks of migrations, partitions and procrastinate."""

WAVE_LOCK_BUCKETS = 64
"""Each stream's lock is one of this many, by the hash of its id: a wave of any size (up to
`TRANSACTION_EVENTS` streams) holds at most this many entries of PostgreSQL's shared lock table,
which is sized for `max_locks_per_transaction` (64 by default) per connection and, once its
spare shared memory is spent, refuses more ("out of shared memory"); a lock per stream would
take one entry per stream. Waves of other streams that share a bucket only wait for one
another. A wave of 300 new streams took 105-113 ms with the locks, 106-107 ms without."""

_LOCK_WAVE = (
    f"SELECT count(pg_advisory_xact_lock({WAVE_LOCK_CLASS}, bucket)) FROM (SELECT DISTINCT "
    f"hashtext(stream) & {WAVE_LOCK_BUCKETS - 1} AS bucket FROM unnest(%s::text[]) AS stream "
    "ORDER BY bucket) AS buckets"
)

Scope = Literal["hot", "tick", "known day"]
"""Which PostgreSQL statement appends to a stream (`Writer._postgres_statement`)."""
HOT: Scope = "hot"
TICK: Scope = "tick"
KNOWN_DAY: Scope = "known day"

STREAM_DAYS = 1024
"""Tick streams whose day a PostgreSQL writer keeps (`Writer._remember_day`)."""

Positions = tuple[tuple[int, ...], int]
"""(global positions, new stream version) of one stream's append."""

Streams = Sequence[tuple[str, Sequence[NewEvent]]]
"""The batches of one transaction, each with the stream it goes to."""


class Refused(Exception):
    """The database refused the append (version mismatch or unique violation); rolled back."""


class Contended(Refused):
    """The append lost its race with concurrent ones on every try; rolled back.

    Not a refusal of what it holds: sent again later, once the others committed, it lands
    or finds its streams begun.
    """


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
    if isinstance(exc, sa.exc.TimeoutError):
        # No pooled connection came free in time: to its caller the store is out.
        return StoreUnavailableError(f"event store unavailable, its connections all busy: {text}")
    if _missing_table(exc):
        return SchemaError(f"the store has no schema ({text}): run `tickwork migrate`")
    if isinstance(exc, _pep249("OperationalError") + _pep249("InterfaceError")):
        return StoreUnavailableError(f"event store unavailable: {text}")
    if isinstance(exc, _pep249("ProgrammingError")):
        return SchemaError(f"the store's schema does not match: {text}")
    return None


def is_integrity_error(exc: BaseException) -> bool:
    """A unique violation or failed check: the statement was refused, the store is fine."""
    return isinstance(exc, _pep249("IntegrityError"))


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


def _collided(exc: BaseException) -> bool:
    """Whether a PostgreSQL append lost a race it may run again (and then win or be refused).

    Two appends to one stream read its version from snapshots taken before either
    committed: the second breaks the stream-position constraint. A deadlock is run again
    too, though wave claims, which met one before `WAVE_LOCK_CLASS`, no longer do.
    """
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return False
    if isinstance(exc, psycopg.errors.DeadlockDetected):
        return True
    return isinstance(exc, psycopg.errors.UniqueViolation) and _names_a_stream_position(
        exc.diag.constraint_name or ""
    )


def _names_a_stream_position(constraint: str) -> bool:
    """Whether a unique key refused a stream position taken twice.

    A partition of events names its key after the parent's `uq_events_stream_position`
    columns; a tick stream begun twice breaks `tick_streams`' key.
    """
    return "stream_position" in constraint or constraint == "tick_streams_pkey"


def _expectation(expected: ExpectedVersion) -> int:
    """The expected version as the statements take it: -1 any, 0 no stream."""
    if isinstance(expected, int):
        return expected
    return -1 if expected is ANY else 0


def _tick_id(stream_id: str) -> str | None:
    """The tick a stream is of, which names its row in `tick_rows` (None: not a tick's)."""
    return stream_id.removeprefix(TICK_STREAM_PREFIX) if is_tick_stream(stream_id) else None


def _sqlite_row(stream_id: str, position: int, event: NewEvent, stamp: str) -> tuple[Any, ...]:
    """An event as both SQLite inserts take it (the first takes the expectation as position).

    The id as SQLAlchemy's SQLite `Uuid` type stores it (32 hex digits), which the
    store's reads parse.
    """
    dumps = orjson.dumps
    return (
        event.event_id.hex,
        stream_id,
        position,
        event.type,
        event.version,
        dumps(event.data).decode(),
        dumps(event.metadata).decode(),
        stamp,
    )


def appends_settled(engine: Engine, wait: float) -> bool:
    """Whether every append running now, on any writer of the store, ends within `wait` s.

    PostgreSQL only. An append is one statement (a wave, one pipelined transaction), so
    this takes milliseconds. Each look is its own transaction, since a transaction keeps
    the first view of the sessions it took. Writers are told by `WRITER_NAME`, which
    PostgreSQL shows only for sessions of the caller's role (as `xact_start`, which needs
    the default `track_activities = on`): the store's writers and compaction connect
    as one role.
    """
    deadline = time.monotonic() + wait
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        since = conn.execute(sa.text("SELECT statement_timestamp()")).scalar_one()
        query = sa.text(_APPENDS_BEFORE).bindparams(name=WRITER_NAME, since=since)
        while conn.execute(query).scalar_one():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
    return True


Clock = Callable[[], datetime]
"""What stamps an append's `recorded_at`: the wall clock, or a simulated one in tests."""


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


class Writer:
    """Appends so that no reader passes an event that commits late (see the module docstring).

    The version check is part of the insert: a mismatch inserts no row, so the happy path
    costs no extra round trip. On PostgreSQL a transaction of several statements (a wave
    of new streams) goes out in one pipelined round trip.
    """

    def __init__(self, engine: Engine, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._clock = clock
        self._lock = threading.Lock()
        self._connection: Any = None
        self._cursor: Any = None
        """SQLite: the cursor every append runs on, made with the connection's `SQLITE_LANDED`."""
        self._landed = 0
        """SQLite: the stream position the last checked insert gave its row."""
        self._postgres = engine.dialect.name == "postgresql"
        self._async_commit = engine.get_execution_options().get(DURABILITY) == "process"
        self._statements: dict[tuple[int, Scope], str] = {}
        self._days: set[date] = set()
        """PostgreSQL: days whose partition this writer has seen made (`ensure_days`)."""
        self._stream_days: dict[str, date] = {}
        """PostgreSQL: the day of each tick stream this writer appended to last (`KNOWN_DAY`)."""

    def append(
        self,
        stream_id: str,
        batch: Sequence[NewEvent],
        expected: ExpectedVersion,
        checked: int | None = None,
    ) -> Positions:
        """Insert the batch; returns (global positions, new stream version) or raises Refused.

        A packed row's ids are in no unique index (on PostgreSQL they leave `event_ids`
        once no append can have missed the row, `harness.store.tick_rows.release_ids`), so
        an append to a packed stream is refused unless `checked` is the version of the
        row in which the store found none of the batch's ids. A row packed again since
        (with records appended meanwhile, maybe a replay of this batch's) is at a later
        version: the append is refused, to be checked again.
        """
        (landed,) = self._transaction([(stream_id, batch)], expected, checked)
        if landed is None:
            raise Refused
        return landed

    def create_streams(self, streams: Streams) -> list[bool]:
        """Start each stream that does not exist yet, all in one transaction.

        Returns, per stream, whether it was created; a stream that exists is left as it is.
        Raises Refused (nothing written) on a unique violation, e.g. an event id reused,
        and Contended when concurrent writes beat it on every retry.
        """
        return [landed is not None for landed in self._transaction(streams, NO_STREAM)]

    def _transaction(
        self, streams: Streams, expected: ExpectedVersion, checked: int | None = None
    ) -> list[Positions | None]:
        """One transaction of one checked insert per stream; where each landed (None: not)."""
        expectation = _expectation(expected)
        recorded_at = self._clock()
        with self._lock:
            attempts = 0
            while True:
                try:
                    if self._connection is None:
                        self._connection = self._open()
                    if self._postgres:
                        return self._append_postgres(streams, expectation, recorded_at, checked)
                    return self._append_sqlite(streams, expectation, recorded_at, checked)
                except Exception as exc:
                    collided = _collided(exc)
                    if collided or is_integrity_error(exc):
                        self._connection.rollback()
                        if not collided:
                            raise Refused from exc
                        if attempts < COLLISION_RETRIES:
                            attempts += 1
                            continue
                        raise Contended from exc
                    self._discard()
                    translated = driver_error(exc)
                    if translated is None:
                        raise
                    raise translated from exc

    def _open(self) -> Any:
        """Open a connection of the writer's own, taken out of the pool for good.

        On PostgreSQL it runs in autocommit (a single append is its own transaction; a wave
        brackets its statements with BEGIN/COMMIT), under the writer's `application_name`
        and (durability `process`) with `synchronous_commit = off`: settings pooled
        connections must never inherit. On SQLite it takes a larger page cache than pooled
        connections: tickwork mints time-ordered event ids (harness.contracts.ids), which go
        to the right edge of the event-id index, but ids a caller brings may be random, and
        were in stores written before: random keys with SQLite's 2 MiB default page cache
        thrash a store of millions of events on every append. Pages are allocated on use.
        """
        pooled = self._engine.raw_connection()
        pooled.detach()
        connection: Any = pooled.dbapi_connection
        if not self._postgres:
            connection.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        if self._postgres:
            connection.autocommit = True
            connection.execute(f"SET application_name = '{WRITER_NAME}'")
            if self._async_commit:
                connection.execute("SET synchronous_commit = off")
        return connection

    def _append_sqlite(
        self, streams: Streams, expectation: int, recorded_at: datetime, checked: int | None
    ) -> list[Positions | None]:
        # SQLAlchemy's SQLite DateTime format, which the store's reads parse: the time
        # without its "+00:00" (a strftime format costs twice as much).
        stamp = recorded_at.isoformat(" ", "microseconds")[:26]
        cursor = self._cursor or self._sqlite_cursor()
        # One event is one statement and its own transaction: a writing statement takes
        # the write lock when it starts, as BEGIN IMMEDIATE does, and commits (fsync
        # included) when it ends. More events, or streams, share one transaction.
        alone = len(streams) == 1 and len(streams[0][1]) == 1
        if not alone:
            cursor.execute("BEGIN IMMEDIATE")
        landed: list[Positions | None] = []
        for stream_id, batch in streams:
            try:
                cursor.execute(
                    _SQLITE_FIRST,
                    (
                        *_sqlite_row(stream_id, expectation, batch[0], stamp),
                        checked,
                        _tick_id(stream_id),
                    ),
                )
            except sqlite3.IntegrityError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_CONSTRAINT_NOTNULL:
                    raise
                landed.append(None)  # not at the expected version (see _SQLITE_FIRST)
                continue
            position, version = cursor.lastrowid, self._landed
            if len(batch) > 1:
                # One writer at a time and AUTOINCREMENT: the rest follow the first.
                cursor.executemany(
                    _SQLITE_REST,
                    [
                        _sqlite_row(stream_id, version + i, event, stamp)
                        for i, event in enumerate(batch[1:], 1)
                    ],
                )
            count = len(batch)
            landed.append((tuple(range(position, position + count)), version + count - 1))
        if not alone:
            cursor.execute("COMMIT" if any(landed) else "ROLLBACK")
        return landed

    def _sqlite_cursor(self) -> Any:
        """The writer's cursor, made once per connection with the function its insert calls."""
        self._connection.create_function(SQLITE_LANDED, 1, self._land)
        self._cursor = self._connection.cursor()
        return self._cursor

    def _land(self, position: int) -> int:
        """Called by SQLite inside the checked insert (see `_SQLITE_FIRST`)."""
        self._landed = position
        return position

    def _postgres_statement(self, size: int, scope: Scope) -> str:
        """INSERT … SELECT for a batch of `size`, cached per size and scope (psycopg prepares it).

        Positions follow the transaction id, after the `offset` events the transaction's
        earlier statements inserted. The stream's version is its last position in its
        partition, read backwards off the stream index (a bare MAX, planned before the
        table had statistics, aggregated every entry of the stream instead: 0.23 ms at 590
        events, growing with the stream). The event ids go to `event_ids`, whose primary
        key refuses one stored already in `events` (migration 0010). A tick stream packed
        in `tick_rows` is at least at its row's version, and takes only an append checked
        against that row (`append`), read in its day's partition of `tick_rows` alone (a
        row keeps its stream's day, migration 0027).

        A stream other than a tick's is in `events_hot`. A tick stream's partition is its
        day in `tick_streams` (a stream new to it: the day of its first event, recorded
        there by this statement); `TICK` looks the day up, once, and the version check
        then reads that one partition, chosen as the statement runs. `KNOWN_DAY` takes the
        day the writer saw the stream's last append land in (`_stream_days`) as a
        parameter, which prunes the other partitions before they are opened (the server's
        CPU per append 0.27 -> 0.19 ms with five partitions; more with every day kept).
        It inserts only where `tick_streams` still says that day, and otherwise nothing,
        and the writer sends `TICK` instead.
        """
        key = (size, scope)
        if key not in self._statements:
            rows = ", ".join(["(%s::int, %s::uuid, %s, %s::smallint, %s::json, %s::json)"] * size)
            last = "(SELECT stream_position FROM events WHERE stream_id = %s AND {} "
            last += "ORDER BY stream_position DESC LIMIT 1)"
            lookup, guard, started, returning = "", "", "", ""
            if scope == HOT:
                hot, packed, day = last.format("tick_day IS NULL"), "NULL::int", "NULL::date"
            else:
                started = (
                    ", started AS (INSERT INTO tick_streams (stream_id, tick_day) "
                    "SELECT %s, day FROM new WHERE n = 1)"
                )
                returning = ", tick_day"
                known = "%s::date"
                if scope == TICK:
                    lookup = "known AS (SELECT tick_day FROM tick_streams WHERE stream_id = %s), "
                    known = "(SELECT tick_day FROM known)"
                    day = f"COALESCE({known}, %s::date)"
                else:
                    day = known
                    said = "(SELECT tick_day FROM tick_streams WHERE stream_id = %s)"
                    guard = f" WHERE {said} = {known}"
                hot = last.format(f"tick_day = {known}")
                packed = f"(SELECT version FROM tick_rows WHERE tick_id = %s AND day = {known})"
            self._statements[key] = (
                f"WITH {lookup}found AS (SELECT {hot} AS hot, {packed} AS packed, {day} AS day, "
                f"pg_current_xact_id()::text::bigint << 20 AS x{guard}), "
                "current AS (SELECT COALESCE(hot, packed, 0) AS v, packed, day, x FROM found), "
                "new AS (SELECT current.x + %s::bigint + v.o AS p, v.e, current.v + v.o AS n, "
                f"v.t, v.n AS version, v.d, v.m, current.day FROM (VALUES {rows}) "
                "AS v(o, e, t, n, d, m) CROSS JOIN current WHERE (%s < 0 OR current.v = %s) "
                "AND (current.packed IS NULL OR current.packed = %s::int)), "
                "ids AS (INSERT INTO event_ids (event_id, global_position) SELECT e, p FROM new)"
                f"{started} "
                "INSERT INTO events (global_position, event_id, stream_id, stream_position, "
                "type, version, data, metadata, recorded_at, tick_day) "
                "SELECT p, e, %s, n, t, version, d, m, %s, day FROM new "
                f"RETURNING global_position, stream_position{returning}"
            )
        return self._statements[key]

    def _postgres_values(
        self,
        stream_id: str,
        batch: Sequence[NewEvent],
        scope: Scope,
        parts: tuple[int, int, int | None, date, datetime],
    ) -> list[Any]:
        """The statement's parameters, in the order of its marks (`_postgres_statement`).

        `parts`: the offset, the expectation, the checked version, today and the time.
        """
        offset, expectation, checked, today, recorded_at = parts
        tick_id = _tick_id(stream_id)
        if scope == HOT:
            values: list[Any] = [stream_id]
        elif scope == TICK:
            values = [stream_id, stream_id, tick_id, today]
        else:
            day = self._stream_days[stream_id]
            values = [stream_id, day, tick_id, day, day, stream_id, day]
        values.append(offset)
        dumps = orjson.dumps
        for i, event in enumerate(batch, 1):
            values += (
                i,
                event.event_id,
                event.type,
                event.version,
                dumps(event.data).decode(),
                dumps(event.metadata).decode(),
            )
        values += (expectation, expectation, checked)
        if scope != HOT:
            values.append(stream_id)
        values += (stream_id, recorded_at)
        return values

    def _scope(self, stream_id: str, alone: bool) -> Scope:
        """Which statement appends to the stream; `KNOWN_DAY` only for an append on its own.

        In a transaction of several statements (a wave of new streams) a day no longer
        in `tick_streams` could not be sent again alone.
        """
        if not is_tick_stream(stream_id):
            return HOT
        return KNOWN_DAY if alone and stream_id in self._stream_days else TICK

    def _remember_day(self, stream_id: str, day: date) -> None:
        """Keep the day a tick stream's append landed in, for its next append (`KNOWN_DAY`).

        A tick process appends to its own stream, a long-running writer to one tick after
        another: the oldest are forgotten past `STREAM_DAYS`.
        """
        days = self._stream_days
        days.pop(stream_id, None)
        if len(days) >= STREAM_DAYS:
            del days[next(iter(days))]
        days[stream_id] = day

    def _append_postgres(
        self, streams: Streams, expectation: int, recorded_at: datetime, checked: int | None
    ) -> list[Positions | None]:
        today = recorded_at.astimezone(UTC).date()
        alone = len(streams) == 1
        scopes = [self._scope(stream_id, alone) for stream_id, _ in streams]
        if any(scope != HOT for scope in scopes) and today not in self._days:
            if not day_made(self._connection, today):
                ensure_days(self._engine, [today])
            self._days.add(today)
        statements = []
        offset = 0
        for (stream_id, batch), scope in zip(streams, scopes, strict=True):
            parts = (offset, expectation, checked, today, recorded_at)
            values = self._postgres_values(stream_id, batch, scope, parts)
            statements.append((self._postgres_statement(len(batch), scope), values))
            offset += len(batch)
        connection = self._connection
        if alone:
            # One autocommit statement: its commit waits for (or, at `process`, skips) the
            # flush alongside every other backend's, with no lock held.
            ((sql, values),) = statements
            rows = connection.execute(sql, values).fetchall()
            if not rows and scopes[0] == KNOWN_DAY:
                # The day is no longer the stream's (or the check refused): look it up.
                stream_id, batch = streams[0]
                del self._stream_days[stream_id]
                sql = self._postgres_statement(len(batch), TICK)
                values = self._postgres_values(stream_id, batch, TICK, parts)
                rows = connection.execute(sql, values).fetchall()
            found = [rows]
        else:
            with connection.pipeline():  # one round trip
                connection.execute("BEGIN")
                connection.execute(_LOCK_WAVE, ([stream_id for stream_id, _ in streams],))
                cursors = [connection.execute(sql, values) for sql, values in statements]
                connection.execute("COMMIT")  # a mismatch inserted nothing: committing is fine
            found = [cursor.fetchall() for cursor in cursors]
        landed: list[Positions | None] = []
        for (stream_id, _), scope, rows in zip(streams, scopes, found, strict=True):
            if not rows:
                landed.append(None)
                continue
            if scope != HOT:
                self._remember_day(stream_id, rows[0][2])
            landed.append((tuple(sorted(row[0] for row in rows)), max(row[1] for row in rows)))
        return landed

    def _discard(self) -> None:
        """Drop a connection in an unknown state; the next append opens a fresh one."""
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
            self._connection = self._cursor = None

    def close(self) -> None:
        """Drop the writer's own connection; the next append opens a new one."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = self._cursor = None
