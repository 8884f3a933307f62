"""The ticks read model: one row per tick with its status, times, tokens and tool calls.

Every query on the `ticks` table lives here, named for what its callers ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa

from harness.projections.base import EventData, Projection, upsert
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
    tables = (ticks,)

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """Merge the batch's events per tick first, so each tick's row is written once per batch."""
        rows: dict[str, dict[str, Any]] = {}
        for _, type_, data in batch:
            row = rows.get(data["tick_id"])
            if row is None:
                row = rows[data["tick_id"]] = {
                    "tick_id": data["tick_id"],
                    "status": UNKNOWN,
                    **dict.fromkeys(_SET),
                    **dict.fromkeys(_ADD, 0),
                }
            row["level"] = data["level"]
            if type_ == "BudgetSpent":
                row["prompt_tokens"] += data["prompt_tokens"]
                row["completion_tokens"] += data["completion_tokens"]
                row["model_calls"] += 1
                row["estimated_calls"] += data["estimated"]
                continue
            if type_ == "ToolCalled":
                cancelled = data["status"] == "cancelled"
                row["tool_calls_cancelled" if cancelled else "tool_calls"] += 1
                continue
            row["status"] = STATUS_OF[type_]
            row[_TIME_COLUMN.get(type_, "finished_at")] = _time(data["occurred_at"])
            if data.get("slot"):
                row["slot"] = _time(data["slot"])
            for name in ("result_path", "reason"):
                if data.get(name):
                    row[name] = data[name]
        if not rows:
            return
        insert = upsert(conn, ticks)
        new, old = insert.excluded, ticks.c
        changes: dict[str, Any] = {
            "status": sa.case((new.status == UNKNOWN, old.status), else_=new.status),
            **{name: sa.func.coalesce(new[name], old[name]) for name in _SET},
            **{name: old[name] + new[name] for name in _ADD},
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


def period_ticks(
    conn: sa.Connection, start: datetime, end: datetime, levels: Iterable[str]
) -> list[sa.Row[Any]]:
    """The ticks of `levels` scheduled in [start, end), in the order they were scheduled."""
    query = (
        sa.select(ticks)
        .where(
            ticks.c.scheduled_at >= start,
            ticks.c.scheduled_at < end,
            ticks.c.level.in_(list(levels)),
        )
        .order_by(ticks.c.scheduled_at)
    )
    return list(conn.execute(query))


def status_counts(conn: sa.Connection) -> list[tuple[str, str, int]]:
    """(level, status, ticks) for every pair the read model holds."""
    query = sa.select(ticks.c.level, ticks.c.status, sa.func.count()).group_by(
        ticks.c.level, ticks.c.status
    )
    return [(level, status, int(count)) for level, status, count in conn.execute(query)]


@dataclass(frozen=True)
class Durations:
    """Run times of a level's ended ticks, as a cumulative histogram."""

    level: str
    count: int
    total_seconds: float
    at_most: list[int]
    """Ticks that ran at most each bound, in the order of the bounds asked for."""


def durations(conn: sa.Connection, bounds: Sequence[float]) -> list[Durations]:
    """Per level, the run time (start to end) of ended ticks, counted in one query."""
    seconds = _seconds(conn, ticks.c.started_at, ticks.c.finished_at)
    buckets = [sa.func.sum(sa.case((seconds <= bound, 1), else_=0)) for bound in bounds]
    query = (
        sa.select(ticks.c.level, sa.func.count(), sa.func.sum(seconds), *buckets)
        .where(ticks.c.started_at.is_not(None), ticks.c.finished_at.is_not(None))
        .group_by(ticks.c.level)
    )
    return [
        Durations(level, int(count), float(total or 0.0), [int(n) for n in cumulative])
        for level, count, total, *cumulative in conn.execute(query)
    ]


def tool_cap_counts(conn: sa.Connection) -> list[tuple[str, int, int]]:
    """(level, ticks whose tool-call cap refused a call, calls it refused) per level."""
    query = sa.select(
        ticks.c.level,
        sa.func.sum(sa.case((ticks.c.tool_calls_cancelled > 0, 1), else_=0)),
        sa.func.sum(ticks.c.tool_calls_cancelled),
    ).group_by(ticks.c.level)
    return [(level, int(hit or 0), int(calls or 0)) for level, hit, calls in conn.execute(query)]


def _seconds(
    conn: sa.Connection, start: sa.ColumnElement[datetime], end: sa.ColumnElement[datetime]
) -> sa.ColumnElement[float]:
    """`end - start` in seconds, in the SQL of the connection's dialect."""
    if conn.dialect.name == "postgresql":
        return sa.cast(sa.extract("epoch", end - start), sa.Float)
    return (sa.func.julianday(end) - sa.func.julianday(start)) * 86400.0
