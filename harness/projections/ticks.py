"""The ticks read model: one row per tick with its status, times, tokens and tool calls.

Every query on the `ticks` table lives here, named for what its callers ask (a digest's,
over one period, in `harness.projections.periods`); the counters that move with its rows
in `harness.projections.tick_counts`.
"""

from __future__ import annotations

import heapq
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import islice
from typing import Any

import sqlalchemy as sa

from harness.contracts import (
    BudgetSpent,
    TickCancelled,
    TickCompleted,
    TickFailed,
    TickLost,
    TickScheduled,
    TickSkipped,
    TickStarted,
    TickTimedOut,
    ToolCalled,
)
from harness.projections.base import EventData, Projection, upsert
from harness.projections.calls import counted
from harness.projections.level_latest import (
    ENDED,
    Kept,
    Latest,
    naming,
    newest_statuses,
    note,
    tick_level_latest,
    write,
)
from harness.projections.tick_counts import STORED, Tally, roll_up
from harness.projections.tick_counts import TABLES as COUNTERS
from harness.store import EventStore, metadata
from harness.timespec import as_utc

UNKNOWN = "unknown"
"""Status of a tick whose spend arrived (say, from a spool) before its lifecycle events."""

IN_FLIGHT = ("scheduled", "running")
OPEN = (*IN_FLIGHT, UNKNOWN)
"""Statuses of a tick the read model has not seen end."""
OPEN_SQL = "status IN ({})".format(", ".join(f"'{status}'" for status in OPEN))
"""The predicate of the open ticks' partial index, which every query of open ticks states
as it is written here: SQLite uses a partial index only for a query that repeats its
WHERE term (`status IN ('scheduled', 'running')` alone would not do)."""

ticks = sa.Table(
    "ticks",
    metadata,
    sa.Column("tick_id", sa.String(200), primary_key=True),
    sa.Column("level", sa.String(100), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("slot", sa.DateTime(timezone=True)),
    sa.Column("scheduled_at", sa.DateTime(timezone=True)),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
    sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
    sa.Column("model_calls", sa.Integer(), nullable=False),
    sa.Column("estimated_calls", sa.Integer(), nullable=False),
    sa.Column("tool_calls", sa.Integer(), nullable=False),
    sa.Column("tool_calls_cancelled", sa.Integer(), nullable=False),
    sa.Column("result_path", sa.Text()),
    sa.Column("reason", sa.Text()),
    sa.Column("sort_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("model", sa.String(200)),
    sa.Column("queue_wait_seconds", sa.Float()),
    sa.Column("fire_lag_seconds", sa.Float()),
    sa.Column("attempts", sa.Integer()),
    sa.Column("manual", sa.Boolean()),
    sa.Index("ix_ticks_level_status", "level", "status", "finished_at"),
    sa.Index("ix_ticks_sort_at", "sort_at", "tick_id"),
    sa.Index("ix_ticks_level_sort_at", "level", "sort_at", "tick_id"),
    sa.Index("ix_ticks_level_slot", "level", "slot"),
    sa.Index("ix_ticks_open", "level", sqlite_where=sa.text(OPEN_SQL)),
)
"""Indexes (migration 0006): each list of ticks walks one in its order, and the in-flight
reads one that holds only open ticks, so no read of the model grows with its history.
PostgreSQL's open-ticks index has the same predicate (and its recorded_at index carries
the position), set by the migration alone: a `postgresql_` option here would import that
dialect for every SQLite command.

`model` (migration 0009): the model of the tick's last spend, else the one it was
scheduled for. `queue_wait_seconds`: from its claim to its first start, the wait for a
place (a retry's backoff is not in it).

`fire_lag_seconds` (migration 0026): how late its slot was claimed, from the slot's fire
time (`TickScheduled.fire_at`, the slot plus the level's jitter) to the claim; none for a
tick without a slot (manual) or claimed again (a later attempt is late on purpose).

`attempts` (migration 0030): the attempts it started (`TickStarted.attempt`, the highest);
`started_at` is its first start, so the time it took covers every attempt.

`manual` (migration 0035): started by hand (`TickScheduled.manual`), so the lists mark it
as the service log does (None: folded before it was kept, until a rebuild).
"""

tick_level_history = sa.Table(
    "tick_level_history",
    metadata,
    sa.Column("level", sa.String(100), primary_key=True),
    sa.Column("last_slot", sa.DateTime(timezone=True)),
    sa.Column("slots_run", sa.BigInteger(), nullable=False),
)
"""What the rows of a level's archived ticks said that outlives them (migration 0022):
its latest claimed slot (where start-up resumes) and how many of its slots ran (`max_runs`).
A tick's row leaves with its events (`forget_archived`), so the table of ticks holds the
hot store's ticks only and stops growing after `hot_days`; counts, spend and durations
live in their own per-level tables and never held a row per tick."""

STATUS_OF = {
    TickScheduled.type: "scheduled",
    TickStarted.type: "running",
    TickCompleted.type: "completed",
    TickFailed.type: "failed",
    TickTimedOut.type: "timed_out",
    TickCancelled.type: "cancelled",
    TickSkipped.type: "skipped",
    TickLost.type: "lost",
}
_TIME_COLUMN = {TickScheduled.type: "scheduled_at", TickStarted.type: "started_at"}
_SET = (
    "level",
    "slot",
    "scheduled_at",
    "started_at",
    "finished_at",
    "result_path",
    "reason",
    "model",
    "fire_lag_seconds",
    "attempts",
    "manual",
)
_FIRST = ("started_at",)
"""Set once: a retried tick's row keeps its first start, so its run time covers every
attempt."""
_ADD = (
    "prompt_tokens",
    "completion_tokens",
    "model_calls",
    "estimated_calls",
    "tool_calls",
    "tool_calls_cancelled",
)


_SORTED_BY = ("scheduled_at", "started_at", "finished_at")
"""A tick's time in lists: when it was scheduled, else started, else ended."""


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _fire_lag(claim: dict[str, Any], claimed: datetime | None) -> float | None:
    """Seconds from the slot's fire time to its claim, for a first attempt of a slot."""
    if claimed is None or not claim.get("slot") or claim.get("attempt", 1) != 1:
        return None
    fired = datetime.fromisoformat(claim.get("fire_at") or claim["slot"])
    return (claimed - fired).total_seconds()


def _sort_time(row: dict[str, Any]) -> datetime:
    """The first of `_SORTED_BY` the row has, else when its first event happened.

    The fallback dates a tick known only from its spend (spooled before its lifecycle
    events); a later batch keeps the earlier row's, so however the log is cut into
    batches the column ends the same, as a rebuild must.
    """
    when: datetime = next(
        (row[name] for name in _SORTED_BY if row[name] is not None), row["sort_at"]
    )
    return when


class TicksProjection(Projection):
    """One row per tick with its latest status and totals, for status views and scheduling."""

    name = "ticks"
    types = frozenset({*STATUS_OF, BudgetSpent.type, ToolCalled.type})
    tables = (ticks, tick_level_history, tick_level_latest, *COUNTERS)

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """Merge the batch's events per tick first, so each tick's row is written once per batch.

        The counters (`harness.projections.tick_counts`) move with the rows: the rows the
        batch changes are read as they stood before it, in the same transaction.
        """
        rows: dict[str, dict[str, Any]] = {}
        tally = Tally()
        claims_and_starts: dict[str, list[tuple[bool, datetime]]] = defaultdict(list)
        for _, type_, data in batch:
            tick_id, level = data["tick_id"], data["level"]
            row = rows.get(tick_id)
            if row is None:
                row = rows[tick_id] = {
                    "tick_id": tick_id,
                    "status": UNKNOWN,
                    **dict.fromkeys(_SET),
                    **dict.fromkeys(_FIRST),
                    **dict.fromkeys(_ADD, 0),
                    "queue_wait_seconds": None,
                    "sort_at": _time(data["occurred_at"]),
                }
            row["level"] = level
            tally.levels.add(level)
            added = counted(type_, data)
            for count in added:
                row[count] += 1
            if type_ == BudgetSpent.type:
                row["model"] = data["model"]
                row["prompt_tokens"] += data["prompt_tokens"]
                row["completion_tokens"] += data["completion_tokens"]
            if "tool_calls_cancelled" in added:
                tally.refusal(tick_id, level)
            if added:
                continue
            row["status"] = STATUS_OF[type_]
            column = _TIME_COLUMN.get(type_, "finished_at")
            when = _time(data["occurred_at"])
            if column not in _FIRST or row[column] is None:
                row[column] = when
            if type_ == TickStarted.type:
                row["attempts"] = data.get("attempt", 1)
            if column != "scheduled_at" and when is not None:
                tally.timed(tick_id, level, when, start=column == "started_at")
            if column != "finished_at" and when is not None:
                claims_and_starts[tick_id].append((column == "started_at", when))
            if type_ == TickScheduled.type:
                row["model"] = data.get("model") or row["model"]
                row["manual"] = bool(data.get("manual"))
                lag = _fire_lag(data, when)
                if lag is not None:
                    row["fire_lag_seconds"] = lag
            if data.get("slot"):
                row["slot"] = _time(data["slot"])
            for name in ("result_path", "reason"):
                if data.get(name):
                    row[name] = data[name]
        if not rows:
            return
        old = _stored(conn, list(rows))
        for tick_id, row in rows.items():
            if row["status"] == UNKNOWN and tick_id in old:
                row["status"] = old[tick_id]["status"]
            row["sort_at"] = _sort_time(row)
            row["queue_wait_seconds"] = _queue_wait(old.get(tick_id), claims_and_starts[tick_id])
        tally.write(conn, rows, old)
        insert = upsert(conn, ticks)
        new, old_row = insert.excluded, ticks.c
        changes: dict[str, Any] = {
            "status": new.status,
            **{name: sa.func.coalesce(new[name], old_row[name]) for name in _SET},
            **{name: sa.func.coalesce(old_row[name], new[name]) for name in _FIRST},
            **{name: old_row[name] + new[name] for name in _ADD},
            "queue_wait_seconds": sa.func.coalesce(
                old_row.queue_wait_seconds, new.queue_wait_seconds
            ),
        }
        # The list time of the row as written: a kept first start, not the batch's later one.
        changes["sort_at"] = sa.func.coalesce(
            *(changes[name] for name in _SORTED_BY), old_row.sort_at
        )
        stored = conn.execute(
            insert.on_conflict_do_update(index_elements=["tick_id"], set_=changes).returning(
                ticks.c.tick_id, ticks.c.sort_at, ticks.c.status, ticks.c.finished_at
            ),
            list(rows.values()),
        )
        levels = {tick_id: row["level"] for tick_id, row in rows.items()}
        moved = {
            old[t]["level"]
            for t, level in levels.items()
            if old.get(t, {}).get("level", level) != level
        }
        note(conn, [_latest(*row) for row in stored], levels, moved, _refind)

    def archived(self, conn: sa.Connection, day: date, tick_ids: Iterable[str]) -> None:
        """The ticks' rows leave with their events; the hour counts up to the day, as days.

        Hourly detail stays for the hot days, daily totals for the archived ones
        (`roll_up`); rows per tick leave (`forget_archived`).
        """
        forget_archived(conn, tick_ids)
        roll_up(conn, day + timedelta(days=1))


def _latest(tick_id: str, sort_at: datetime, status: str, finished_at: datetime | None) -> Latest:
    return Latest(tick_id, as_utc(sort_at), status, as_utc(finished_at))


def _refind(conn: sa.Connection, levels: list[str]) -> Kept:
    """Each level's newest and newest ended tick, from the end of its (level, list time) index.

    For the few levels whose kept ticks the fold cannot settle (`level_latest.note`).
    """
    columns = (ticks.c.tick_id, ticks.c.sort_at, ticks.c.status, ticks.c.finished_at)
    newest = sa.select(*columns).order_by(ticks.c.sort_at.desc(), ticks.c.tick_id.desc()).limit(1)
    found: Kept = {}
    for level in levels:
        mine = newest.where(ticks.c.level == level)
        last, ended = (
            conn.execute(query).first() for query in (mine, mine.where(ticks.c.status.in_(ENDED)))
        )
        found[level] = (
            None if last is None else _latest(*last),
            None if ended is None else _latest(*ended),
        )
    return found


def settle_latest(conn: sa.Connection, levels: list[str]) -> None:
    """Set the levels' newest and newest ended ticks (`tick_level_latest`) from the table.

    After their kept ticks' rows left it, or rows were written around the fold (tests).
    """
    if levels:
        write(conn, _refind(conn, levels))


def forget_archived(conn: sa.Connection, tick_ids: Iterable[str]) -> None:
    """Delete archived ticks' rows, keeping what outlives them in `tick_level_history`.

    A slot counts as run once: a slot whose other tick (a twin, a panel's) is still hot
    and ran is counted when that one leaves. Counts per status, spend and run times are in
    their own tables and stay as they were.
    """
    wanted = list(tick_ids)
    last: dict[str, datetime] = {}
    ran: dict[str, set[datetime]] = defaultdict(set)
    for start in range(0, len(wanted), IDS_PER_QUERY):
        chosen = ticks.c.tick_id.in_(wanted[start : start + IDS_PER_QUERY])
        found = conn.execute(sa.select(ticks.c.level, ticks.c.slot, ticks.c.status).where(chosen))
        for level, slot, status in found:
            if slot is None:
                continue
            slot = as_utc(slot)
            last[level] = max(last.get(level, slot), slot)
            if status != "skipped":
                ran[level].add(slot)
        conn.execute(ticks.delete().where(chosen))
    settle_latest(conn, naming(conn, set(wanted)))
    if not last:
        return
    stored = {
        level: (as_utc(slot) if slot is not None else None, runs)
        for level, slot, runs in conn.execute(
            sa.select(tick_level_history).where(tick_level_history.c.level.in_(list(last)))
        )
    }
    still_hot = _slots_run_hot(conn, ran)
    rows = []
    for level, slot in last.items():
        before_slot, before_runs = stored.get(level, (None, 0))
        counted = {run for run in ran[level] if (level, run) not in still_hot}
        rows.append(
            {
                "level": level,
                "last_slot": slot if before_slot is None else max(slot, before_slot),
                "slots_run": before_runs + len(counted),
            }
        )
    insert = upsert(conn, tick_level_history)
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=["level"],
            set_={"last_slot": insert.excluded.last_slot, "slots_run": insert.excluded.slots_run},
        ),
        rows,
    )


def _slots_run_hot(
    conn: sa.Connection, ran: Mapping[str, set[datetime]]
) -> set[tuple[str, datetime]]:
    """Which (level, slot) of `ran` a tick still in the table ran.

    A statement per thousand slots, not one per level: an archive batch holds ticks of
    every level.
    """
    held: set[tuple[str, datetime]] = set()
    slots = sorted({slot for runs in ran.values() for slot in runs})
    for start in range(0, len(slots), IDS_PER_QUERY):
        query = sa.select(ticks.c.level, ticks.c.slot).where(
            ticks.c.level.in_(list(ran)),
            ticks.c.slot.in_(slots[start : start + IDS_PER_QUERY]),
            ticks.c.status != "skipped",
        )
        held |= {(level, as_utc(slot)) for level, slot in conn.execute(query)}
    return held


def _queue_wait(
    before: Mapping[str, Any] | None, claims_and_starts: Iterable[tuple[bool, datetime]]
) -> float | None:
    """The tick's queue wait once its row has one: kept, or set by the batch's events.

    `claims_and_starts`: (is a start, when) of the batch's claims and starts, in order.
    """
    if before is not None and before["queue_wait_seconds"] is not None:
        waited: float = before["queue_wait_seconds"]
        return waited
    return queue_wait(None if before is None else before["scheduled_at"], claims_and_starts)


def queue_wait(
    claimed: datetime | None, claims_and_starts: Iterable[tuple[bool, datetime]]
) -> float | None:
    """Seconds from a tick's claim to its first start: how long it waited for a place.

    Defined per event in the log's order, so a rebuild gives what the incremental fold
    gave however the log is cut into batches: the first start that follows a claim
    (`claimed`, known before the events, or one of them) sets it; a start before any
    claim does not. A start before its claim's time (clocks of two hosts) waited 0 s.
    """
    for start, when in claims_and_starts:
        if not start:
            claimed = when
        elif claimed is not None:
            return max(0.0, (as_utc(when) - as_utc(claimed)).total_seconds())
    return None


def _stored(conn: sa.Connection, tick_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The stored rows of these ticks: the columns the counters move from, and the queue wait."""
    found: dict[str, dict[str, Any]] = {}
    columns = (*STORED, "queue_wait_seconds")
    for start in range(0, len(tick_ids), IDS_PER_QUERY):
        query = sa.select(ticks.c.tick_id, *(ticks.c[name] for name in columns)).where(
            ticks.c.tick_id.in_(tick_ids[start : start + IDS_PER_QUERY])
        )
        for row in conn.execute(query):
            found[row.tick_id] = row._asdict()
    return found


IDS_PER_QUERY = 1000
"""Tick ids per lookup, well under either driver's cap on bound parameters."""


STATUSES = (UNKNOWN, *dict.fromkeys(STATUS_OF.values()))
"""Every status a row of the read model can have."""


@dataclass(frozen=True)
class TickCursor:
    """Where a page of ticks ended: the last row's list time and id, the keyset's key.

    Written `<UTC time>,<tick id>` (`2026-12-01T13:05:00.123456Z,min-…`): the next page
    starts strictly after it, however many ticks came in meanwhile.
    """

    at: datetime
    tick_id: str

    @classmethod
    def after(cls, row: TickRow) -> TickCursor:
        """The cursor just past a row of a `tick_page`."""
        return cls(as_utc(row.sort_at), row.tick_id)

    @classmethod
    def parse(cls, text: str) -> TickCursor:
        """Read a cursor as `str` writes it; a ValueError says what is wrong."""
        stamp, comma, tick_id = text.partition(",")
        if not comma or not tick_id:
            raise ValueError(
                "a tick cursor is `<UTC time>,<tick id>`, as a page's next link has it"
            )
        try:
            at = datetime.fromisoformat(stamp)
        except ValueError:
            raise ValueError(f"{stamp!r} is not an ISO time") from None
        if at.tzinfo is None:
            raise ValueError(f"{stamp!r} has no time zone (a cursor's time ends in Z)")
        return cls(as_utc(at), tick_id)

    def __str__(self) -> str:
        """The cursor as `parse` reads it, its time in UTC with microseconds and a Z."""
        return f"{self.at.isoformat(timespec='microseconds').replace('+00:00', 'Z')},{self.tick_id}"


@dataclass(frozen=True, slots=True)
class TickRow:
    """A row of the ticks read model."""

    tick_id: str
    level: str
    status: str
    slot: datetime | None
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    prompt_tokens: int
    completion_tokens: int
    model_calls: int
    estimated_calls: int
    tool_calls: int
    tool_calls_cancelled: int
    result_path: str | None
    reason: str | None
    sort_at: datetime
    model: str | None
    queue_wait_seconds: float | None
    fire_lag_seconds: float | None
    attempts: int | None
    manual: bool | None

    @classmethod
    def of(cls, row: sa.Row[Any]) -> TickRow:
        """The row as the `ticks` table's columns name it."""
        return cls(**row._mapping)


@dataclass(frozen=True)
class TickPage:
    """A page of ticks and the cursor of the page after it (None: the last page)."""

    rows: list[TickRow]
    following: TickCursor | None


def tick_page(
    store: EventStore,
    *,
    levels: Iterable[str] | None = None,
    status: str | None = None,
    since: datetime | None = None,
    before: TickCursor | None = None,
    tick_id: str | None = None,
    limit: int = 100,
) -> TickPage:
    """Ticks of the read model, newest first (by when they were scheduled, else started).

    What `tickwork ticks` and `GET /ticks` list, a keyset page at a time: `since` keeps
    ticks scheduled (or, for a tick whose scheduling is unknown, started, ended or first
    spending) at or after that time; `before` the ticks after a cursor (the page
    before's `following`, `TickCursor.after` its last row). Each query walks an index in
    its order and stops after `limit` rows; several levels are one such walk each,
    merged. A page shorter than `limit` is the last.
    """
    query = sa.select(ticks).order_by(ticks.c.sort_at.desc(), ticks.c.tick_id.desc()).limit(limit)
    if status is not None:
        query = query.where(ticks.c.status == status)
    if since is not None:
        query = query.where(ticks.c.sort_at >= since)
    if before is not None:
        # The first term bounds the index range; the second drops the cursor's equals.
        query = query.where(
            ticks.c.sort_at <= before.at,
            sa.or_(ticks.c.sort_at < before.at, ticks.c.tick_id < before.tick_id),
        )
    if tick_id is not None:
        query = query.where(ticks.c.tick_id == tick_id)
    with store.read_transaction() as conn:
        if levels is None:
            rows = [TickRow.of(row) for row in conn.execute(query)]
        else:
            pages = [conn.execute(query.where(ticks.c.level == level)) for level in set(levels)]
            newest = heapq.merge(*pages, key=lambda row: (row.sort_at, row.tick_id), reverse=True)
            rows = [TickRow.of(row) for row in islice(newest, limit)]
    return TickPage(rows, TickCursor.after(rows[-1]) if len(rows) == limit else None)


def tick_ids_starting(store: EventStore, prefix: str, limit: int) -> list[str]:
    """Ids of the read model's ticks that begin with `prefix` (taken literally), in order.

    A range of the primary key, ordered by code point on both databases (on PostgreSQL
    the column's collation is "C", migration 0006): `LIKE` would scan every id, SQLite's
    being case-insensitive and PostgreSQL's needing the "C" collation to use an index.
    """
    query = sa.select(ticks.c.tick_id).order_by(ticks.c.tick_id).limit(limit)
    if prefix:
        query = query.where(ticks.c.tick_id >= prefix)
        end = _prefix_end(prefix)
        if end is not None:
            query = query.where(ticks.c.tick_id < end)
    with store.read_transaction() as conn:
        return list(conn.execute(query).scalars())


def _prefix_end(prefix: str) -> str | None:
    """The first string past every string that starts with `prefix` (None: no such end)."""
    while prefix:
        last = ord(prefix[-1])
        if last < sys.maxunicode:
            return prefix[:-1] + chr(last + 1)
        prefix = prefix[:-1]
    return None


@dataclass(frozen=True)
class TickInFlight:
    """A tick still holding a place, with the times needed to report its wait and runtime."""

    tick_id: str
    level: str
    status: str
    """`scheduled` (waiting for a place) or `running`."""
    scheduled_at: datetime | None
    started_at: datetime | None

    def waited(self, now: datetime) -> float | None:
        """Seconds from claim to start (or to now): how long the tick waited for a place."""
        if self.scheduled_at is None:
            return None
        return ((self.started_at or now) - self.scheduled_at).total_seconds()

    def runtime(self, now: datetime) -> float | None:
        """Seconds the tick has been running, to spot one that nears its timeout."""
        return None if self.started_at is None else (now - self.started_at).total_seconds()


def ticks_in_flight(store: EventStore, levels: Iterable[str] | None = None) -> list[TickInFlight]:
    """Ticks scheduled or running (of `levels` only, if given), as the read model has them."""
    query = (
        sa.select(
            ticks.c.tick_id, ticks.c.level, ticks.c.status, ticks.c.scheduled_at, ticks.c.started_at
        )
        .where(sa.text(OPEN_SQL), ticks.c.status.in_(IN_FLIGHT))
        .order_by(ticks.c.scheduled_at)
    )
    if levels is not None:
        query = query.where(ticks.c.level.in_(list(levels)))
    with store.read_transaction() as conn:
        return [
            TickInFlight(
                row.tick_id, row.level, row.status, as_utc(row.scheduled_at), as_utc(row.started_at)
            )
            for row in conn.execute(query)
        ]


def fire_lags(store: EventStore, limit: int) -> list[tuple[str, float]]:
    """(level, seconds) of the fire lags among the newest `limit` ticks, newest first.

    Only a slot's first claim has one. The end of the list-time index, whatever the
    history holds; rows folded before migration 0026 have no lag.
    """
    query = (
        sa.select(ticks.c.level, ticks.c.fire_lag_seconds)
        .order_by(ticks.c.sort_at.desc(), ticks.c.tick_id.desc())
        .limit(limit)
    )
    with store.read_transaction() as conn:
        return [(level, lag) for level, lag in conn.execute(query) if lag is not None]


def open_ticks(store: EventStore) -> list[tuple[str, str]]:
    """(tick id, level) of every tick the read model has not seen end, unknown ones included."""
    query = sa.select(ticks.c.tick_id, ticks.c.level).where(sa.text(OPEN_SQL))
    with store.read_transaction() as conn:
        return [(tick_id, level) for tick_id, level in conn.execute(query)]


def per_level(conn: sa.Connection, levels: Iterable[str], value: str) -> sa.TextClause:
    """`SELECT level, (value) FROM` the levels, `value` a subquery of one level (`l.value`).

    One statement for any number of levels, each looked up on its own: a GROUP BY over
    every level would read every tick, and a query per level would cost a round trip
    each (0.15 s for 1,000 levels on PostgreSQL). The levels travel as one array.
    """
    wanted = list(levels)
    parameter: list[str] | str = wanted
    listed = "unnest(CAST(:levels AS varchar[])) AS l (value)"
    if conn.dialect.name != "postgresql":
        listed, parameter = "json_each(:levels) AS l", json.dumps(wanted)
    return sa.text(f"SELECT l.value, ({value}) FROM {listed}").bindparams(levels=parameter)


def last_slots(store: EventStore, levels: Iterable[str]) -> dict[str, datetime]:
    """Each of `levels`' latest claimed slot; a level that never had a scheduled tick is absent.

    One lookup at the end of the (level, slot) index per level (`per_level`).
    """
    wanted = list(levels)
    with store.read_transaction() as conn:
        query = per_level(conn, wanted, "SELECT MAX(slot) FROM ticks WHERE level = l.value")
        found = conn.execute(query.columns(sa.column("level", sa.String()), ticks.c.slot))
        last = {level: as_utc(slot) for level, slot in found if slot is not None}
        archived = sa.select(tick_level_history.c.level, tick_level_history.c.last_slot).where(
            tick_level_history.c.level.in_(wanted), tick_level_history.c.last_slot.is_not(None)
        )
        for level, slot in conn.execute(archived):
            last[level] = max(last.get(level, as_utc(slot)), as_utc(slot))
    return last


def last_statuses(store: EventStore, levels: Iterable[str]) -> dict[str, str]:
    """Each of `levels`' newest tick's status; a level without a tick is absent.

    A row a level of `tick_level_latest`, kept by the fold: no walk of the ticks' index.
    """
    with store.read_transaction() as conn:
        return newest_statuses(conn, levels)


@dataclass(frozen=True, slots=True)
class TickMark:
    """A tick as a timeline draws it: its id, status, (for a failure) reason, and list time."""

    tick_id: str
    status: str
    reason: str | None
    at: datetime
    """When it was scheduled (or, failing that, started or ended): its place on the axis."""


def recent_ticks(conn: sa.Connection, levels: Sequence[str], n: int) -> dict[str, list[TickMark]]:
    """The newest `n` ticks of each of `levels`, newest first, in one statement.

    One walk of the (level, list time) index per level, each stopped after `n` entries
    (a UNION ALL of them), so the answer costs levels times `n` whatever the history. A
    UNION ALL promises no order: each level's rows are put in theirs here.
    """
    wanted = list(dict.fromkeys(levels))
    if not wanted:
        return {}
    columns = (ticks.c.level, ticks.c.sort_at, ticks.c.tick_id, ticks.c.status, ticks.c.reason)
    newest = (ticks.c.sort_at.desc(), ticks.c.tick_id.desc())
    each = [
        sa.select(*columns).where(ticks.c.level == level).order_by(*newest).limit(n).subquery()
        for level in wanted
    ]
    rows: dict[str, list[tuple[Any, ...]]] = {level: [] for level in wanted}
    for level, *row in conn.execute(sa.union_all(*(sa.select(*page.c) for page in each))):
        rows[level].append(tuple(row))
    return {
        level: [
            TickMark(tick_id, status, reason, as_utc(at))
            for at, tick_id, status, reason in sorted(found, reverse=True)
        ]
        for level, found in rows.items()
    }


def previous_result_path(store: EventStore, level: str) -> str | None:
    """The result file of the level's last completed tick (None before the first)."""
    query = (
        sa.select(ticks.c.result_path)
        .where(ticks.c.level == level, ticks.c.status == "completed")
        .order_by(ticks.c.finished_at.desc())
        .limit(1)
    )
    with store.read_transaction() as conn:
        path: str | None = conn.execute(query).scalar()
    return path


STATUS_CHUNK = 500
"""Tick ids looked up in one query (a backfill's range is read in a few)."""


def tick_statuses(store: EventStore, tick_ids: Sequence[str]) -> dict[str, str]:
    """The status of each of `tick_ids` the read model has: absent, no tick was claimed.

    Lookups by primary key, so the cost is that of the ids asked, not of the history
    (a backfill's progress asks for its range's slots).
    """
    found: dict[str, str] = {}
    with store.read_transaction() as conn:
        for start in range(0, len(tick_ids), STATUS_CHUNK):
            chunk = list(tick_ids[start : start + STATUS_CHUNK])
            query = sa.select(ticks.c.tick_id, ticks.c.status).where(ticks.c.tick_id.in_(chunk))
            found.update((tick_id, status) for tick_id, status in conn.execute(query))
    return found


def slots_run(conn: sa.Connection, level: str, limit: int) -> int:
    """How many of the level's slots ran (not skipped), counted up to `limit`: `max_runs`.

    A slot counts once however many ticks it had (a panel's, a hedge's twin); ticks
    started by hand have no slot and do not count. The count stops at `limit`, along the
    (level, slot) index, after the slots of its archived ticks (`tick_level_history`).
    """
    archived = conn.execute(
        sa.select(tick_level_history.c.slots_run).where(tick_level_history.c.level == level)
    ).scalar()
    before = int(archived or 0)
    if before >= limit:
        return limit
    ran = (
        sa.select(ticks.c.slot)
        .where(ticks.c.level == level, ticks.c.slot.is_not(None), ticks.c.status != "skipped")
        .distinct()
        .limit(limit - before)
        .subquery()
    )
    return before + int(conn.execute(sa.select(sa.func.count()).select_from(ran)).scalar_one())


def runs_of(store: EventStore, limits: Mapping[str, int]) -> dict[str, int]:
    """Each level's slots that ran, counted up to its limit (`slots_run`), in one read."""
    with store.read_transaction() as conn:
        return {level: slots_run(conn, level, limit) for level, limit in limits.items()}


def latest_ticks(store: EventStore, levels: Sequence[str], n: int) -> dict[str, list[TickMark]]:
    """`recent_ticks` in a read of its own."""
    with store.read_transaction() as conn:
        return recent_ticks(conn, levels, n)
