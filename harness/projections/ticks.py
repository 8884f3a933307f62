"""The ticks read model: one row per tick with its status, times, tokens and tool calls.

Every query on the `ticks` table lives here, named for what its callers ask (a digest's,
over one period, in `harness.projections.periods`); the counters that move with its rows
in `harness.projections.tick_counts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa

from harness.projections.base import EventData, Projection, upsert
from harness.projections.tick_counts import STORED, Tally
from harness.projections.tick_counts import TABLES as COUNTERS
from harness.store import EventStore
from harness.store.schema import metadata
from harness.timespec import as_utc

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
    sa.Column("archived_on", sa.Date()),
    sa.Index("ix_ticks_level_status", "level", "status"),
)

MARK_SLICE = 1000
"""Tick ids in one UPDATE's IN list, under the drivers' parameter caps."""

UNKNOWN = "unknown"
"""Status of a tick whose spend arrived (say, from a spool) before its lifecycle events."""

STATUS_OF = {
    "TickScheduled": "scheduled",
    "TickStarted": "running",
    "TickCompleted": "completed",
    "TickFailed": "failed",
    "TickTimedOut": "timed_out",
    "TickCancelled": "cancelled",
    "TickSkipped": "skipped",
    "TickLost": "lost",
}
_TIME_COLUMN = {"TickScheduled": "scheduled_at", "TickStarted": "started_at"}
_SET = ("level", "slot", "scheduled_at", "started_at", "finished_at", "result_path", "reason")
_ADD = (
    "prompt_tokens",
    "completion_tokens",
    "model_calls",
    "estimated_calls",
    "tool_calls",
    "tool_calls_cancelled",
)


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


class TicksProjection(Projection):
    """One row per tick with its latest status and totals, for status views and scheduling."""

    name = "ticks"
    types = frozenset({*STATUS_OF, "BudgetSpent", "ToolCalled"})
    tables = (ticks, *COUNTERS)

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """Merge the batch's events per tick first, so each tick's row is written once per batch.

        The counters (`harness.projections.tick_counts`) move with the rows: the rows the
        batch changes are read as they stood before it, in the same transaction.
        """
        rows: dict[str, dict[str, Any]] = {}
        tally = Tally()
        for _, type_, data in batch:
            tick_id, level = data["tick_id"], data["level"]
            row = rows.get(tick_id)
            if row is None:
                row = rows[tick_id] = {
                    "tick_id": tick_id,
                    "status": UNKNOWN,
                    **dict.fromkeys(_SET),
                    **dict.fromkeys(_ADD, 0),
                }
            row["level"] = level
            tally.levels.add(level)
            if type_ == "BudgetSpent":
                row["prompt_tokens"] += data["prompt_tokens"]
                row["completion_tokens"] += data["completion_tokens"]
                row["model_calls"] += 1
                row["estimated_calls"] += data["estimated"]
                continue
            if type_ == "ToolCalled":
                cancelled = data["status"] == "cancelled"
                row["tool_calls_cancelled" if cancelled else "tool_calls"] += 1
                if cancelled:
                    tally.refusal(tick_id, level)
                continue
            row["status"] = STATUS_OF[type_]
            column = _TIME_COLUMN.get(type_, "finished_at")
            row[column] = when = _time(data["occurred_at"])
            if column != "scheduled_at" and when is not None:
                tally.timed(tick_id, level, when, start=column == "started_at")
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
        tally.write(conn, rows, old)
        insert = upsert(conn, ticks)
        new, old_row = insert.excluded, ticks.c
        changes: dict[str, Any] = {
            "status": new.status,
            **{name: sa.func.coalesce(new[name], old_row[name]) for name in _SET},
            **{name: old_row[name] + new[name] for name in _ADD},
        }
        conn.execute(
            insert.on_conflict_do_update(index_elements=["tick_id"], set_=changes),
            list(rows.values()),
        )

    def archived(self, conn: sa.Connection, day: date, tick_ids: Iterable[str]) -> None:
        """The rows stay (counts, spend and durations are unchanged), marked with the day."""
        mark_archived(conn, day, tick_ids)


def mark_archived(conn: sa.Connection, day: date, tick_ids: Iterable[str]) -> None:
    """Mark the ticks whose events left the hot store for `day`'s archive, in slices."""
    wanted = list(tick_ids)
    for start in range(0, len(wanted), MARK_SLICE):
        conn.execute(
            ticks.update()
            .where(ticks.c.tick_id.in_(wanted[start : start + MARK_SLICE]))
            .values(archived_on=day)
        )


def archived_on(conn: sa.Connection, tick_id: str) -> date | None:
    """The day whose archive holds the tick's events (None while they are in the store)."""
    query = sa.select(ticks.c.archived_on).where(ticks.c.tick_id == tick_id)
    day: date | None = conn.execute(query).scalar()
    return day


def _stored(conn: sa.Connection, tick_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The stored rows of these ticks, the columns the counters move from, by tick id."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(tick_ids), IDS_PER_QUERY):
        query = sa.select(ticks.c.tick_id, *(ticks.c[name] for name in STORED)).where(
            ticks.c.tick_id.in_(tick_ids[start : start + IDS_PER_QUERY])
        )
        for row in conn.execute(query):
            found[row.tick_id] = row._asdict()
    return found


IDS_PER_QUERY = 1000
"""Tick ids per lookup, well under either driver's cap on bound parameters."""


STATUSES = (UNKNOWN, *dict.fromkeys(STATUS_OF.values()))
"""Every status a row of the read model can have."""


def tick_rows(
    conn: sa.Connection,
    *,
    levels: Iterable[str] | None = None,
    status: str | None = None,
    since: datetime | None = None,
    tick_id: str | None = None,
    limit: int = 100,
) -> list[sa.Row[Any]]:
    """Ticks of the read model, newest first (by when they were scheduled, else started).

    `since` keeps ticks scheduled (or, for a tick whose scheduling is unknown, started or
    ended) at or after that time.
    """
    when = sa.func.coalesce(ticks.c.scheduled_at, ticks.c.started_at, ticks.c.finished_at)
    query = sa.select(ticks).order_by(when.desc(), ticks.c.tick_id.desc()).limit(limit)
    if levels is not None:
        query = query.where(ticks.c.level.in_(list(levels)))
    if status is not None:
        query = query.where(ticks.c.status == status)
    if since is not None:
        query = query.where(when >= since)
    if tick_id is not None:
        query = query.where(ticks.c.tick_id == tick_id)
    return list(conn.execute(query))


def tick_ids_starting(conn: sa.Connection, prefix: str, limit: int) -> list[str]:
    """Ids of the read model's ticks that begin with `prefix` (taken literally), in order."""
    query = (
        sa.select(ticks.c.tick_id)
        .where(ticks.c.tick_id.startswith(prefix, autoescape=True))
        .order_by(ticks.c.tick_id)
        .limit(limit)
    )
    return list(conn.execute(query).scalars())


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
        .where(ticks.c.status.in_(("scheduled", "running")))
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


def open_ticks(conn: sa.Connection) -> list[tuple[str, str]]:
    """(tick id, level) of every tick the read model has not seen end, unknown ones included."""
    query = sa.select(ticks.c.tick_id, ticks.c.level).where(
        ticks.c.status.in_(("scheduled", "running", UNKNOWN))
    )
    return [(tick_id, level) for tick_id, level in conn.execute(query)]


def last_slots(conn: sa.Connection) -> dict[str, datetime]:
    """Each level's latest claimed slot; a level that never had a scheduled tick is absent."""
    query = sa.select(ticks.c.level, sa.func.max(ticks.c.slot)).group_by(ticks.c.level)
    return {level: as_utc(last) for level, last in conn.execute(query) if last is not None}


def previous_result_path(conn: sa.Connection, level: str) -> str | None:
    """The result file of the level's last completed tick (None before the first)."""
    query = (
        sa.select(ticks.c.result_path)
        .where(ticks.c.level == level, ticks.c.status == "completed")
        .order_by(ticks.c.finished_at.desc())
        .limit(1)
    )
    path: str | None = conn.execute(query).scalar()
    return path
