"""The ticks read model: one row per tick with its status, times, tokens and tool calls."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from harness.projections.base import EventData, Projection, upsert
from harness.store.schema import metadata

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
    sa.Index("ix_ticks_level_status", "level", "status"),
)

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
    name = "ticks"
    types = frozenset({*STATUS_OF, "BudgetSpent", "ToolCalled"})
    tables = (ticks,)

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
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
