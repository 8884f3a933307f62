"""The ticks of one period as a digest reads them: counted in the database, sampled per level.

A daily digest at 1,000 levels a minute covers 1.44M ticks; holding them all took about
1.6 KB each. These queries return counts per level and status (from the ticks
projection's counters per hour, and the ticks of a period's ragged ends), and at most
`n` ticks per level of each kind a digest lists (the latest), so what a digest holds
grows with levels times the sample, not with the period's ticks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa

from harness.projections.tick_counts import hour_of, tick_hour_counts
from harness.projections.ticks import IDS_PER_QUERY, ticks
from harness.timespec import as_utc

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

    The reason is that of skipped ticks (None for any other status), so one answer counts
    both the ticks by status and the skips by reason. The whole UTC hours of the period
    are read from the counters per hour (`tick_hour_counts`: a day is 24 rows per level
    and status, however many ticks ran); only its ragged ends count ticks.
    """
    wanted = list(levels)
    first, last = _next_hour(start), _next_hour(end, down=True)
    if first >= last:
        return _counted(conn, start, end, wanted)
    hourly = tick_hour_counts.c
    query = (
        sa.select(hourly.level, hourly.status, hourly.reason, sa.func.sum(hourly.ticks))
        .where(
            hourly.level.in_(wanted),
            hourly.hour >= hour_of(first),
            hourly.hour < hour_of(last),
        )
        .group_by(hourly.level, hourly.status, hourly.reason)
    )
    counts: Counter[tuple[str, str, str | None]] = Counter()
    for level, status, reason, n in conn.execute(query):
        counts[(level, status, (reason or None) if status == "skipped" else None)] += int(n)
    for edge in ((start, first), (last, end)):
        if edge[0] < edge[1]:
            for level, status, why, n in _counted(conn, *edge, wanted):
                counts[(level, status, why)] += n
    return [(*key, n) for key, n in counts.items()]


def _next_hour(when: datetime, down: bool = False) -> datetime:
    """The first whole UTC hour at or after `when` (at or before, with `down`)."""
    when = as_utc(when).astimezone(UTC)
    hour = when.replace(minute=0, second=0, microsecond=0)
    return hour if down or hour == when else hour + timedelta(hours=1)


def _counted(
    conn: sa.Connection, start: datetime, end: datetime, levels: list[str]
) -> list[tuple[str, str, str | None, int]]:
    """`period_counts` of [start, end) from the ticks themselves."""
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
