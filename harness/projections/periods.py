"""The ticks of one period as a digest reads them: counted in the database, sampled per level.

A daily digest at 1,000 levels a minute covers 1.44M ticks; holding them all took about
1.6 KB each. These queries on the ticks read model return counts per level and status,
and at most `n` ticks per level of each kind a digest lists (the latest), so what a
digest holds grows with levels times the sample, not with the period's ticks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from harness.projections.ticks import IDS_PER_QUERY, ticks

SampleKind = Literal["completed", "failed", "anomalous"]
"""Ticks a digest quotes: completed (their texts), failed (their reasons), and those
whose row alone is an anomaly (lost, timed out, or spend that had to be estimated)."""

_KINDS: dict[SampleKind, sa.ColumnElement[bool]] = {
    "completed": ticks.c.status == "completed",
    "failed": ticks.c.status == "failed",
    "anomalous": sa.or_(ticks.c.status.in_(("lost", "timed_out")), ticks.c.estimated_calls > 0),
}


def _in_period(start: datetime, end: datetime, levels: Iterable[str]) -> list[Any]:
    return [
        ticks.c.scheduled_at >= start,
        ticks.c.scheduled_at < end,
        ticks.c.level.in_(list(levels)),
    ]


def period_counts(
    conn: sa.Connection, start: datetime, end: datetime, levels: Iterable[str]
) -> list[tuple[str, str, str | None, int]]:
    """(level, status, skip reason, ticks) of ticks scheduled in [start, end).

    The reason is that of skipped ticks (None for any other status), so one query counts
    both the ticks by status and the skips by reason.
    """
    reason = sa.case((ticks.c.status == "skipped", ticks.c.reason), else_=None).label("why")
    query = (
        sa.select(ticks.c.level, ticks.c.status, reason, sa.func.count())
        .where(*_in_period(start, end, levels))
        .group_by(ticks.c.level, ticks.c.status, reason)
    )
    return [(level, status, why, int(n)) for level, status, why, n in conn.execute(query)]


def period_sample(
    conn: sa.Connection,
    start: datetime,
    end: datetime,
    levels: Iterable[str],
    kind: SampleKind,
    n: int,
) -> list[sa.Row[Any]]:
    """The last `n` ticks of each level of a kind scheduled in [start, end), oldest first."""
    rank = (
        sa.func.row_number()
        .over(
            partition_by=ticks.c.level,
            order_by=(ticks.c.scheduled_at.desc(), ticks.c.tick_id.desc()),
        )
        .label("rank")
    )
    ranked = sa.select(ticks, rank).where(*_in_period(start, end, levels), _KINDS[kind]).subquery()
    query = (
        sa.select(*(ranked.c[column.name] for column in ticks.c))
        .where(ranked.c.rank <= n)
        .order_by(ranked.c.scheduled_at, ranked.c.tick_id)
    )
    return list(conn.execute(query))


def period_levels(
    conn: sa.Connection,
    tick_ids: Sequence[str],
    start: datetime,
    end: datetime,
    levels: Iterable[str],
) -> dict[str, str]:
    """The level of each of these ticks scheduled in [start, end); others are absent."""
    wanted = list(levels)
    found: dict[str, str] = {}
    for first in range(0, len(tick_ids), IDS_PER_QUERY):
        query = sa.select(ticks.c.tick_id, ticks.c.level).where(
            ticks.c.tick_id.in_(tick_ids[first : first + IDS_PER_QUERY]),
            *_in_period(start, end, wanted),
        )
        found.update((tick_id, level) for tick_id, level in conn.execute(query))
    return found
