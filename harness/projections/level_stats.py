"""Each level at a glance, as Flower's and Temporal's pages show a queue: from counters only.

Last outcome, success rate over the last day, failure streak, median and 95th percentile
run time, and today's cost per tick: read from the counters the ticks projection keeps
(`harness.projections.tick_counts`), the failure streaks and each level's newest ended
tick (`harness.projections.level_latest`), never from an aggregate over all ticks, so
the dashboard's panel costs the same behind a year of history as behind an hour.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from harness.projections.level_latest import ENDED, newest_ended
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
RATE_HOURS = 24


@dataclass(frozen=True)
class LevelStats:
    """What a level's row on the dashboard says of its recent ticks."""

    level: str
    last_tick_id: str | None
    last_status: str | None
    last_ended_at: datetime | None
    completed_day: int
    """Completed ticks scheduled in the last RATE_HOURS whole and current hours."""
    failed_day: int
    """Failed, timed-out and lost ticks of the same hours."""
    failure_streak: int
    p50_seconds: float | None
    """The histogram bound at most half the level's ended ticks ran over (None: no tick)."""
    p95_seconds: float | None
    ended_today: int
    """Ticks scheduled today (UTC) that ended, skipped ones aside: the cost per tick's base."""

    @property
    def success_rate(self) -> float | None:
        """Completed among the ticks of the last day that ran to an end (None: none did)."""
        ran = self.completed_day + self.failed_day
        return None if ran == 0 else self.completed_day / ran


def stats_of_levels(store: EventStore, levels: Iterable[str], now: datetime) -> list[LevelStats]:
    """Each level's stats, in the order given."""
    names = list(levels)
    since = hour_of(now - timedelta(hours=RATE_HOURS - 1))
    today = hour_of(now.replace(hour=0))
    with store.read_transaction() as conn:
        counted = {
            level: (int(completed), int(failed), int(ended))
            for level, completed, failed, ended in conn.execute(_day_counts(since, today))
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
        completed, failed, ended_today = counted.get(level, (0, 0, 0))
        last = ended.get(level)
        histogram = histograms.get(level)
        stats.append(
            LevelStats(
                level=level,
                last_tick_id=last.tick_id if last else None,
                last_status=last.status if last else None,
                last_ended_at=last.finished_at if last else None,
                completed_day=completed,
                failed_day=failed,
                failure_streak=int(streaks.get(level, 0)),
                p50_seconds=_quantile(histogram, 0.5),
                p95_seconds=_quantile(histogram, 0.95),
                ended_today=ended_today,
            )
        )
    return stats


def _day_counts(since: str, today: str) -> sa.Select[str, int, int, int]:
    """Per level: completed and failed ticks of the hours from `since`, ended ones from `today`.

    Summed by the database over the last day's hours alone, every level's at once: a
    range of the hour index (migration 0024), not a probe per level, and a row a level
    back instead of one per level, hour and status. Levels no longer configured come
    back too and are not asked for.
    """
    hours = tick_hour_counts.c

    def ticks_of(first: str, statuses: tuple[str, ...]) -> sa.ColumnElement[int]:
        counts = sa.and_(hours.hour >= first, hours.status.in_(statuses))
        return sa.func.coalesce(sa.func.sum(sa.case((counts, hours.ticks), else_=0)), 0)

    return (
        sa.select(
            hours.level,
            ticks_of(since, ("completed",)),
            ticks_of(since, FAILED),
            ticks_of(today, ENDED),
        )
        .where(hours.hour >= min(since, today))
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
