"""Each level at a glance, as Flower's and Temporal's pages show a queue: from counters only.

Last outcome, today's success rate, failure streak, median and 95th percentile run time,
and today's cost per tick: read from the counters the ticks projection keeps
(`harness.projections.tick_counts`), the failure streaks and each level's newest ended
tick (`harness.projections.level_latest`), never from an aggregate over all ticks, so
the dashboard's panel costs the same behind a year of history as behind an hour.

The success rate and the cost per tick count the same ticks: those scheduled today (UTC,
the day budgets and spend are kept by) that ran to an end, completed or not (a cancelled
or skipped tick is neither a success nor a failure). The success rate was over the last
24 hours and the cost per tick over today's ended ticks, cancelled ones among them: the
two cells of one row described different ticks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from harness.projections.level_latest import newest_ended
from harness.projections.streaks import failure_streaks
from harness.projections.tick_counts import (
    DURATION_BUCKETS,
    Durations,
    durations,
    hour_of,
    tick_hour_counts,
)
from harness.store import EventStore, among

FAILED = ("failed", "timed_out", "lost")


@dataclass(frozen=True)
class LevelStats:
    """What a level's row on the dashboard says of its recent ticks."""

    level: str
    last_tick_id: str | None
    last_status: str | None
    last_ended_at: datetime | None
    completed_today: int
    """Completed ticks scheduled today (UTC)."""
    failed_today: int
    """Failed, timed-out and lost ticks scheduled today."""
    failure_streak: int
    p50_seconds: float | None
    """The histogram bound at most half the level's ended ticks ran over (None: no tick)."""
    p95_seconds: float | None

    @property
    def ran_today(self) -> int:
        """Ticks scheduled today that ran to an end: the success rate's and cost per tick's base."""
        return self.completed_today + self.failed_today

    @property
    def success_rate(self) -> float | None:
        """Completed among the ticks of today that ran to an end (None: none did)."""
        return None if self.ran_today == 0 else self.completed_today / self.ran_today


def stats_of_levels(store: EventStore, levels: Iterable[str], now: datetime) -> list[LevelStats]:
    """Each level's stats, in the order given."""
    names = list(levels)
    with store.read_transaction() as conn:
        counted = {
            level: (int(completed), int(failed))
            for level, completed, failed in conn.execute(_day_counts(hour_of(now.replace(hour=0))))
        }
        streaks = dict(
            conn.execute(
                sa.select(failure_streaks.c.level, failure_streaks.c.failures).where(
                    among(conn, failure_streaks.c.level, names)
                )
            ).all()
        )
        histograms = {found.level: found for found in durations(conn, names)}
        ended = newest_ended(conn, names)
    stats = []
    for level in names:
        completed, failed = counted.get(level, (0, 0))
        last = ended.get(level)
        histogram = histograms.get(level)
        stats.append(
            LevelStats(
                level=level,
                last_tick_id=last.tick_id if last else None,
                last_status=last.status if last else None,
                last_ended_at=last.finished_at if last else None,
                completed_today=completed,
                failed_today=failed,
                failure_streak=int(streaks.get(level, 0)),
                p50_seconds=_quantile(histogram, 0.5),
                p95_seconds=_quantile(histogram, 0.95),
            )
        )
    return stats


def _day_counts(today: str) -> sa.Select[str, int, int]:
    """Per level: completed and failed ticks of the hours from `today`'s first.

    Summed by the database over today's hours alone, every level's at once: a range of
    the hour index (migration 0024), not a probe per level, and a row a level back
    instead of one per level, hour and status. Levels no longer configured come back too
    and are not asked for.
    """
    hours = tick_hour_counts.c

    def ticks_of(statuses: tuple[str, ...]) -> sa.ColumnElement[int]:
        return sa.func.coalesce(
            sa.func.sum(sa.case((hours.status.in_(statuses), hours.ticks), else_=0)), 0
        )

    return (
        sa.select(hours.level, ticks_of(("completed",)), ticks_of(FAILED))
        .where(hours.hour >= today)
        .group_by(hours.level)
    )


def _quantile(histogram: Durations | None, share: float) -> float | None:
    """The smallest bucket bound that `share` of the ticks ran within (None: beyond the last)."""
    if histogram is None or histogram.count == 0:
        return None
    wanted = share * histogram.count
    for bound, within in zip(DURATION_BUCKETS, histogram.at_most, strict=True):
        if within >= wanted:
            return bound
    return None


def mean_run_seconds(store: EventStore, levels: Iterable[str]) -> dict[str, float]:
    """Each level's mean run time over its ended ticks, from the counters (levels with one).

    Exact where the percentiles are bucket bounds: how long a place stays taken.
    """
    with store.read_transaction() as conn:
        found = durations(conn, list(levels))
    return {each.level: each.total_seconds / each.count for each in found if each.count}
