"""The ticks of one period as a digest reads them: counted in the database, sampled per level.

A daily digest at 1,000 levels a minute covers 1.44M ticks; holding them all took about
1.6 KB each. These queries return counts per level and status (from the ticks
projection's counters per hour, and the ticks of a period's ragged ends), and at most
`n` ticks per level of each kind a digest lists (the latest), so what a digest holds
grows with levels times the sample, not with the period's ticks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa

from harness.folds import COUNTERS
from harness.projections.tick_counts import hour_of, tick_day_counts, tick_hour_counts
from harness.projections.tick_spend import tick_spend
from harness.projections.ticks import IDS_PER_QUERY, TickRow, ticks
from harness.store import EventStore
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
    """Ticks of `levels` scheduled in [start, end).

    The same bounds on `sort_at` (a scheduled tick's is its `scheduled_at`) let each
    level's walk of the (level, sort_at) index stop at the period's ends: on
    `scheduled_at` alone it read every tick the level ever had.
    """
    return [
        ticks.c.level.in_(list(levels)),
        ticks.c.sort_at >= start,
        ticks.c.sort_at < end,
        ticks.c.scheduled_at >= start,
        ticks.c.scheduled_at < end,
    ]


def period_counts(
    conn: sa.Connection, start: datetime, end: datetime, levels: Iterable[str]
) -> list[tuple[str, str, str | None, int]]:
    """(level, status, skip reason, ticks) of ticks scheduled in [start, end).

    The reason is that of skipped ticks (None for any other status), so one answer counts
    both the ticks by status and the skips by reason. The whole UTC hours of the period
    are read from the counters per hour (`tick_hour_counts`: a day is 24 rows per level
    and status, however many ticks ran) and, for archived days, per day
    (`tick_day_counts`); only its ragged ends count ticks. An archived day the period
    covers in part has no hours left to count: its ticks and their hours left with its
    archive, and only its whole days count.
    """
    wanted = list(levels)
    first, last = _next_hour(start), _next_hour(end, down=True)
    if first >= last:
        return _counted(conn, start, end, wanted)
    counts: Counter[tuple[str, str, str | None]] = Counter()
    days = f"{_next_day(first):%Y-%m-%d}", f"{last:%Y-%m-%d}"
    for table, key, (low, high) in (
        (tick_hour_counts, "hour", (hour_of(first), hour_of(last))),
        (tick_day_counts, "day", days),
    ):
        rows = table.c
        query = (
            sa.select(rows.level, rows.status, rows.reason, sa.func.sum(rows.ticks))
            .where(rows.level.in_(wanted), rows[key] >= low, rows[key] < high)
            .group_by(rows.level, rows.status, rows.reason)
        )
        for level, status, reason, n in conn.execute(query):
            counts[(level, status, (reason or None) if status == "skipped" else None)] += int(n)
    for edge in ((start, first), (last, end)):
        if edge[0] < edge[1]:
            for level, status, why, n in _counted(conn, *edge, wanted):
                counts[(level, status, why)] += n
    return [(*key, n) for key, n in counts.items()]


def _next_day(hour: datetime) -> date:
    """The first whole UTC day at or after a whole hour."""
    return hour.date() if hour.hour == 0 else hour.date() + timedelta(days=1)


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
) -> list[TickRow]:
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
    return [TickRow.of(row) for row in conn.execute(query)]


@dataclass(frozen=True)
class PeriodSpend:
    """Spend of a period's ticks per level, model, day and price tier; counters per tick."""

    spend: list[sa.Row[Any]]
    """(level, model, day, price_tier, prompt, completion, cache read, cache write tokens,
    calls) of every tick of the period."""
    twins: list[sa.Row[Any]]
    """The same, of the twin ticks among them (hedges) alone."""
    counters: list[sa.Row[Any]]
    """(level, tick_id, governor_fired, hedges) of the period's ticks that have any."""


def period_spend(
    conn: sa.Connection, start: datetime, end: datetime, levels: Iterable[str]
) -> PeriodSpend:
    """What the ticks scheduled in [start, end) spent, and their governor and hedge counts.

    One join of the period's ticks (each level's range of its index) with the tick spend
    read model; spend rows summed per level, model, day and tier in the database, the
    few rows of counters per tick (twins among them), then the twins' spend by their ids.
    """
    wanted = list(levels)
    spent = tick_spend.c
    counters = spent.model == sa.literal_column(f"'{COUNTERS}'")
    per_tick = sa.case((counters, spent.tick_id), else_=None)
    sums = [
        sa.func.sum(spent[name]).label(name)
        for name in (
            "prompt_tokens",
            "completion_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "model_calls",
            "governor_fired",
            "hedges",
            "twin",
        )
    ]
    keys = (ticks.c.level, spent.model, spent.day, spent.price_tier, per_tick.label("tick_id"))
    query = (
        sa.select(*keys, *sums)
        .select_from(ticks.join(tick_spend, spent.tick_id == ticks.c.tick_id))
        .where(*_in_period(start, end, wanted))
        .group_by(*keys[:4], per_tick)
    )
    rows = list(conn.execute(query))
    twins = [row.tick_id for row in rows if row.tick_id is not None and row.twin]
    twin_spend: list[sa.Row[Any]] = []
    for first in range(0, len(twins), IDS_PER_QUERY):
        query = (
            sa.select(*keys[:4], *sums[:5])
            .select_from(ticks.join(tick_spend, spent.tick_id == ticks.c.tick_id))
            .where(ticks.c.tick_id.in_(twins[first : first + IDS_PER_QUERY]), ~counters)
            .group_by(*keys[:4])
        )
        twin_spend += conn.execute(query)
    return PeriodSpend(
        spend=[row for row in rows if row.tick_id is None],
        twins=twin_spend,
        counters=[row for row in rows if row.tick_id is not None],
    )


@dataclass(frozen=True)
class Period:
    """What a digest reads of the ticks scheduled in a period, in one read transaction."""

    counts: list[tuple[str, str, str | None, int]]
    """`period_counts`: (level, status, skip reason, ticks)."""
    spend: PeriodSpend
    anomalous: list[TickRow]
    completed: list[TickRow]
    failed: list[TickRow]
    """The samples (`period_sample`) of each kind, at most `n` ticks per level."""


def period_of(
    store: EventStore, start: datetime, end: datetime, levels: list[str], n: int
) -> Period:
    """The counts, spend and samples of the ticks of `levels` scheduled in [start, end)."""
    with store.read_transaction() as conn:
        return Period(
            counts=period_counts(conn, start, end, levels),
            spend=period_spend(conn, start, end, levels),
            anomalous=period_sample(conn, start, end, levels, "anomalous", n),
            completed=period_sample(conn, start, end, levels, "completed", n),
            failed=period_sample(conn, start, end, levels, "failed", n),
        )
