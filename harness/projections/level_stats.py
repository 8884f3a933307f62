"""Each level at a glance, as Flower's and Temporal's pages show a queue: from counters only.

Last outcome, success rate over the last day, failure streak, median and 95th percentile
run time, and today's cost per tick: read from the counters the ticks projection keeps
(`harness.projections.tick_counts`), the failure streaks and one index lookup per ended
status, never from an aggregate over all ticks, so the dashboard's panel costs the same
behind a year of history as behind an hour.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from harness.projections.streaks import failure_streaks
from harness.projections.tick_counts import (
    DURATION_BUCKETS,
    Durations,
    durations,
    hour_of,
    tick_hour_counts,
)
from harness.projections.ticks import IDS_PER_QUERY, per_level, ticks
from harness.store import EventStore
from harness.timespec import as_utc

ENDED = ("completed", "failed", "timed_out", "cancelled", "lost")
"""Statuses of a tick that ran (or was meant to) and ended; skipped ones never ran."""
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


def level_stats(store: EventStore, levels: Iterable[str], now: datetime) -> list[LevelStats]:
    """Each level's stats, in the order given."""
    names = list(levels)
    since = hour_of(now - timedelta(hours=RATE_HOURS - 1))
    today = hour_of(now.replace(hour=0))
    hours = tick_hour_counts.c
    with store.read_transaction() as conn:
        counted = conn.execute(
            sa.select(hours.level, hours.hour, hours.status, hours.ticks).where(
                hours.level.in_(names), hours.hour >= min(since, today)
            )
        ).all()
        streaks = dict(
            conn.execute(
                sa.select(failure_streaks.c.level, failure_streaks.c.failures).where(
                    failure_streaks.c.level.in_(names)
                )
            ).all()
        )
        histograms = {found.level: found for found in durations(conn, names)}
        ended = _last_ended(conn, names)
    by_level: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for name, hour, status, n in counted:
        by_level[name].append((hour, status, int(n)))
    stats = []
    for level in names:
        mine = by_level[level]
        last = ended.get(level)
        histogram = histograms.get(level)
        stats.append(
            LevelStats(
                level=level,
                last_tick_id=last[0] if last else None,
                last_status=last[1] if last else None,
                last_ended_at=last[2] if last else None,
                completed_day=sum(n for h, s, n in mine if h >= since and s == "completed"),
                failed_day=sum(n for h, s, n in mine if h >= since and s in FAILED),
                failure_streak=int(streaks.get(level, 0)),
                p50_seconds=_quantile(histogram, 0.5),
                p95_seconds=_quantile(histogram, 0.95),
                ended_today=sum(n for h, s, n in mine if h >= today and s in ENDED),
            )
        )
    return stats


def _last_ended(conn: sa.Connection, levels: list[str]) -> dict[str, tuple[str, str, datetime]]:
    """Each level's latest ended tick (by list time): id, status and end, in two statements.

    One walk back from the end of each level's (level, list time) index, stopped at its
    first ended tick (`per_level`): only the ticks still open stand before it, so the
    cost is levels times the ticks in flight, never the history.
    """
    ended = ", ".join(f"'{status}'" for status in ENDED)
    newest = (
        f"SELECT tick_id FROM ticks WHERE level = l.value AND status IN ({ended}) "
        "ORDER BY sort_at DESC, tick_id DESC LIMIT 1"
    )
    ids = [tick for _, tick in conn.execute(per_level(conn, levels, newest)) if tick is not None]
    found: dict[str, tuple[str, str, datetime]] = {}
    for start in range(0, len(ids), IDS_PER_QUERY):
        query = sa.select(ticks.c.level, ticks.c.tick_id, ticks.c.status, ticks.c.finished_at)
        chunk = ids[start : start + IDS_PER_QUERY]
        for level, tick_id, status, finished_at in conn.execute(
            query.where(ticks.c.tick_id.in_(chunk))
        ):
            found[level] = (tick_id, status, as_utc(finished_at))
    return found


def _quantile(histogram: Durations | None, share: float) -> float | None:
    """The smallest bucket bound that `share` of the ticks ran within (None: beyond the last)."""
    if histogram is None or histogram.count == 0:
        return None
    wanted = share * histogram.count
    for bound, within in zip(DURATION_BUCKETS, histogram.at_most, strict=True):
        if within >= wanted:
            return bound
    return None
