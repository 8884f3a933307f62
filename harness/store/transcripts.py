"""Transcripts in their own compact form: a closed tick's `TranscriptEntry` events as one row.

A transcript is most of a tick's bytes, and as events each item costs a row, four index
entries and its JSON keys spelled out again. Once a tick has ended its transcript does not
change, so `compact` moves its `TranscriptEntry` events out of `events` into one row of
`transcripts`: the stored records whole (global and stream positions, event ids, version,
data, metadata, recorded_at) as one zlib-compressed JSON array, in the same transaction as
their deletion, so a kill leaves them in one place, never both or neither.

The log reads the same: `read_stream` and `read_streams` put a tick's compacted entries
back in their places (`with_compacted`), so stories, `show --follow`, the tick page and the
API see the stream they saw before. No read model folds `TranscriptEntry`, so `projections
rebuild` (which reads positions, where compacted entries are no longer) reproduces every
read model. Redaction and caps were applied when the entries were recorded and are kept
as stored. An entry appended after its tick was compacted (a spool replayed late) stays in
`events` and is read beside the row, never twice.

Compaction follows the log with its own checkpoint (`CHECKPOINT`, beside the
projections'): a pass reads the terminal events committed since, and moves those ticks'
transcripts. The archive run catches it up first and, as for any checkpoint, keeps hot
what it has not passed. Later, transcripts older than `[retention] transcript_days` leave
for the day's archive (`harness.scheduling.archiving`): the row keeps no data, only the
day whose archive holds it (`archived_on`), until the tick itself is archived.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
import sqlalchemy as sa

from harness.contracts.events import TERMINAL_TYPES, TranscriptEntry
from harness.contracts.records import StoredEvent
from harness.store.base import EventStore
from harness.store.engine import stored_utc
from harness.store.partitions import delete_positions, partitioned
from harness.store.schema import events, transcripts

if TYPE_CHECKING:
    from harness.store.sql import SqlEventStore

CHECKPOINT = "transcripts"
"""The compaction's checkpoint, among the projections' (archiving waits for every one)."""
WINDOW_EVENTS = 5_000
"""Events one compaction transaction covers: ~370 ticks, a short hold of the write lock."""
TICK_PREFIX = "tick-"
PAGE = 1000
"""Rows read, written or deleted per statement."""
ZLIB_LEVEL = 6

Record = tuple[int, str, int, int, dict[str, Any], dict[str, Any], str]
"""A compacted entry: global and stream position, event id, version, data, metadata, time."""


def encode(entries: Iterable[StoredEvent]) -> bytes:
    """The entries as one compressed JSON array of records, in stream order."""
    records = [
        (
            e.global_position,
            str(e.event_id),
            e.stream_position,
            e.version,
            e.data,
            e.metadata,
            e.recorded_at.isoformat(),
        )
        for e in sorted(entries, key=lambda e: e.stream_position)
    ]
    return zlib.compress(orjson.dumps(records), ZLIB_LEVEL)


def decode(tick_id: str, blob: bytes) -> list[StoredEvent]:
    """The stored records a row holds, as `read_stream` gives them."""
    records: list[Record] = orjson.loads(zlib.decompress(blob))
    return [
        StoredEvent(
            position,
            UUID(event_id),
            f"{TICK_PREFIX}{tick_id}",
            stream_position,
            TranscriptEntry.type,
            version,
            data,
            metadata,
            datetime.fromisoformat(recorded_at),
        )
        for position, event_id, stream_position, version, data, metadata, recorded_at in records
    ]


def compacted(conn: sa.Connection, stream_ids: Iterable[str]) -> dict[str, list[StoredEvent]]:
    """The compacted entries of these streams (tick streams with a row holding data)."""
    ticks = [s.removeprefix(TICK_PREFIX) for s in stream_ids if s.startswith(TICK_PREFIX)]
    if not ticks:
        return {}
    query = sa.select(transcripts.c.tick_id, transcripts.c.data).where(
        transcripts.c.tick_id.in_(ticks), transcripts.c.data.is_not(None)
    )
    return {f"{TICK_PREFIX}{tick}": decode(tick, blob) for tick, blob in conn.execute(query)}


def with_compacted(
    found: list[StoredEvent], entries: list[StoredEvent], after: int = 0, limit: int | None = None
) -> list[StoredEvent]:
    """A stream's events read from `events`, with its compacted entries in their places.

    `found` is the first `limit` events after `after`; merged, the first `limit` of both
    are the stream's first `limit`. An entry in both (read while its row was written, or
    its id appended again by a late spool replay: `events` no longer holds the id to
    refuse it) is given once, in its first place.
    """
    if not entries:
        return found
    compacted_ids = {e.event_id for e in entries}
    merged = sorted(
        [
            *(e for e in found if e.event_id not in compacted_ids),
            *(e for e in entries if e.stream_position > after),
        ],
        key=lambda e: e.stream_position,
    )
    return merged if limit is None else merged[:limit]


def compact(store: SqlEventStore) -> int:
    """Compact the transcripts of every tick ended since the last pass; returns how many.

    One transaction per window of the log, each with its checkpoint: a kill loses no
    pass's work and repeats none.
    """
    ticks = 0
    while True:
        with store.tracking(CHECKPOINT) as tracking:
            if tracking.position >= tracking.horizon:
                return ticks
            upper = store.window(tracking.position, tracking.horizon, WINDOW_EVENTS).end
            ended = {
                str(data["tick_id"])
                for _, _, data in store.read_window(tracking, TERMINAL_TYPES, upper)
                if "tick_id" in data
            }
            ticks += move(tracking.conn, sorted(ended), upper)
            store.save_checkpoint(tracking, upper)


def move(conn: sa.Connection, tick_ids: Sequence[str], upper: int) -> int:
    """Move the ticks' transcript entries up to `upper` into their rows; returns rows written.

    A tick compacted before (entries replayed since) gets its row rewritten with both.
    """
    written = 0
    for start in range(0, len(tick_ids), PAGE):
        chunk = tick_ids[start : start + PAGE]
        streams = [f"{TICK_PREFIX}{tick}" for tick in chunk]
        found = _entries(conn, streams, upper)
        if not found:
            continue
        before = compacted(conn, found)
        days = _start_days(conn, list(found))
        rows = []
        for stream, entries in found.items():
            merged = with_compacted(entries, before.get(stream, []))
            rows.append(
                {
                    "tick_id": stream.removeprefix(TICK_PREFIX),
                    "day": days.get(stream) or stored_utc(merged[0].recorded_at).date(),
                    "entries": len(merged),
                    "last_position": max(e.global_position for e in merged),
                    "data": encode(merged),
                }
            )
        written_ids = [row["tick_id"] for row in rows]
        conn.execute(transcripts.delete().where(transcripts.c.tick_id.in_(written_ids)))
        conn.execute(transcripts.insert(), rows)
        positions = [e.global_position for entries in found.values() for e in entries]
        for at in range(0, len(positions), PAGE):
            batch = positions[at : at + PAGE]
            if partitioned(conn.engine):  # their ids leave `event_ids` with them
                delete_positions(conn, batch)
            else:
                conn.execute(events.delete().where(events.c.global_position.in_(batch)))
        written += len(rows)
    return written


def _entries(conn: sa.Connection, streams: list[str], upper: int) -> dict[str, list[StoredEvent]]:
    """The streams' transcript entries still in `events`, up to `upper`, by stream."""
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
    ).where(
        events.c.stream_id.in_(streams),
        events.c.type == TranscriptEntry.type,
        events.c.global_position <= upper,
    )
    found: dict[str, list[StoredEvent]] = {}
    for row in conn.execute(query):
        stored = StoredEvent(*row[:8], stored_utc(row[8]))
        found.setdefault(stored.stream_id, []).append(stored)
    return found


def _start_days(conn: sa.Connection, streams: list[str]) -> dict[str, date]:
    """The UTC day each stream started: the day its tick belongs to, hot and archived."""
    query = sa.select(events.c.stream_id, events.c.recorded_at).where(
        events.c.stream_id.in_(streams), events.c.stream_position == 1
    )
    return {stream: stored_utc(at).date() for stream, at in conn.execute(query)}


def hot_days(store: SqlEventStore, before: date) -> list[date]:
    """The days before `before` that have transcripts still in the hot store, oldest first."""
    with store.read_transaction() as conn:
        query = (
            sa.select(transcripts.c.day)
            .where(transcripts.c.day < before, transcripts.c.data.is_not(None))
            .distinct()
            .order_by(transcripts.c.day)
        )
        return list(conn.execute(query).scalars())


def hot_transcripts(store: SqlEventStore, upto: date) -> Iterator[list[StoredEvent]]:
    """The hot transcripts of ticks started on or before `upto`, one tick's entries at a time.

    Keyed pages of the primary key: a day of 1.44M ticks is never held at once.
    """
    last = ""
    while True:
        with store.read_transaction() as conn:
            query = (
                sa.select(transcripts.c.tick_id, transcripts.c.data)
                .where(
                    transcripts.c.day <= upto,
                    transcripts.c.data.is_not(None),
                    transcripts.c.tick_id > last,
                )
                .order_by(transcripts.c.tick_id)
                .limit(PAGE)
            )
            page = conn.execute(query).all()
        for tick_id, blob in page:
            yield decode(tick_id, blob)
        if len(page) < PAGE:
            return
        last = page[-1][0]


def drop_archived(conn: sa.Connection, day: date, held: Sequence[tuple[str, int]]) -> int:
    """Drop the data of transcripts an archive of `day` holds, as (tick id, last position).

    A row whose last position moved (entries replayed into it since the archive was
    written) keeps its data: the archive does not hold all of it. Already dropped rows are
    no-ops, so a drop cut short is simply run again. Returns the rows dropped.
    """
    if not held:
        return 0
    statement = (
        transcripts.update()
        .where(
            transcripts.c.tick_id == sa.bindparam("tick"),
            transcripts.c.last_position == sa.bindparam("last"),
            transcripts.c.data.is_not(None),
        )
        .values(data=None, archived_on=day)
    )
    return conn.execute(statement, [{"tick": t, "last": last} for t, last in held]).rowcount


def relied_on(store: SqlEventStore, day: date) -> bool:
    """Whether a transcript's data was dropped on the word of the archive of `day`."""
    with store.read_transaction() as conn:
        query = sa.select(transcripts.c.tick_id).where(transcripts.c.archived_on == day).limit(1)
        return conn.execute(query).first() is not None


def archived_on(store: EventStore, tick_id: str) -> date | None:
    """The day whose archive holds the transcript of a tick still hot (None: it is hot)."""
    with store.read_transaction() as conn:
        query = sa.select(transcripts.c.archived_on).where(
            transcripts.c.tick_id == tick_id, transcripts.c.data.is_(None)
        )
        found: date | None = conn.execute(query).scalar()
        return found


def forget(conn: sa.Connection, tick_ids: Iterable[str]) -> None:
    """Delete the rows of archived transcripts whose ticks leave the hot store too."""
    ids = list(tick_ids)
    for start in range(0, len(ids), PAGE):
        conn.execute(
            transcripts.delete().where(
                transcripts.c.tick_id.in_(ids[start : start + PAGE]), transcripts.c.data.is_(None)
            )
        )
