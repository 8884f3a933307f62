"""Failure streaks: per level, its failed ticks in a row since its last completed one.

The alerter folds this read model itself, under its own checkpoint and in the same
transaction, rather than the projector: the streak then matches the alerter's position
exactly, so the tick that makes a streak `consecutive_failures` long is the same for every
replica and across restarts, and so is the one alert of that episode. A first start folds
the whole log (alerting none of it): the table is rebuilt by replay like any read model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from harness.contracts import TickCompleted, TickFailed, TickLost, TickTimedOut
from harness.projections.base import upsert
from harness.store import metadata

failure_streaks = sa.Table(
    "failure_streaks",
    metadata,
    sa.Column("level", sa.String(100), primary_key=True),
    sa.Column("failures", sa.Integer(), nullable=False),
    sa.Column("last_tick_id", sa.String(200)),
)

FAILED = frozenset({TickFailed.type, TickTimedOut.type, TickLost.type})


@dataclass
class Streak:
    """A level's failed ticks in a row and the last of them (None once one completes)."""

    failures: int = 0
    last_tick_id: str | None = None


def fold_streak(streak: Streak, type_: str, data: dict[str, Any]) -> None:
    """A completed tick ends the streak; a failed, timed-out or lost one lengthens it."""
    if type_ == TickCompleted.type:
        streak.failures, streak.last_tick_id = 0, None
    elif type_ in FAILED:
        streak.failures += 1
        streak.last_tick_id = str(data["tick_id"])


def load_streaks(conn: sa.Connection) -> dict[str, Streak]:
    """Every level's streak as folded so far, read in the caller's transaction."""
    rows = conn.execute(sa.select(failure_streaks)).all()
    return {row.level: Streak(row.failures, row.last_tick_id) for row in rows}


def save_streaks(conn: sa.Connection, streaks: dict[str, Streak]) -> None:
    """Write the folded streaks back in the caller's transaction (with its checkpoint)."""
    if not streaks:
        return
    rows = [
        {"level": level, "failures": s.failures, "last_tick_id": s.last_tick_id}
        for level, s in streaks.items()
    ]
    insert = upsert(conn, failure_streaks)
    changes = {"failures": insert.excluded.failures, "last_tick_id": insert.excluded.last_tick_id}
    conn.execute(insert.on_conflict_do_update(index_elements=["level"], set_=changes), rows)
