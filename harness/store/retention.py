"""The hot store's side of archiving: which ticks a day holds, deleting them, giving space back.

A tick belongs to the UTC day its stream's first event was recorded on: its stream starts
in the day's range of positions, from the first recorded that day to the first recorded
the next (`day_range`). Only closed streams (their terminal event stored and settled)
leave: a tick still open stays hot, whatever its age, and once it closes leaves with the
next day archived (a straggler, `closed_ticks`). A day's range is fixed once the day is
over, so the same day always selects the same ticks, less any that left already, plus
the stragglers that closed since.

Leaving, on PostgreSQL, is dropping the day's partition (`leave_day`): `events` is
partitioned by the day each tick stream began (migration 0010), the archive's own unit,
so once a day's ticks are archived its partition holds nothing else; it is detached,
counted and dropped in one transaction, with the archive's stragglers of earlier days
deleted beside it. A day whose partition still holds an open tick falls back to the
batched DELETE, and its partition is dropped once its last straggler has left
(`drop_emptied_days`). Streams that stay hot (levels, control, throttle, digests) never
were in a day's partition. SQLite deletes in batches, and its freed pages go back to the
file system by incremental vacuum (`reclaim_space`).
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from harness.contracts import TERMINAL_TYPES
from harness.store.archives import Line, lines, merged, packed_lines
from harness.store.engine import create_store_engine, stored_utc
from harness.store.partitions import (
    TICK_STREAM_PREFIX,
    PartitionHeld,
    delete_positions,
    drop_day,
    is_empty,
    partitioned,
)
from harness.store.partitions import days as partition_days
from harness.store.schema import events, projection_checkpoints
from harness.store.sql import MAX_BATCH, SqlEventStore, translate_errors
from harness.store.tick_rows import CHECKPOINT as PACKING_CHECKPOINT
from harness.store.tick_rows import (
    PAGE,
    footprint_rows,
    holds_position,
    last_positions,
    packed_count,
    packed_starts,
    rows_from,
)

SCAN_PAGE = 1000
"""Events read per query while a day's ticks are copied out."""

AUTO_VACUUM_INCREMENTAL = 2
"""`PRAGMA auto_vacuum`'s value for INCREMENTAL (0 is NONE, 1 FULL)."""


@dataclass(frozen=True)
class DayTicks:
    """A day's closed tick streams and where their events lie."""

    day: date
    after: int
    """Their events start after this position (the day's range of first events does,
    unless a straggler of an earlier day starts before it) ..."""
    upto: int
    """... and the day's range ends here."""
    streams: AbstractSet[str]
    last: int
    """The highest position of any of their events (0 when there are none)."""


def day_range(store: SqlEventStore, day: date) -> tuple[int, int]:
    """(after, upto): the positions recorded on `day` lie in (after, upto]."""
    start = datetime.combine(day, time(), UTC)
    return (
        store.first_position_since(start) - 1,
        store.first_position_since(start + timedelta(days=1)) - 1,
    )


def first_day_after(store: SqlEventStore, position: int) -> date | None:
    """The UTC day of the first event after `position` (None at the end of the log)."""
    first = store.read_all(position, 1)
    return first[0].recorded_at.date() if first else None


def closed_ticks(store: SqlEventStore, day: date, stragglers_upto: int = 0) -> DayTicks:
    """The tick streams that started on `day` and are closed, all their events settled.

    With them, the stragglers: closed streams still hot that started at or below
    `stragglers_upto`, on a day archived while they were open. A straggler leaves with
    the first day archived after it closed. Two queries on the primary key's range for
    the day and the days before it (all archived but their stragglers and open ticks,
    so what is left there is small) and, per thousand streams, one on the stream index:
    no scan outside them. Ticks packed whole (`harness.store.tick_rows`) are closed;
    their rows name the day they started.
    """
    after, upto = day_range(store, day)
    horizon = store.last_position()
    with store.read_transaction() as conn:
        position = events.c.global_position
        started = dict(
            conn.execute(
                sa.select(events.c.stream_id, position).where(
                    sa.or_(
                        sa.and_(position > after, position <= upto),
                        position <= min(stragglers_upto, after),
                    ),
                    events.c.stream_position == 1,
                    events.c.stream_id.startswith(TICK_STREAM_PREFIX),
                )
            ).all()
        )
        packed = packed_starts(conn, day, min(stragglers_upto, after))
        _keep_whole(conn, packed)
        started.update(packed)
        del packed  # a day of 1.44M ticks: each copy of its ids held at once is ~100 MB
        closed: set[str] = set()
        first, last = after, 0
        terminal = sa.func.max(sa.case((events.c.type.in_(sorted(TERMINAL_TYPES)), 1), else_=0))
        streams = list(started)
        for start in range(0, len(streams), MAX_BATCH):
            chunk = streams[start : start + MAX_BATCH]
            ends = {stream: (end, True) for stream, end in last_positions(conn, chunk).items()}
            query = (
                sa.select(events.c.stream_id, sa.func.max(position), terminal)
                .where(events.c.stream_id.in_(chunk))
                .group_by(events.c.stream_id)
            )
            for stream_id, end, ended in conn.execute(query):
                packed_end, _ = ends.get(stream_id, (0, False))
                ends[stream_id] = (max(end, packed_end), bool(ended) or stream_id in ends)
            for stream_id, (end, ended) in ends.items():
                if ended and end <= horizon:
                    closed.add(stream_id)
                    first = min(first, started[stream_id] - 1)
                    last = max(last, end)
    return DayTicks(day, first, upto, closed, last)


def _keep_whole(conn: sa.Connection, packed: dict[str, int]) -> None:
    """Keep, of packed streams (with their rows' first positions), those packed from the start.

    A row packed before 0020 may hold a transcript alone, its tick's start still hot.
    """
    streams = list(packed)
    for start in range(0, len(streams), MAX_BATCH):
        query = sa.select(events.c.stream_id).where(
            events.c.stream_id.in_(streams[start : start + MAX_BATCH]),
            events.c.stream_position == 1,
        )
        for hot in conn.execute(query).scalars():
            del packed[hot]


def day_lines(store: SqlEventStore, ticks: DayTicks) -> Iterator[Line]:
    """The archive lines of the day's closed streams, in global order.

    Their packed rows are read once each, a page at a time in order of their first
    positions, and written as they are packed (`packed_lines`); the few records still in
    `events` are read beside them (a record in both, read while a compaction committed,
    is given once). Their streams start in the day's range and end by
    `ticks.last`: one pass over that range, never the whole log.
    """
    return merged([_packed_lines(store, ticks), _hot_lines(store, ticks)])


def _packed_lines(store: SqlEventStore, ticks: DayTicks) -> Iterator[Line]:
    """The lines of the day's packed rows, in global order.

    Rows come by first position and a row's records lie at or past it, so every record
    before the next row's first position can go: what waits is the records of the rows
    still open at that point, not the day's.
    """
    waiting: list[Line] = []
    cursor = ticks.after
    while True:
        with store.read_transaction() as conn:
            page = rows_from(conn, cursor, ticks.last)
        for first, tick_id, blob in page:
            while waiting and waiting[0][0] < first:
                yield heapq.heappop(waiting)
            if f"{TICK_STREAM_PREFIX}{tick_id}" in ticks.streams:
                for line in packed_lines(tick_id, blob):
                    heapq.heappush(waiting, line)
        if len(page) < PAGE:
            break
        cursor = page[-1][0]
    while waiting:
        yield heapq.heappop(waiting)


def _hot_lines(store: SqlEventStore, ticks: DayTicks) -> Iterator[Line]:
    """The lines of the day's streams' records still in `events`, in global order."""
    cursor = ticks.after
    while page := store.read_unpacked(cursor, ticks.last, SCAN_PAGE):
        yield from lines(event for event in page if event.stream_id in ticks.streams)
        cursor = page[-1].global_position


def delete_events(conn: sa.Connection, positions: Sequence[int]) -> int:
    """Delete the events at `positions` in the caller's transaction; returns how many went.

    Positions already gone are no-ops, so a deletion cut short is simply run again. On
    PostgreSQL their ids and their streams' day rows go with them.
    """
    deleted = 0
    for start in range(0, len(positions), MAX_BATCH):
        chunk = list(positions[start : start + MAX_BATCH])
        if conn.dialect.name == "postgresql":
            deleted += delete_positions(conn, chunk)
        else:
            query = events.delete().where(events.c.global_position.in_(chunk))
            deleted += conn.execute(query).rowcount
    return deleted


@dataclass(frozen=True)
class ArchivedDay:
    """Where a day archive's events lie: in the day's partition, or in earlier days' ones."""

    in_partition: int
    """Events of tick streams that began on the day (its partition's)."""
    elsewhere: list[int]
    """Positions of the stragglers of earlier days, in their own days' partitions."""
    tick_ids: set[str]


def archived_day(day: date, archived: Iterable[dict[str, Any]]) -> ArchivedDay:
    """Sort a day archive's records (global order, whole streams) by the partition they are in.

    A stream's partition is the UTC day of its first event, which comes first.
    """
    begun: dict[str, date] = {}
    in_partition = 0
    elsewhere = []
    for record in archived:
        stream_id = record["stream_id"]
        stream_day = begun.get(stream_id)
        if stream_day is None:
            at = datetime.fromisoformat(record["recorded_at"])
            stream_day = begun[stream_id] = at.astimezone(UTC).date()
        if stream_day == day:
            in_partition += 1
        else:
            elsewhere.append(record["global_position"])
    ticks = {stream.removeprefix(TICK_STREAM_PREFIX) for stream in begun}
    return ArchivedDay(in_partition, elsewhere, ticks)


def leave_day(conn: sa.Connection, day: date, archived: ArchivedDay) -> int:
    """PostgreSQL: drop the day's partition and delete the archive's stragglers; how many left.

    In the caller's transaction: all of it or nothing. Raises PartitionHeld when the
    partition holds events the archive does not (an open tick): the caller deletes
    instead. The records of the day's packed ticks are in their rows, not the partition;
    the rows go with `forget`.
    """
    packed = packed_count(conn, archived.tick_ids, day)
    drop_day(conn, day, archived.in_partition - packed)
    return archived.in_partition - packed + delete_events(conn, archived.elsewhere)


def drop_emptied_days(store: SqlEventStore, before: date) -> list[date]:
    """Drop the partitions of days before `before` that hold no event any more.

    A day archived while one of its ticks was open kept its partition; the straggler left
    with a later day's archive, by DELETE. Days from `before` on are left alone: writers
    may still begin streams in them.
    """
    if not partitioned(store.engine):
        return []
    dropped = []
    with store.read_transaction() as conn:
        candidates = [day for day in partition_days(conn) if day < before and is_empty(conn, day)]
    for day in candidates:
        try:
            with store.write_transaction() as conn:
                drop_day(conn, day, 0)
        except PartitionHeld:
            continue
        dropped.append(day)
    return dropped


def holds(store: SqlEventStore, position: int) -> bool:
    """Whether the event at `position` is still in the hot store (in `events` or packed)."""
    with store.read_transaction() as conn:
        query = sa.select(events.c.global_position).where(events.c.global_position == position)
        return conn.execute(query).first() is not None or holds_position(conn, position)


def lagging_checkpoints(store: SqlEventStore, position: int) -> dict[str, int]:
    """Checkpoints (projections, the alerter) that have not folded up to `position` yet.

    Events they have not folded must not leave: a follower would never see them. The
    packing's checkpoint is not one: a tick archived before it was packed leaves from
    `events` (and the log's newest event, which it never passes, may well be archived).
    """
    with store.read_transaction() as conn:
        query = sa.select(projection_checkpoints.c.name, projection_checkpoints.c.position).where(
            projection_checkpoints.c.position < position,
            projection_checkpoints.c.name != PACKING_CHECKPOINT,
        )
        return {name: int(at) for name, at in conn.execute(query)}


def reclaim_space(store: SqlEventStore) -> str | None:
    """Give the pages deleted events freed back to the file system (SQLite), or do nothing.

    Returns a line for the operator when the SQLite file was made before incremental
    vacuum was set at creation: its pages stay free inside it until it is converted once
    (`convert_to_incremental_vacuum`). On PostgreSQL a plain VACUUM of `events` makes the
    deleted rows' space reusable at once, so the next day's appends fill it and the table
    stops growing: waiting for autovacuum, a day's appends outrun it (the soak run showed
    the table growing by a day of events each day). With days leaving as partitions,
    what is left to vacuum is the narrow rows of `event_ids`, `tick_streams`, the read
    models' rewritten rows and a fallback day's deletes: the whole database is vacuumed,
    which takes no lock that stops appends and skips pages with no dead tuple.
    """
    if store.engine.dialect.name != "sqlite":
        store.vacuum()
        return None
    with translate_errors(), _raw(store.engine) as connection:
        if connection.execute("PRAGMA auto_vacuum").fetchone()[0] != AUTO_VACUUM_INCREMENTAL:
            return (
                "the SQLite store was made without incremental vacuum, so its file does not "
                "shrink: `tickwork archive` converts it once when no other process has it open"
            )
        # `execute` steps the pragma once, which frees one page: a script runs it whole.
        connection.executescript("PRAGMA incremental_vacuum;")
    return None


def convert_to_incremental_vacuum(url: str) -> str | None:
    """Convert a SQLite store made without incremental vacuum, by one full VACUUM.

    The setting changes only outside WAL mode, which only the store's last open
    connection may leave: the caller closes its own first, and when another process has
    the store open the line returned says so and nothing changes. Returns None when
    there is nothing to do (PostgreSQL, or converted already).
    """
    engine = create_store_engine(url)
    try:
        if engine.dialect.name != "sqlite":
            return None
        with translate_errors(), _raw(engine) as connection:
            if connection.execute("PRAGMA auto_vacuum").fetchone()[0] == AUTO_VACUUM_INCREMENTAL:
                return None
            connection.execute("PRAGMA busy_timeout = 0")
            try:
                left = connection.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
            except sqlite3.OperationalError:
                left = "wal"
            if left != "delete":
                return "not converted to incremental vacuum: another process has the store open"
            try:
                connection.execute("PRAGMA auto_vacuum = INCREMENTAL")
                connection.execute("VACUUM")
            finally:
                connection.execute("PRAGMA journal_mode = WAL")
        return "converted the SQLite store to incremental vacuum (one full VACUUM)"
    finally:
        engine.dispose()


@contextmanager
def _raw(engine: Engine) -> Iterator[Any]:
    """The driver's own connection, in autocommit: pragmas and VACUUM run outside a transaction."""
    raw = engine.raw_connection()
    try:
        yield raw.driver_connection
    finally:
        raw.close()


@dataclass(frozen=True)
class Footprint:
    """What the hot store holds: what a steady state with `hot_days` keeps flat."""

    events: int
    tick_days: dict[date, int]
    """Tick streams still hot, by the UTC day each started on."""
    events_size: int
    """Bytes of the `events` and `tick_rows` tables and their indexes (PostgreSQL: of its
    partitions and of `event_ids` and `tick_streams` too, dead tuples included until a
    vacuum)."""
    size: int
    """Bytes of the whole store, read models included: SQLite's pages, free ones too (its
    file's size once the WAL is checkpointed); PostgreSQL's database."""


def footprint(store: SqlEventStore) -> Footprint:
    """Count the hot store's events and tick streams, and its sizes (a scan: soak runs only)."""
    with store.read_transaction() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one()
        started = conn.execute(
            sa.select(events.c.stream_id, events.c.recorded_at).where(
                events.c.stream_position == 1, events.c.stream_id.startswith(TICK_STREAM_PREFIX)
            )
        ).all()
        days: dict[date, int] = {}
        hot_started = set()
        for stream, at in started:
            hot_started.add(stream)
            day = stored_utc(at).date()
            days[day] = days.get(day, 0) + 1
        packed, packed_days = footprint_rows(conn, hot_started)
        for day, ticks in packed_days.items():
            days[day] = days.get(day, 0) + ticks
        if store.engine.dialect.name == "sqlite":
            table = conn.exec_driver_sql(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN "
                "(SELECT name FROM sqlite_schema WHERE tbl_name IN ('events', 'tick_rows'))"
            ).scalar_one()
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
            size = pages * conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        else:
            table = conn.exec_driver_sql(
                "SELECT (SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree('events')) + pg_total_relation_size('event_ids') + "
                "pg_total_relation_size('tick_streams') + pg_total_relation_size('tick_rows')"
            ).scalar_one()
            size = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one()
    return Footprint(count + packed, dict(sorted(days.items())), int(table), int(size))
