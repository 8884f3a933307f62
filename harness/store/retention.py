"""The hot store's side of archiving: which ticks a day holds, deleting them, giving space back.

A tick belongs to the UTC day its stream's first event was recorded on: its stream starts
in the day's range of positions, from the first recorded that day to the first recorded
the next (`day_range`). Only closed streams (their terminal event stored and settled)
leave: a tick still open stays hot, whatever its age, and once it closes leaves with the
next day archived (a straggler, `closed_ticks`). A day's range is fixed once the day is
over, so the same day always selects the same ticks, less any that left already, plus
the stragglers that closed since.

Leaving, on PostgreSQL, is dropping the day's partitions (`leave_day`): `events` is
partitioned by the day each tick stream began (migration 0010), the archive's own unit,
and `tick_rows`, its closed ticks packed, by the same day (0027), so once a day's ticks
are archived its partitions hold nothing else; they are detached, counted and dropped in
one transaction, with the archive's stragglers of earlier days deleted beside them. A
day whose partition of `events` still holds an open tick falls back to the batched
DELETE, and its partitions are dropped once its last straggler has left
(`drop_emptied_days`); one whose rows' partition holds a tick packed since the archive
was written keeps it, its archived rows deleted. Streams that stay hot (levels, control,
throttle, digests) never were in a day's partition. SQLite deletes in batches, and its
freed pages go back to the file system by incremental vacuum (`reclaim_space`).
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from harness.contracts import ARCHIVE_STREAM, TERMINAL_TYPES, ArchiveWritten
from harness.store.archives import Line, lines, packed_lines
from harness.store.engine import create_store_engine, stored_utc
from harness.store.merging import merged
from harness.store.partitions import (
    EVENTS,
    TICK_ROWS,
    TICK_STREAM_PREFIX,
    PartitionHeld,
    delete_positions,
    drop_day,
    exists,
    is_empty,
    partitioned,
)
from harness.store.partitions import days as partition_days
from harness.store.schema import events, projection_checkpoints, tick_rows
from harness.store.sql import MAX_BATCH, SqlEventStore, translate_errors
from harness.store.tick_rows import CHECKPOINT as PACKING_CHECKPOINT
from harness.store.tick_rows import (
    PAGE,
    drop_rows_day,
    footprint_rows,
    holds_position,
    release,
    row_spans,
    row_starts,
    rows_from,
)

SCAN_PAGE = 1000
"""Events read per query while a day's ticks are copied out."""
RECORDS_PAGE = 64
"""`ArchiveWritten` records read per query, back from the archive stream's end."""

AUTO_VACUUM_INCREMENTAL = 2
"""`PRAGMA auto_vacuum`'s value for INCREMENTAL (0 is NONE, 1 FULL)."""


@dataclass(frozen=True)
class DaySpan:
    """Which tick streams a day's archive takes: where they begin, and how far is settled.

    A stream is the day's when its first record lies in the day's range of positions, or
    is a straggler's (at or below `stragglers`), and it is closed by `horizon`: a rule on
    a stream's own facts (`_closed`), so the day's ticks are found again page by page and
    never held as a set.
    """

    after: int
    upto: int
    stragglers: int
    """Streams begun at or below this position are stragglers of days archived before ..."""
    earliest: int
    """... and after this one: no tick stream still hot begins at or below it."""
    horizon: int

    def begins(self, position: int) -> bool:
        """Whether a stream whose first record lies at `position` is the day's."""
        return self.after < position <= self.upto or self.earliest < position <= self.stragglers


@dataclass(frozen=True)
class DayTicks:
    """A day's closed tick streams: how many, where their records lie, which are still hot."""

    day: date
    span: DaySpan
    count: int
    first: int
    """Their records lie after this position (the day's range does, unless a straggler
    begins before it) ..."""
    last: int
    """... and up to this one (0 when there are none)."""
    hot: frozenset[str]
    """Those begun in `events`, not packed whole: after the compaction pass that opens an
    archive run, the few that ended since. The day's packed ticks are never held."""


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


_TICK_STREAMS = (
    events.c.stream_id >= TICK_STREAM_PREFIX,
    events.c.stream_id < TICK_STREAM_PREFIX[:-1] + chr(ord(TICK_STREAM_PREFIX[-1]) + 1),
)
"""The tick streams, as a range of the stream index: a LIKE of their prefix is not one."""


def _first_tick(conn: sa.Connection, after: int, begun: bool) -> int | None:
    """The first position after `after` of a tick stream's record in `events` (`begun`: its first).

    On the stream index's range of tick streams, which holds the hot ticks that are not
    packed (open or ended lately): `+ 0` keeps the planners from walking the primary key
    from `after` through every stream that stays hot (levels, control, the archive's
    own), a row or more for each day of history. PostgreSQL looks in the days'
    partitions only.
    """
    query = sa.select(sa.func.min(events.c.global_position + 0)).where(
        *_TICK_STREAMS, events.c.global_position + 0 > after
    )
    if begun:
        query = query.where(events.c.stream_position == 1)
    if partitioned(conn.engine):
        query = query.where(sa.text("tick_day IS NOT NULL"))
    found = conn.execute(query).scalar()
    return None if found is None else int(found)


def _first_tick_record(store: SqlEventStore, after: int, begun: bool) -> int | None:
    """Where the first hot tick record after `after` lies (`begun`: a tick's first one).

    In `events` or in a packed row; None when there is none.
    """
    with store.read_transaction() as conn:
        hot = _first_tick(conn, after, begun)
        packed = conn.execute(
            sa.select(sa.func.min(tick_rows.c.first_position)).where(
                tick_rows.c.first_position > after
            )
        ).scalar()
    return min((int(position) for position in (hot, packed) if position is not None), default=None)


def oldest_tick_record(store: SqlEventStore) -> int | None:
    """The position of the oldest tick record still hot, in `events` or a row (None: none).

    Below it the log holds only streams that stay hot: every day there is archived, or
    held nothing to archive, so an archive run starts here and not at the log's start.
    """
    return _first_tick_record(store, 0, begun=False)


def first_tick_day_after(store: SqlEventStore, position: int) -> date | None:
    """The UTC day of the first tick stream still hot that begins after `position` (None: none).

    A day that begins none (the streams that stay hot are recorded every day) holds
    nothing to archive: an archive run steps over it without a query.
    """
    first = _first_tick_record(store, position, begun=True)
    return None if first is None else first_day_after(store, first - 1)


def recorded_after(store: SqlEventStore, position: int) -> list[ArchiveWritten]:
    """The `ArchiveWritten` records appended after `position`, in the order recorded.

    Read back from the archive stream's end a page at a time: the records of the days
    still holding hot ticks, not one for each day archived since the store began.
    """
    query = sa.select(
        events.c.stream_position, events.c.global_position, events.c.event_id, events.c.data
    ).where(events.c.stream_id == ARCHIVE_STREAM, events.c.type == ArchiveWritten.type)
    if partitioned(store.engine):
        query = query.where(sa.text("tick_day IS NULL"))
    query = query.order_by(events.c.stream_position.desc()).limit(RECORDS_PAGE)
    found: list[ArchiveWritten] = []
    below = None
    while True:
        paged = query if below is None else query.where(events.c.stream_position < below)
        with store.read_transaction() as conn:
            page = conn.execute(paged).all()
        found += [
            ArchiveWritten.model_validate({**data, "event_id": event_id})
            for _, at, event_id, data in page
            if at > position
        ]
        if len(page) < RECORDS_PAGE or page[-1].global_position <= position:
            return found[::-1]
        below = page[-1].stream_position


def closed_ticks(
    store: SqlEventStore, day: date, stragglers_upto: int = 0, earliest: int = 0
) -> DayTicks:
    """The tick streams that started on `day` and are closed, all their events settled.

    With them, the stragglers: closed streams still hot that started at or below
    `stragglers_upto` (and after `earliest`, below which no tick stream is hot), on a day
    archived while they were open. A straggler leaves with the first day archived after
    it closed. Counted a page at a time: the streams begun in `events` by the primary
    key's range for the day and the stragglers' (all archived but their stragglers and
    open ticks, so what is left there is small), the packed ones by the range of
    `tick_rows`' key; each page's facts by the stream index. A day of 1.44M ticks costs
    what a page of them costs in memory.
    """
    after, upto = day_range(store, day)
    stragglers = min(stragglers_upto, after)
    span = DaySpan(after, upto, stragglers, min(earliest, stragglers), store.last_position())
    count, first, last = 0, after, 0
    hot: set[str] = set()
    for page, packed in _begun(store, span):
        with store.read_transaction() as conn:
            closed = _closed(conn, page, span)
        for stream, (start, end, whole) in closed.items():
            if whole != packed:  # a stream begun hot with a row of old: counted as hot
                continue
            count += 1
            first, last = min(first, start - 1), max(last, end)
            if not whole:
                hot.add(stream)
    return DayTicks(day, span, count, first, last, frozenset(hot))


def _begun(store: SqlEventStore, span: DaySpan) -> Iterator[tuple[list[str], bool]]:
    """Pages of the tick streams whose first record lies in the span, by position.

    Those begun in `events` (False), then the rows of those packed (True), a row keyed
    by its stream's first record (a row of old that holds a transcript alone is told
    apart by `_closed`).
    """
    for starts, packed in ((_hot_starts, False), (row_starts, True)):
        for low, high in ((span.earliest, span.stragglers), (span.after, span.upto)):
            cursor = low
            while True:
                with store.read_transaction() as conn:
                    page = starts(conn, cursor, high)
                if page:
                    yield [stream for _, stream in page], packed
                if len(page) < PAGE:
                    break
                cursor = page[-1][0]


def _hot_starts(conn: sa.Connection, after: int, upper: int) -> list[tuple[int, str]]:
    """A page of the tick streams begun in `events` in (after, upper]: (position, stream)."""
    position = events.c.global_position
    query = (
        sa.select(position, events.c.stream_id)
        .where(
            position > after,
            position <= upper,
            events.c.stream_position == 1,
            events.c.stream_id.startswith(TICK_STREAM_PREFIX),
        )
        .order_by(position)
        .limit(PAGE)
    )
    return [(int(at), stream) for at, stream in conn.execute(query)]


def _closed(
    conn: sa.Connection, streams: Collection[str], span: DaySpan
) -> dict[str, tuple[int, int, bool]]:
    """Of these tick streams, the span's closed ones: stream -> (first, last, packed whole).

    A stream is closed when it holds a terminal event (a packed row does: only ended ticks
    are packed) and its last record is settled; it begins where its first record lies,
    in `events` or at its row's key.
    """
    wanted = list(streams)
    position = events.c.global_position
    terminal = sa.func.max(sa.case((events.c.type.in_(sorted(TERMINAL_TYPES)), 1), else_=0))
    begun = sa.func.min(sa.case((events.c.stream_position == 1, position), else_=None))
    found: dict[str, tuple[int, int, bool]] = {}
    for start in range(0, len(wanted), MAX_BATCH):
        chunk = wanted[start : start + MAX_BATCH]
        rows = row_spans(conn, chunk)
        query = (
            sa.select(events.c.stream_id, begun, sa.func.max(position), terminal)
            .where(events.c.stream_id.in_(chunk))
            .group_by(events.c.stream_id)
        )
        hot = {row[0]: (row[1], row[2], bool(row[3])) for row in conn.execute(query)}
        for stream in chunk:
            row = rows.get(stream)
            first, end, ended = hot.get(stream, (None, 0, False))
            whole = first is None
            if whole and row is not None:
                first = row[0]
            if first is None or not (ended or row is not None):
                continue
            end = max(end, 0 if row is None else row[1])
            if end <= span.horizon and span.begins(first):
                found[stream] = (first, end, whole)
    return found


def day_lines(store: SqlEventStore, ticks: DayTicks) -> Iterator[Line]:
    """The archive lines of the day's closed streams, in global order.

    Their packed rows are read once each, a page at a time in order of their first
    positions, and written as they are packed (`packed_lines`); the few records still in
    `events` are read beside them (a record in both, read while a compaction committed,
    is given once). Their streams start in the day's range and end by
    `ticks.last`: one pass over that range, never the whole log. Which stream is the
    day's is asked of each page (`_closed`, as `closed_ticks` counted them), so only the
    streams still hot are held.
    """
    return merged([_packed_lines(store, ticks), _hot_lines(store, ticks)])


def _members(conn: sa.Connection, streams: Collection[str], ticks: DayTicks) -> set[str]:
    """Which of these streams the day's archive takes (those `closed_ticks` counted).

    The hot ones it holds; a packed one by the rule, ended by `ticks.last` (a tick packed
    since, that ended later, was not counted).
    """
    held = {stream for stream in streams if stream in ticks.hot}
    asked = {
        stream for stream in streams if stream not in held and stream.startswith(TICK_STREAM_PREFIX)
    }
    if not asked:
        return held
    closed = _closed(conn, asked, ticks.span)
    return held | {
        stream for stream, (_, end, whole) in closed.items() if whole and end <= ticks.last
    }


def _packed_lines(store: SqlEventStore, ticks: DayTicks) -> Iterator[Line]:
    """The lines of the day's packed rows, in global order.

    Rows come by first position and a row's records lie at or past it, so every record
    before the next row's first position can go: what waits is the records of the rows
    still open at that point, not the day's.
    """
    waiting: list[Line] = []
    cursor = ticks.first
    while True:
        with store.read_transaction() as conn:
            page = rows_from(conn, cursor, ticks.last)
            taken = _members(conn, [f"{TICK_STREAM_PREFIX}{tick}" for _, tick, _ in page], ticks)
        for first, tick_id, blob in page:
            while waiting and waiting[0][0] < first:
                yield heapq.heappop(waiting)
            if f"{TICK_STREAM_PREFIX}{tick_id}" in taken:
                for line in packed_lines(tick_id, blob):
                    heapq.heappush(waiting, line)
        if len(page) < PAGE:
            break
        cursor = page[-1][0]
    while waiting:
        yield heapq.heappop(waiting)


def _hot_lines(store: SqlEventStore, ticks: DayTicks) -> Iterator[Line]:
    """The lines of the day's streams' records still in `events`, in global order."""
    cursor = ticks.first
    while page := store.read_unpacked(cursor, ticks.last, SCAN_PAGE):
        with store.read_transaction() as conn:
            taken = _members(conn, {event.stream_id for event in page}, ticks)
        yield from lines(event for event in page if event.stream_id in taken)
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


@dataclass
class LeavingDay:
    """PostgreSQL: a day archive's records sorted, a batch at a time, by the partition they are in.

    A stream's partition is the UTC day of its first event, which comes first (the
    archive holds whole streams in global order), and so is its packed row's. Only the
    stragglers, streams of earlier days, are held, with their positions: a day's own
    ticks are counted, not kept, and their rows let go of their ids as they are counted
    (`release`), to leave with the day's partition of `tick_rows`.
    """

    day: date
    in_partition: int = 0
    """Events of tick streams that began on the day (its partition's) ..."""
    packed: int = 0
    """... of which this many are in those ticks' rows, not in the partition ..."""
    rows: int = 0
    """... in this many rows, the day's partition of `tick_rows`."""
    stragglers: set[str] = field(default_factory=set)
    elsewhere: list[int] = field(default_factory=list)
    """Positions of the stragglers' events, in their own days' partitions."""
    rows_left: bool = False
    """Whether the day's rows left as their partition (`leave_day`)."""

    def sort(self, conn: sa.Connection, batch: Iterable[dict[str, Any]]) -> list[str]:
        """Count a batch of the archive's records (in order) by partition.

        Returns the stragglers among the batch's ticks: their rows, in their own days'
        partitions, are the caller's to delete.
        """
        begun = []
        straggling: set[str] = set()
        for record in batch:
            stream_id = record["stream_id"]
            if record["stream_position"] == 1:
                at = datetime.fromisoformat(record["recorded_at"]).astimezone(UTC)
                if at.date() == self.day:
                    begun.append(stream_id.removeprefix(TICK_STREAM_PREFIX))
                else:
                    self.stragglers.add(stream_id)
            if stream_id in self.stragglers:
                self.elsewhere.append(record["global_position"])
                straggling.add(stream_id.removeprefix(TICK_STREAM_PREFIX))
            else:
                self.in_partition += 1
        rows, records = release(conn, begun, self.day)
        self.rows += rows
        self.packed += records
        return sorted(straggling)


def leave_day(conn: sa.Connection, leaving: LeavingDay) -> int:
    """PostgreSQL: drop the day's partitions and delete the archive's stragglers; how many left.

    In the caller's transaction, after every record was sorted: all of it or nothing.
    Raises PartitionHeld when the partition of `events` holds events the archive does not
    (an open tick): the caller deletes instead. The records of the day's packed ticks
    are in their rows, which leave as the day's partition of `tick_rows` when it holds
    no other (`leaving.rows_left`); else they are the caller's to delete (`forget`).
    """
    expected = leaving.in_partition - leaving.packed
    drop_day(conn, leaving.day, expected)
    left = expected + delete_events(conn, leaving.elsewhere)
    leaving.rows_left = drop_rows_day(conn, leaving.day, leaving.rows)
    return left + leaving.packed if leaving.rows_left else left


def drop_emptied_days(store: SqlEventStore, before: date) -> list[date]:
    """Drop the partitions of days before `before` that hold no event any more; which days.

    A day archived while one of its ticks was open kept its partitions; the straggler left
    with a later day's archive, by DELETE. A day's partition of `tick_rows` goes once it
    holds no row and its partition of `events` is gone: a tick of the day still in
    `events` is packed into it. Days from `before` on are left alone: writers may still
    begin streams in them.
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
    with store.read_transaction() as conn:
        emptied = [
            day
            for day in partition_days(conn, TICK_ROWS)
            if day < before
            and not exists(conn, EVENTS.partition(day))
            and is_empty(conn, day, TICK_ROWS)
        ]
    for day in emptied:
        with store.write_transaction() as conn:
            gone = drop_rows_day(conn, day, 0)
        if gone and day not in dropped:
            dropped.append(day)
    return sorted(dropped)


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
    models' rewritten rows and a fallback day's deletes: every table of the store is
    vacuumed (`SqlEventStore.vacuum`), which takes no lock that stops appends and skips
    pages with no dead tuple.
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
    """Bytes of the `events` and `tick_rows` tables and their indexes (PostgreSQL: of their
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
                "SELECT sum(pg_total_relation_size(relid)) FROM (SELECT relid FROM "
                "pg_partition_tree('events') UNION ALL SELECT relid FROM "
                "pg_partition_tree('tick_rows') UNION ALL SELECT 'event_ids'::regclass "
                "UNION ALL SELECT 'tick_streams'::regclass) AS log"
            ).scalar_one()
            size = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one()
    return Footprint(count + packed, dict(sorted(days.items())), int(table), int(size))
