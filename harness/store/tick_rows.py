"""Closed ticks in their compact form: a tick's whole stream as one packed row of `tick_rows`.

As events, each of a tick's dozen records costs a row, three or four index entries and its
JSON keys spelled out again. Once a tick has ended and every projection has folded it,
its stream does not change, so `compact` moves its records out of `events` into one row:
packed losslessly (`harness.folds.packed`), in the same transaction as their deletion, so
a kill leaves each record in one place, never both or neither.

The log reads the same. A stream's reads put a tick's packed records back in their places
(`with_compacted`); every read of a range of positions merges the records of the rows
that overlap it (`between`): a row is keyed by the first position it holds, and reaches
at most the widest span of any row past it, so the rows of a range are one range of the
key. Records packed and still in `events` at once (read while a compaction committed,
each statement its own snapshot on PostgreSQL) are given once.

A record appended to a packed stream later (a spool replayed late) is checked against the
row's ids, so a replay of a packed record stays a no-op (the writer refuses a packed
stream's appends until the store has checked them, `harness.store.sql`), and a new one
stays in `events`, read beside the row. On PostgreSQL packed ids leave `event_ids` after
their pass (`release_ids`): the row's version check covers them, as on SQLite.

Compaction follows the log with its own checkpoint (`CHECKPOINT`, beside the
projections'): a pass reads the terminal events committed since, up to where every other
checkpoint has passed, and packs those ticks. The newest event stays in `events`, so the
log's last position is always a row of it.

Transcripts may leave sooner than their ticks (`[retention] transcript_days`,
`harness.scheduling.transcript_archiving`): a row's `TranscriptEntry` records go to the
day's transcripts file, and the row is packed again without them, keeping the day whose
archive holds them (`archived_on`), until the tick itself is archived (`forget`).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import count
from typing import TYPE_CHECKING, Any
from uuid import UUID

import sqlalchemy as sa

from harness.contracts import (
    EVENT_TYPES,
    TERMINAL_TYPES,
    StoredEvent,
    TickEvent,
    TranscriptEntry,
    tick_id_day,
)
from harness.folds import (
    EPOCH,
    TICK_PREFIX,
    EventData,
    pack,
    positions,
    records_of,
    restore,
    unpack_data,
)
from harness.store.base import EventStore
from harness.store.engine import stored_utc
from harness.store.partitions import TICK_ROWS, PartitionHeld, detach
from harness.store.schema import events, projection_checkpoints, tick_rows
from harness.store.writer import APPENDS_WAIT, appends_settled

if TYPE_CHECKING:
    from harness.store.sql import SqlEventStore

CHECKPOINT = "tick_rows"
"""The compaction's checkpoint, among the projections' (archiving waits for every one)."""
WINDOW_EVENTS = 5_000
"""Events one compaction transaction covers: ~370 ticks, a short hold of the write lock."""
PAGE = 1000
"""Rows read, written or deleted per statement."""
TICK_TYPES = frozenset(cls.type for cls in EVENT_TYPES.values() if issubclass(cls, TickEvent))
"""The only types a tick stream, and so a row, holds: a read of other types skips the rows."""
UNBOUNDED = 1 << 62


def holds_types(types: Collection[str] | None) -> bool:
    """Whether rows can hold any of `types` (None: every type)."""
    return types is None or not TICK_TYPES.isdisjoint(types)


def stream_tick(stream_id: str) -> str | None:
    """The tick id of a tick stream, None for any other stream."""
    return stream_id.removeprefix(TICK_PREFIX) if stream_id.startswith(TICK_PREFIX) else None


def by_tick(conn: sa.Connection, query: sa.Select[Any], ticks: Sequence[str]) -> list[Any]:
    """The rows `query` (which selects `tick_id`) finds for these ticks.

    On PostgreSQL a row lies in the partition of its day, the day its stream began
    (migration 0027), which is the day its id names for nearly every tick
    (`tick_id_day`): it is looked for there first, each day's ticks in one partition.
    The rest (a backfilled slot, a tick begun just past midnight, an id of another form,
    a tick without a row) are looked for in every partition.
    """
    if conn.dialect.name != "postgresql":
        return list(conn.execute(query.where(tick_rows.c.tick_id.in_(ticks))))
    named: dict[date, list[str]] = {}
    for tick in ticks:
        day = tick_id_day(tick)
        if day is not None:
            named.setdefault(day, []).append(tick)
    found: list[Any] = []
    for day, on_day in named.items():
        where = (tick_rows.c.tick_id.in_(on_day), tick_rows.c.day == day)
        found += conn.execute(query.where(*where))
    seen = {row.tick_id for row in found}
    rest = [tick for tick in ticks if tick not in seen]
    if rest:
        found += conn.execute(query.where(tick_rows.c.tick_id.in_(rest)))
    return found


def _same_rows(conn: sa.Connection, keys: Iterable[tuple[str, date]]) -> sa.ColumnElement[bool]:
    """The condition that picks rows read before again by (tick, day).

    PostgreSQL: the days keep each lookup in its partitions. SQLite: the tick id alone
    (unique there); given a day too, its planner chose the day's index over the tick
    ids' and read every row of the day for each batch, so an archived day of 1.44M
    ticks left at 128 ticks a second, and a compaction read all of today's rows.
    """
    picked = list(keys)
    chosen = tick_rows.c.tick_id.in_([tick for tick, _ in picked])
    if conn.dialect.name != "postgresql":
        return chosen
    return sa.and_(chosen, tick_rows.c.day.in_(sorted({day for _, day in picked})))


# --- reads -------------------------------------------------------------------------------


def unpack(tick_id: str, blob: bytes) -> list[StoredEvent]:
    """The stored records of a packed tick, in stream order, as `read_stream` gives them."""
    level, records = records_of(blob)
    stream_id = f"{TICK_PREFIX}{tick_id}"
    return [
        StoredEvent(
            position,
            UUID(hex=hex_id),
            stream_id,
            stream_position,
            type_,
            version,
            restore(tick_id, level, data, flags),
            metadata,
            EPOCH + timedelta(microseconds=micros),
        )
        for position, hex_id, stream_position, type_, version, data, metadata, micros, flags in (
            records
        )
    ]


def compacted(conn: sa.Connection, stream_ids: Iterable[str]) -> dict[str, list[StoredEvent]]:
    """The packed records of these streams, by stream (streams without a row are left out)."""
    ticks = [tick for tick in map(stream_tick, stream_ids) if tick is not None]
    found: dict[str, list[StoredEvent]] = {}
    for start in range(0, len(ticks), PAGE):
        query = sa.select(tick_rows.c.tick_id, tick_rows.c.data)
        for tick, blob in by_tick(conn, query, ticks[start : start + PAGE]):
            found[f"{TICK_PREFIX}{tick}"] = unpack(tick, bytes(blob))
    return found


def with_compacted(
    found: list[StoredEvent], entries: list[StoredEvent], after: int = 0, limit: int | None = None
) -> list[StoredEvent]:
    """A stream's events read from `events`, with its packed records in their places.

    `found` is the first `limit` events after `after`; merged, the first `limit` of both
    are the stream's first `limit`. A record in both (read while its row was written) is
    given once.
    """
    if not entries:
        return found
    packed_ids = {e.event_id for e in entries}
    merged = sorted(
        [
            *(e for e in found if e.event_id not in packed_ids),
            *(e for e in entries if e.stream_position > after),
        ],
        key=lambda e: e.stream_position,
    )
    return merged if limit is None else merged[:limit]


WIDEST_SPAN = "SELECT MAX(last_position - first_position) AS span FROM tick_rows"
"""The widest (last - first position) of any row, off its index (NULL without rows)."""


def widest_span(conn: sa.Connection) -> int | None:
    """`WIDEST_SPAN`, sent as text; None without rows."""
    found = conn.exec_driver_sql(WIDEST_SPAN).scalar()
    return None if found is None else int(found)


def between(
    conn: sa.Connection, after: int, upper: int, span: int | None
) -> Iterator[tuple[int, str, bytes]]:
    """(first position, tick, blob) of the rows that may hold positions in (after, upper].

    A row holding one starts after `after - span` and at or before `upper`, `span` the
    `widest_span` read in this read: one range of the primary key, read `PAGE` rows at
    a time (a page from the last one's first position on), so a long range is never
    fetched whole.
    """
    if span is None or upper <= after:
        return
    start = after - span
    while True:
        query = (
            sa.select(tick_rows.c.first_position, tick_rows.c.tick_id, tick_rows.c.data)
            .where(
                tick_rows.c.first_position > start,
                tick_rows.c.first_position <= upper,
                tick_rows.c.last_position > after,
            )
            .order_by(tick_rows.c.first_position)
            .limit(PAGE)
        )
        page = conn.execute(query).all()
        for first, tick, blob in page:
            yield int(first), tick, bytes(blob)
        if len(page) < PAGE:
            return
        start = page[-1][0]


def records_between(
    conn: sa.Connection, after: int, upper: int, types: Collection[str] | None = None
) -> list[StoredEvent]:
    """The packed records in (after, upper] (of `types`), in global order."""
    if not holds_types(types):
        return []
    found = [
        record
        for _, tick, blob in between(conn, after, upper, widest_span(conn))
        for record in unpack(tick, blob)
        if after < record.global_position <= upper and (types is None or record.type in types)
    ]
    return sorted(found, key=lambda record: record.global_position)


def records_first(
    conn: sa.Connection,
    after: int,
    upper: int,
    limit: int,
    types: Collection[str] | None,
    span: int | None,
) -> list[StoredEvent]:
    """The first `limit` packed records in (after, upper] (of `types`), in global order.

    `span`: the `widest_span` its caller read (`read_all` reads it once for its two uses).

    Rows are read in order of their first positions and a record is kept only while it is
    among the `limit` smallest: once that many are kept and a row starts past the largest,
    no later row holds a smaller one, and the read stops. `records_between` holds every
    record of its range first, and `read_all`'s range ends the widest span past a row: on
    PostgreSQL as long as the longest tick ran, in transactions of the whole cluster. On a
    store of real ticks that was its whole history: the archive run's first look at the
    log (`read_all(0, 1)`, in `tickwork run`'s start) decoded 1M events and held 1.4 GB.
    """
    if not holds_types(types) or limit < 1:
        return []
    kept: list[tuple[int, StoredEvent]] = []  # a heap of the smallest, largest on top
    for first, tick, blob in between(conn, after, upper, span):
        if len(kept) == limit and first > -kept[0][0]:
            break
        for record in unpack(tick, blob):
            position = record.global_position
            if not (after < position <= upper) or (types is not None and record.type not in types):
                continue
            if len(kept) < limit:
                heapq.heappush(kept, (-position, record))
            elif position < -kept[0][0]:
                heapq.heapreplace(kept, (-position, record))
    return sorted((record for _, record in kept), key=lambda record: record.global_position)


def records_last(
    conn: sa.Connection, after: int, limit: int, types: Collection[str]
) -> list[StoredEvent]:
    """The newest `limit` packed records of `types` after `after`, in global order.

    Rows backwards by first position, a page of `limit` rows at a time, until `limit`
    records are found that no row not read yet can outrank: a row's records lie within the
    widest span past its first position. A reach back by a count of records
    (`reach_before`) would unpack every row when the types are rare among them (the last
    100 `TickScheduled` of a store whose open ticks hold fewer than 100: all of it).
    """
    span = widest_span(conn)
    if span is None or not holds_types(types):
        return []
    key = tick_rows.c.first_position
    found: list[StoredEvent] = []
    query = sa.select(tick_rows.c.tick_id, tick_rows.c.data, key).where(key > after - span)
    oldest: int | None = None
    while True:
        page_of = query if oldest is None else query.where(key < oldest)
        page = conn.execute(page_of.order_by(key.desc()).limit(limit)).all()
        for tick, blob, _ in page:
            found += (
                r
                for r in unpack(tick, bytes(blob))
                if r.global_position > after and r.type in types
            )
        if len(page) < limit:
            break
        oldest = int(page[-1][2])
        newest = heapq.nlargest(limit, (record.global_position for record in found))
        if len(newest) == limit and newest[-1] >= oldest + span:
            break
    found.sort(key=lambda record: record.global_position)
    return found[-limit:]


def data_between(
    conn: sa.Connection, after: int, upper: int, kinds: Collection[str]
) -> Iterator[EventData]:
    """(position, type, data) of the packed records of `kinds` in (after, upper], in order.

    Streamed: rows come by first position and no later row holds a record before its
    first, so a record waits only while rows that start before it are still to come.
    What is held is the records of the rows that overlap (ticks running at once), not
    the range's: a first start's catch-up over a long history reads it in constant memory.
    """
    if not holds_types(kinds):
        return
    waiting: list[tuple[int, int, EventData]] = []
    order = count()
    for first, tick, blob in between(conn, after, upper, widest_span(conn)):
        while waiting and waiting[0][0] < first:
            yield heapq.heappop(waiting)[2]
        for item in unpack_data(tick, blob, after, upper, kinds):
            heapq.heappush(waiting, (item[0], next(order), item))
    while waiting:
        yield heapq.heappop(waiting)[2]


def positions_between(conn: sa.Connection, after: int, upper: int, span: int | None) -> list[int]:
    """The packed positions in (after, upper], in order; `span` as `between` takes it.

    Inside `positions_kept` a row's positions are decoded once (`_positions_of`).
    """
    if span is None or upper <= after:
        return []
    query = sa.select(
        tick_rows.c.tick_id,
        tick_rows.c.first_position,
        tick_rows.c.last_position,
        tick_rows.c.events,
        tick_rows.c.data,
    ).where(
        tick_rows.c.first_position > after - span,
        tick_rows.c.first_position <= upper,
        tick_rows.c.last_position > after,
    )
    store = str(conn.engine.url)
    found = [
        position
        for tick, first, last, held, blob in conn.execute(query)
        for position in _positions_of((store, tick, first, last, held), blob)
        if after < position <= upper
    ]
    found.sort()
    return found


def count_between(conn: sa.Connection, after: int, upper: int) -> int:
    """How many packed records lie in (after, upper].

    Rows wholly inside are counted by their `events`; only the few that straddle an end
    are decoded.
    """
    span = widest_span(conn)
    if span is None or upper <= after:
        return 0
    first, last = tick_rows.c.first_position, tick_rows.c.last_position
    inside = sa.select(sa.func.coalesce(sa.func.sum(tick_rows.c.events), 0)).where(
        first > after, first <= upper, last <= upper
    )
    straddling = sa.select(tick_rows.c.data).where(
        first > after - span, first <= upper, last > after, sa.or_(first <= after, last > upper)
    )
    ends = sum(
        after < position <= upper
        for blob in conn.execute(straddling).scalars()
        for position in positions(bytes(blob))
    )
    return int(conn.execute(inside).scalar_one()) + ends


@dataclass
class _Kept:
    """Rows' decoded positions, by (store, tick, first, last, records), while `positions_kept`."""

    rows: dict[tuple[str, str, int, int, int], list[int]] | None = None


_KEPT = _Kept()
POSITIONS_KEPT = 200_000
"""Rows whose positions `positions_kept` keeps decoded (~160 MB); then it starts afresh."""


@contextmanager
def positions_kept() -> Iterator[None]:
    """Keep rows' decoded positions while the block runs, for reads of one range again.

    A rebuild folds every read model over the same history, and each fold sizes its
    windows by the positions of every row it passes: kept, 1M events' rows are decoded
    once, not once per read model (a rebuild of 1M events' six read models took 25 s
    of CPU, 41 s without). Nothing is kept
    outside: a service's windows lie past what it decoded before, and kept rows would
    only grow with what it passed (a new read model's first fold at 10M events kept
    200,000 rows). Nested blocks share the outer one's.
    """
    if _KEPT.rows is not None:
        yield
        return
    _KEPT.rows = {}
    try:
        yield
    finally:
        _KEPT.rows = None


def _positions_of(key: tuple[str, str, int, int, int], blob: bytes) -> list[int]:
    """A row's positions, kept by (store, tick, first, last, records) inside `positions_kept`.

    A row written again (records added or taken out) changes its key.
    """
    kept = _KEPT.rows
    if kept is None:
        return positions(bytes(blob))
    found = kept.get(key)
    if found is None:
        if len(kept) >= POSITIONS_KEPT:
            kept.clear()
        found = kept[key] = positions(bytes(blob))
    return found


def reach_after(conn: sa.Connection, after: int, count: int, span: int | None) -> int:
    """A position by which at least `count` packed records lie after `after` (or UNBOUNDED).

    Rows by first position, counting their records: once `count` are counted, each of
    them lies at most `span` (the `widest_span` read by the caller) past the last row's
    first position.
    """
    found = None if span is None else _counted_to(conn, count, after)
    return UNBOUNDED if found is None or span is None else found + span


def rows_reach(conn: sa.Connection, after: int, count: int) -> int:
    """Where rows starting after `after` have counted `count` records (UNBOUNDED: fewer).

    The first position of the row that reaches the count, off the rows' counts alone:
    no row is decoded. A range ending there holds those rows' records (fewer, when a row
    reaches past its end) and those of the rows running at `after` that reach into it.
    """
    found = _counted_to(conn, count, after)
    return UNBOUNDED if found is None else found


def reach_before(conn: sa.Connection, count: int) -> int:
    """A position after which at least `count` packed records lie (0 when fewer are packed).

    Rows backwards by first position: every record of a row lies at or after its first.
    """
    found = _counted_to(conn, count)
    return 0 if found is None else found - 1


def _counted_to(conn: sa.Connection, count: int, after: int | None = None) -> int | None:
    """The first position of the row by which `count` records are counted (None: fewer).

    Rows in order of their first positions, a page at a time: forwards from `after`, or
    backwards from the last row.
    """
    key = tick_rows.c.first_position
    counted = 0
    last = after
    while True:
        query = sa.select(key, tick_rows.c.events)
        if after is None:
            page_of = query.where(key < last) if last is not None else query
            page_of = page_of.order_by(key.desc())
        else:
            page_of = query.where(key > last).order_by(key)
        page = conn.execute(page_of.limit(PAGE)).all()
        for first, held in page:
            counted += held
            if counted >= count:
                return int(first)
        if len(page) < PAGE:
            return None
        last = page[-1][0]


def first_since(conn: sa.Connection, when: datetime) -> int | None:
    """The first packed position recorded at or after `when` (None if there is none).

    The rows whose last record is that late, on the index of their last times (`+ 0`
    keeps SQLite from walking the primary key from its start instead): the one that
    starts first holds a record of the answer's, and only rows starting before that
    record can hold an earlier one.
    """
    late = tick_rows.c.last_recorded >= when
    first = conn.execute(sa.select(sa.func.min(tick_rows.c.first_position + 0)).where(late))
    start = first.scalar()
    if start is None:
        return None
    best: int | None = None
    query = sa.select(tick_rows.c.tick_id, tick_rows.c.data).where(
        late, tick_rows.c.first_position >= start
    )
    for tick, blob in conn.execute(query.where(tick_rows.c.first_position == start)).all():
        records = unpack(tick, bytes(blob))
        best = min((r.global_position for r in records if r.recorded_at >= when), default=None)
    if best is None:
        return None
    for tick, blob in conn.execute(query.where(tick_rows.c.first_position < best)).all():
        since = [r.global_position for r in unpack(tick, bytes(blob)) if r.recorded_at >= when]
        best = min(best, *since) if since else best
    return best


@dataclass(frozen=True)
class PackedIds:
    """The ids a packed stream's row holds, with their positions, at the row's version."""

    ids: dict[UUID, int]
    version: int


def packed_ids(conn: sa.Connection, stream_id: str) -> PackedIds | None:
    """The ids a packed stream's row holds (None: no row)."""
    tick = stream_tick(stream_id)
    if tick is None:
        return None
    query = sa.select(tick_rows.c.tick_id, tick_rows.c.data, tick_rows.c.version)
    found = by_tick(conn, query, [tick])
    if not found:
        return None
    row = found[0]
    records = unpack(tick, bytes(row.data))
    return PackedIds({r.event_id: r.global_position for r in records}, int(row.version))


def packed_version(conn: sa.Connection, stream_id: str) -> int | None:
    """The stream version a packed stream's row reached (None: no row)."""
    tick = stream_tick(stream_id)
    if tick is None:
        return None
    query = sa.select(tick_rows.c.tick_id, tick_rows.c.version)
    found = by_tick(conn, query, [tick])
    return int(found[0].version) if found else None


def holds_position(conn: sa.Connection, position: int) -> bool:
    """Whether a row holds the record at `position`."""
    return position in positions_between(conn, position - 1, position, widest_span(conn))


# --- compaction --------------------------------------------------------------------------


def compact(store: SqlEventStore, stopping: threading.Event | None = None) -> int:
    """Pack every tick ended since the last pass that every checkpoint has passed; how many.

    One transaction per window of the log, each with its checkpoint: a kill loses no
    pass's work and repeats none, and a stopping service (`stopping`) ends the pass
    between two windows (a backlog is minutes of them). The log's newest event is never
    packed.
    """
    ticks = 0
    releasing = store.engine.dialect.name == "postgresql"
    while stopping is None or not stopping.is_set():
        with store.tracking(CHECKPOINT) as tracking:
            limit = min(_others_passed(tracking.conn), tracking.horizon - 1)
            if tracking.position >= limit:
                return ticks
            upper = store.window(tracking.position, limit, WINDOW_EVENTS).end
            ended = {
                str(data["tick_id"])
                for _, _, data in store.read_window(tracking, TERMINAL_TYPES, upper)
                if "tick_id" in data
            }
            written, packed = move(tracking.conn, sorted(ended), upper)
            store.save_checkpoint(tracking, upper)
        ticks += written
        if releasing:
            releasing = release_ids(store, packed)
    return ticks


def release_ids(store: SqlEventStore, packed: Sequence[UUID]) -> bool:
    """Take ids packed by a committed window out of `event_ids` (PostgreSQL), when it is safe.

    An append whose statement took its snapshot before the window committed sees these
    records hot or not at all, and no row holding them: the unique key of `event_ids` is
    all that refuses a replay of one, so they leave it only once every append that
    started before the window committed has ended. An append still running after
    `APPENDS_WAIT` keeps them there, which costs only their bytes (`forget` takes them
    out when the ticks are archived); False then, and the pass stops waiting for it.
    """
    if not packed:
        return True
    if not appends_settled(store.engine, APPENDS_WAIT):
        return False
    with store.write_transaction() as conn:
        for at in range(0, len(packed), PAGE):
            _drop_ids(conn, packed[at : at + PAGE])
    return True


def _drop_ids(conn: sa.Connection, ids: Sequence[UUID | str]) -> None:
    """Delete `ids` from `event_ids` (PostgreSQL).

    One array, not an IN list: a thousand-long IN list cost psycopg more to parse than the
    server to run it.
    """
    conn.exec_driver_sql("DELETE FROM event_ids WHERE event_id = ANY(%s::uuid[])", (list(ids),))


def _others_passed(conn: sa.Connection) -> int:
    """Where every other checkpoint has passed (anywhere, while there is none).

    A projection folded later reads the packed records from its first fold: the
    checkpoints spare the folds that follow the log the rows' decoding.
    """
    query = sa.select(sa.func.min(projection_checkpoints.c.position)).where(
        projection_checkpoints.c.name != CHECKPOINT
    )
    found = conn.execute(query).scalar()
    return UNBOUNDED if found is None else int(found)


def move(conn: sa.Connection, tick_ids: Sequence[str], upper: int) -> tuple[int, list[UUID]]:
    """Pack the ticks' records up to `upper` into their rows; returns rows written, ids packed.

    A tick packed before (records appended since, or a transcript alone, packed before
    0020) gets its row written again with both.
    """
    written = 0
    packed: list[UUID] = []
    for start in range(0, len(tick_ids), PAGE):
        chunk = tick_ids[start : start + PAGE]
        found = _hot_records(conn, [f"{TICK_PREFIX}{tick}" for tick in chunk], upper)
        if not found:
            continue
        before = _rows(conn, list(found))
        rows = []
        for stream, records in found.items():
            tick = stream.removeprefix(TICK_PREFIX)
            old = before.get(tick)
            merged_ = with_compacted(records, [] if old is None else unpack(tick, old["data"]))
            rows.append(_row(tick, merged_, old))
        if before:
            old_keys = ((row["tick_id"], row["day"]) for row in before.values())
            conn.execute(tick_rows.delete().where(_same_rows(conn, old_keys)))
        conn.execute(tick_rows.insert(), rows)
        moved = [e for records in found.values() for e in records]
        positions_ = [e.global_position for e in moved]
        for at in range(0, len(positions_), PAGE):
            conn.execute(
                events.delete().where(events.c.global_position.in_(positions_[at : at + PAGE]))
            )
        packed += (e.event_id for e in moved)
        written += len(rows)
    return written, packed


def _row(tick: str, records: list[StoredEvent], old: dict[str, Any] | None) -> dict[str, Any]:
    """A tick row of `records` (not empty, stream order).

    `old`, the row they replace, keeps its day, its stream version and where its
    transcript went.
    """
    blob, count = pack(tick, records)
    return {
        "first_position": records[0].global_position,
        "tick_id": tick,
        "last_position": records[-1].global_position,
        "version": max(records[-1].stream_position, 0 if old is None else old["version"]),
        "events": count,
        "day": stored_utc(records[0].recorded_at).date() if old is None else old["day"],
        "last_recorded": max(r.recorded_at for r in records),
        "transcript": sum(r.type == TranscriptEntry.type for r in records),
        "archived_on": None if old is None else old["archived_on"],
        "data": blob,
    }


def _rows(conn: sa.Connection, streams: list[str]) -> dict[str, dict[str, Any]]:
    """The rows of these streams' ticks, by tick id."""
    ticks = [stream.removeprefix(TICK_PREFIX) for stream in streams]
    found = by_tick(conn, sa.select(tick_rows), ticks)
    return {row.tick_id: {**row._asdict(), "data": bytes(row.data)} for row in found}


def _hot_records(
    conn: sa.Connection, streams: list[str], upper: int
) -> dict[str, list[StoredEvent]]:
    """The streams' records still in `events`, up to `upper`, by stream, in stream order.

    Ordered: a row is made of them in stream order (`_row`: its first and last positions,
    its version, its day), and PostgreSQL gives a stream's records in the order of the
    pages that hold them, which a compaction's deletes and a VACUUM shuffle.
    """
    query = sa.select(
        events.c.global_position,
        events.c.event_id,
        events.c.stream_id,
        events.c.stream_position,
        events.c.type,
        events.c.version,
        events.c.data,
        events.c.metadata,
        events.c.recorded_at,
    ).where(events.c.stream_id.in_(streams), events.c.global_position <= upper)
    found: dict[str, list[StoredEvent]] = {}
    query = query.order_by(events.c.stream_id, events.c.stream_position)
    for row in conn.execute(query):
        stored = StoredEvent(*row[:8], stored_utc(row[8]))
        found.setdefault(stored.stream_id, []).append(stored)
    return found


# --- archiving ---------------------------------------------------------------------------


def row_starts(conn: sa.Connection, after: int, upper: int) -> list[tuple[int, str]]:
    """A page of the rows whose first position lies in (after, upper]: (first, stream)."""
    query = (
        sa.select(tick_rows.c.first_position, tick_rows.c.tick_id)
        .where(tick_rows.c.first_position > after, tick_rows.c.first_position <= upper)
        .order_by(tick_rows.c.first_position)
        .limit(PAGE)
    )
    return [(int(first), f"{TICK_PREFIX}{tick}") for first, tick in conn.execute(query)]


def rows_from(conn: sa.Connection, after: int, upper: int) -> list[tuple[int, str, bytes]]:
    """A page of the rows whose first position lies in (after, upper]: (first, tick, data)."""
    query = (
        sa.select(tick_rows.c.first_position, tick_rows.c.tick_id, tick_rows.c.data)
        .where(tick_rows.c.first_position > after, tick_rows.c.first_position <= upper)
        .order_by(tick_rows.c.first_position)
        .limit(PAGE)
    )
    return [(int(first), tick, bytes(blob)) for first, tick, blob in conn.execute(query)]


def row_spans(conn: sa.Connection, streams: Sequence[str]) -> dict[str, tuple[int, int]]:
    """The first and last packed positions of each of these streams that has a row."""
    ticks = [stream.removeprefix(TICK_PREFIX) for stream in streams]
    query = sa.select(tick_rows.c.tick_id, tick_rows.c.first_position, tick_rows.c.last_position)
    return {
        f"{TICK_PREFIX}{tick}": (int(first), int(last))
        for tick, first, last in by_tick(conn, query, ticks)
    }


def release(conn: sa.Connection, tick_ids: Iterable[str], day: date) -> tuple[int, int]:
    """PostgreSQL: the rows of these archived ticks begun on `day` let go of their ids and days.

    The rows themselves stay, to leave with their day's partition (`drop_rows_day`). Returns
    how many rows there are and the records they hold (outside the day's partition of
    `events`).
    """
    ids = list(tick_ids)
    rows = records = 0
    for start in range(0, len(ids), PAGE):
        query = sa.select(tick_rows.c.tick_id, tick_rows.c.events, tick_rows.c.data).where(
            tick_rows.c.tick_id.in_(ids[start : start + PAGE]), tick_rows.c.day == day
        )
        found = conn.execute(query).all()
        _let_go(conn, found)
        rows += len(found)
        records += sum(row.events for row in found)
    return rows, records


ROWS_LOCK_WAIT = "200ms"
"""How long `drop_rows_day` waits for its lock on `tick_rows`, under PostgreSQL's
`deadlock_timeout` (1 s): it holds `events` exclusively by then, so a reader holding
`tick_rows` and waiting for `events` would otherwise be a deadlock one of them dies of."""
LOCK_NOT_AVAILABLE = "55P03"


def drop_rows_day(conn: sa.Connection, day: date, expected: int) -> bool:
    """PostgreSQL: drop `day`'s partition of `tick_rows`, holding exactly `expected` rows.

    In the caller's transaction, once their ids and days were let go (`release`), after
    the day's partition of `events` left. False when it stays, with nothing of it
    changed: it holds a row the archive does not (a tick packed since), or the lock on
    `tick_rows` was not had in `ROWS_LOCK_WAIT`; the caller deletes the archived rows.
    """
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{ROWS_LOCK_WAIT}'")
            detached = detach(conn, TICK_ROWS, day, expected)
            conn.exec_driver_sql("SET LOCAL lock_timeout TO DEFAULT")
    except PartitionHeld:
        return False
    except sa.exc.OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        return False
    if detached:
        conn.exec_driver_sql(f"DROP TABLE {TICK_ROWS.partition(day)}")
    return True


def forget(conn: sa.Connection, tick_ids: Iterable[str], upto: int | None = None) -> int:
    """Delete the rows of archived ticks (those ending by `upto`, if given); records they held.

    On PostgreSQL their streams' day rows go, and any of their ids still in `event_ids`
    (packed before ids left it with their pass, or kept there by `release_ids`) leave it.
    """
    ids = list(tick_ids)
    postgres = conn.dialect.name == "postgresql"
    held = 0
    for start in range(0, len(ids), PAGE):
        # Only PostgreSQL needs the records' ids: SQLite's rows go unread.
        data = tick_rows.c.data if postgres else sa.null().label("data")
        query = sa.select(tick_rows.c.tick_id, tick_rows.c.day, tick_rows.c.events, data)
        if upto is not None:
            query = query.where(tick_rows.c.last_position <= upto)
        gone = by_tick(conn, query, ids[start : start + PAGE])
        if not gone:
            continue
        held += sum(row.events for row in gone)
        if postgres:
            _let_go(conn, gone)
        keys = ((row.tick_id, row.day) for row in gone)
        conn.execute(tick_rows.delete().where(_same_rows(conn, keys)))
    return held


def _let_go(conn: sa.Connection, rows: Sequence[Any]) -> None:
    """PostgreSQL: these rows' (tick_id, data) ids leave `event_ids` and their days `tick_streams`.

    The ids as the rows hold them (hex).
    """
    if not rows:
        return
    _drop_ids(conn, [record[1] for row in rows for record in records_of(bytes(row.data))[1]])
    conn.exec_driver_sql(
        "DELETE FROM tick_streams WHERE stream_id = ANY(%s)",
        ([f"{TICK_PREFIX}{row.tick_id}" for row in rows],),
    )


def footprint_rows(conn: sa.Connection, hot_started: set[str]) -> tuple[int, dict[date, int]]:
    """Records the rows hold, and the ticks packed whole (not started in `events`) by day."""
    count = 0
    days: dict[date, int] = {}
    for tick, day, held in conn.execute(
        sa.select(tick_rows.c.tick_id, tick_rows.c.day, tick_rows.c.events)
    ):
        count += held
        if f"{TICK_PREFIX}{tick}" not in hot_started:
            days[day] = days.get(day, 0) + 1
    return count, days


# --- transcripts leaving before their ticks ------------------------------------------------


HOLDS_TRANSCRIPT = tick_rows.c.transcript > sa.literal_column("0")
"""The predicate of the index of rows holding a transcript (migration 0028), written out:
a planner uses a partial index only for a condition that implies its own, and a bound
parameter (PostgreSQL's generic plan of a prepared statement) implies nothing."""


def hot_days(store: SqlEventStore, before: date) -> list[date]:
    """The days before `before` that have transcripts still in the hot store, oldest first.

    Read from the index of rows holding one (migration 0028): the rows whose transcripts
    left already are not read.
    """
    with store.read_transaction() as conn:
        query = (
            sa.select(tick_rows.c.day)
            .where(tick_rows.c.day < before, HOLDS_TRANSCRIPT)
            .distinct()
            .order_by(tick_rows.c.day)
        )
        return list(conn.execute(query).scalars())


def hot_transcripts(store: SqlEventStore, upto: date) -> Iterator[list[StoredEvent]]:
    """The hot transcripts of ticks started on or before `upto`, one tick's entries at a time.

    Day by day, keyed pages of the tick id within a day, along the index of rows holding
    a transcript (migration 0028): a pass costs its day (and the stragglers of earlier
    days), not the hot store; a day of 1.44M ticks is never held at once.
    """
    for day in hot_days(store, upto + timedelta(days=1)):
        last = ""
        while True:
            with store.read_transaction() as conn:
                query = (
                    sa.select(tick_rows.c.tick_id, tick_rows.c.data)
                    .where(
                        tick_rows.c.day == day,
                        HOLDS_TRANSCRIPT,
                        tick_rows.c.tick_id > last,
                    )
                    .order_by(tick_rows.c.tick_id)
                    .limit(PAGE)
                )
                page = conn.execute(query).all()
            for tick_id, blob in page:
                yield [r for r in unpack(tick_id, bytes(blob)) if r.type == TranscriptEntry.type]
            if len(page) < PAGE:
                break
            last = page[-1][0]


def drop_archived(store: SqlEventStore, day: date, held: Sequence[tuple[str, int]]) -> int:
    """Take out of their rows the transcripts an archive of `day` holds, as (tick, last position).

    In one transaction of its own. A row whose transcript's last position moved (entries
    packed into it since the archive was written) keeps it: the archive does not hold all
    of it. Rows dropped already are no-ops, so a drop cut short is simply run again.
    Returns the rows changed.
    """
    if not held:
        return 0
    wanted = dict(held)
    # The archive of `day` holds transcripts of ticks begun by then (`hot_transcripts`).
    query = sa.select(tick_rows).where(HOLDS_TRANSCRIPT, tick_rows.c.day <= day)
    changed = []
    with store.write_transaction() as conn:
        for row in by_tick(conn, query, list(wanted)):
            records = unpack(row.tick_id, bytes(row.data))
            entries = [r.global_position for r in records if r.type == TranscriptEntry.type]
            if max(entries) != wanted[row.tick_id]:
                continue
            kept = [r for r in records if r.type != TranscriptEntry.type]
            if kept:
                values = _row(row.tick_id, kept, row._asdict())
            else:  # a row packed before 0020 held its transcript alone: it stays, empty
                values = {**row._asdict(), "events": 0, "transcript": 0}
                values["data"] = pack(row.tick_id, [])[0]
            change = {name: values[name] for name in _REPACKED}
            changed.append({**change, "archived_on": day, "b_tick": row.tick_id, "b_day": row.day})
        if changed:  # one statement for the page: compiling an UPDATE per row cost more
            conn.execute(_REPACK, changed)
    return len(changed)


_REPACKED = (
    "first_position",
    "last_position",
    "version",
    "events",
    "last_recorded",
    "transcript",
    "archived_on",
    "data",
)
_REPACK = (
    tick_rows.update()
    .where(tick_rows.c.tick_id == sa.bindparam("b_tick"), tick_rows.c.day == sa.bindparam("b_day"))
    .values({name: sa.bindparam(name) for name in _REPACKED})
)


def relied_on(store: SqlEventStore, day: date) -> bool:
    """Whether a transcript left its row on the word of the archive of `day`."""
    with store.read_transaction() as conn:
        query = sa.select(tick_rows.c.tick_id).where(tick_rows.c.archived_on == day).limit(1)
        return conn.execute(query).first() is not None


def archived_on(store: EventStore, tick_id: str) -> date | None:
    """The day whose archive holds the transcript of a tick still hot (None: it is hot)."""
    with store.read_transaction() as conn:
        query = sa.select(tick_rows.c.tick_id, tick_rows.c.archived_on)
        found = by_tick(conn, query, [tick_id])
        return found[0].archived_on if found else None
