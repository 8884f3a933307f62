"""Counters of the ticks read model: ticks per level and status, run times, refused calls.

What `/metrics`, the dashboard and `status` show of all ticks, kept by the ticks
projection in the same transaction as its rows, so a scrape reads a few rows per level
instead of aggregating every tick ever run.

Counts per status are a gauge: a tick moves from one status to the next, its old pair
losing it and its new pair gaining it exactly once, however its events are ordered or
batched (the counts always equal a GROUP BY over the `ticks` table). Everything else
only grows, as Prometheus counters and histogram buckets must, and is defined per event
in global order, so a rebuild from zero equals the incremental fold whatever the batches:

- a tick's run time counts once, at the event that first gives it both a start and an
  end (a later correction of either time does not move it between buckets); the sum is
  kept in whole microseconds, so sums in any order are equal;
- a tick counts as a cap hit at its first refused call, each refused call counts once,
  both under the level of the event that says so.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from harness.projections.base import add_sums
from harness.store import EventStore, among, metadata
from harness.timespec import as_utc

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Seconds; ticks run from seconds (a quick answer) to an hour (`hour` levels). Kept in
the read model: changing them takes a `tickwork projections rebuild ticks`."""
_BOUNDS_MS = tuple(round(bound * 1000) for bound in DURATION_BUCKETS)
_MICROSECOND = timedelta(microseconds=1)

tick_status_counts = sa.Table(
    "tick_status_counts",
    metadata,
    sa.Column("level", sa.String(100), primary_key=True),
    sa.Column("status", sa.String(20), primary_key=True),
    sa.Column("ticks", sa.BigInteger(), nullable=False),
)

tick_level_totals = sa.Table(
    "tick_level_totals",
    metadata,
    sa.Column("level", sa.String(100), primary_key=True),
    sa.Column("ended", sa.BigInteger(), nullable=False),
    sa.Column("duration_us", sa.BigInteger(), nullable=False),
    sa.Column("cap_hits", sa.BigInteger(), nullable=False),
    sa.Column("calls_refused", sa.BigInteger(), nullable=False),
)

tick_duration_buckets = sa.Table(
    "tick_duration_buckets",
    metadata,
    sa.Column("level", sa.String(100), primary_key=True),
    sa.Column("le_ms", sa.BigInteger(), primary_key=True),
    sa.Column("ticks", sa.BigInteger(), nullable=False),
)
"""Ticks whose run time falls in the bucket ending at `le_ms` (not cumulative); those
above the last bound count only in `tick_level_totals.ended`."""


def _counts_by(name: str, when: str, width: int, *more: sa.Index) -> sa.Table:
    """Ticks by level, a time (`when`: text that sorts as time), status and skip reason.

    Indexed by time first: the reads and the roll-up take a range of it for every level.
    """
    return sa.Table(
        name,
        metadata,
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column(when, sa.String(width), primary_key=True),
        sa.Column("status", sa.String(20), primary_key=True),
        sa.Column("reason", sa.Text(), primary_key=True),
        sa.Column("ticks", sa.BigInteger(), nullable=False),
        sa.Index(f"ix_{name}_{when}", when, "level", "status", "ticks"),
        *more,
    )


tick_hour_counts = _counts_by(
    "tick_hour_counts",
    "hour",
    13,
    sa.Index("ix_tick_hour_counts_zero", "level", sqlite_where=sa.text("ticks = 0")),
)
"""Ticks by level, UTC hour they were scheduled in (`YYYY-MM-DDTHH`, text: it sorts as
time, and reads the same from both databases), status, and (skipped ones) reason: what a
digest counts for the whole hours of its period. Like the counts per status, a
gauge that follows each tick's row; a tick not (yet) known to be scheduled is absent.
The hour index (migration 0024) serves reads of the last hours of every level at once;
the partial index of rows at zero (PostgreSQL's has the same predicate, set by the
migration) lets each batch delete those without reading every hour ever counted."""

tick_day_counts = _counts_by("tick_day_counts", "day", 10)
"""`tick_hour_counts` of archived days, a row per level, UTC day (`YYYY-MM-DD`), status
and reason (migration 0025): hourly detail for the days still hot, daily totals for
older ones. A day's hours move here when its archive is recorded (`roll_up`), so the
counters grow by a day's rows a day, not by 24 of them; the two tables hold each tick's
count once, and their sums per day are the same after archiving and after a rebuild.
A tick still open when its day was archived moves in the hour rows when it closes, and
its correction joins the day's row at the next archive."""

TABLES = (
    tick_status_counts,
    tick_level_totals,
    tick_duration_buckets,
    tick_hour_counts,
    tick_day_counts,
)

STORED = (
    "level",
    "status",
    "scheduled_at",
    "started_at",
    "finished_at",
    "reason",
    "tool_calls_cancelled",
)
"""Columns of a tick's stored row that the counters move from."""


@dataclass
class Tally:
    """What one batch of the ticks projection adds to the counters, noted while it merges.

    The projection notes each event that matters here, in order; `write` then takes the
    rows the batch is about to change, as they stood before it, and adds the difference.
    """

    times: dict[str, list[tuple[bool, datetime, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    """Tick id -> (is a start, when, level) of its starts and ends in the batch, in order."""
    first_refusal: dict[str, str] = field(default_factory=dict)
    """Tick id -> level of its first refused tool call in the batch."""
    refused: Counter[str] = field(default_factory=Counter)
    """Level -> tool calls refused in the batch."""
    levels: set[str] = field(default_factory=set)
    """Every level an event of the batch named: each has a row of totals, zeros or not."""

    def timed(self, tick_id: str, level: str, when: datetime, *, start: bool) -> None:
        """A start (or, with `start` False, an end) of the tick at `when`."""
        self.times[tick_id].append((start, when, level))

    def refusal(self, tick_id: str, level: str) -> None:
        """One tool call of the tick refused by its cap."""
        self.first_refusal.setdefault(tick_id, level)
        self.refused[level] += 1

    def write(
        self,
        conn: sa.Connection,
        merged: Mapping[str, Mapping[str, Any]],
        old: Mapping[str, Mapping[str, Any]],
    ) -> None:
        """Add the batch's counts, before its rows are stored.

        `merged` holds each tick's row as the batch leaves it (status resolved), `old`
        the stored rows it replaces (`STORED` columns).
        """
        statuses: Counter[tuple[str, str]] = Counter()
        hours: Counter[tuple[str, str, str, str]] = Counter()
        ended: Counter[str] = Counter()
        micros: Counter[str] = Counter()
        hits: Counter[str] = Counter()
        buckets: Counter[tuple[str, int]] = Counter()
        for tick_id, row in merged.items():
            before = old.get(tick_id)
            if before is not None:
                statuses[(before["level"], before["status"])] -= 1
                if (was := _hour_key(before)) is not None:
                    hours[was] -= 1
            statuses[(row["level"], row["status"])] += 1
            if (now := _hour_key(_resolved(row, before))) is not None:
                hours[now] += 1
            if tick_id in self.first_refusal and not (before and before["tool_calls_cancelled"]):
                hits[self.first_refusal[tick_id]] += 1
            run = _first_run(before, self.times.get(tick_id, ()))
            if run is not None:
                level, took = run
                ended[level] += 1
                micros[level] += took // _MICROSECOND
                bucket = bisect_left(_BOUNDS_MS, took / timedelta(milliseconds=1))
                if bucket < len(_BOUNDS_MS):
                    buckets[(level, _BOUNDS_MS[bucket])] += 1
        add_sums(
            conn,
            tick_status_counts,
            ("level", "status"),
            [(*key, n) for key, n in statuses.items() if n],
        )
        add_sums(
            conn,
            tick_hour_counts,
            ("level", "hour", "status", "reason"),
            [(*key, n) for key, n in hours.items() if n],
        )
        # Written out, as the partial index's predicate is: SQLite matches it as text.
        for table in (tick_status_counts, tick_hour_counts):
            conn.execute(table.delete().where(sa.text("ticks = 0")))
        add_sums(
            conn,
            tick_level_totals,
            ("level",),
            [
                (level, ended[level], micros[level], hits[level], self.refused[level])
                for level in sorted(self.levels)
            ],
        )
        add_sums(
            conn,
            tick_duration_buckets,
            ("level", "le_ms"),
            [(*key, n) for key, n in sorted(buckets.items())],
        )


def _resolved(row: Mapping[str, Any], before: Mapping[str, Any] | None) -> dict[str, Any]:
    """The row as stored after the batch: its values, else the stored ones (the upsert's)."""
    if before is None:
        return dict(row)
    return {**row, **{name: row[name] or before[name] for name in ("scheduled_at", "reason")}}


def hour_of(when: datetime) -> str:
    """The UTC hour `when` falls in, as `tick_hour_counts` keys it."""
    return f"{as_utc(when).astimezone(UTC):%Y-%m-%dT%H}"


def _hour_key(row: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """(level, hour, status, reason) a row counts under in `tick_hour_counts`, if scheduled."""
    if row["scheduled_at"] is None:
        return None
    hour = hour_of(row["scheduled_at"])
    reason = (row["reason"] or "") if row["status"] == "skipped" else ""
    return row["level"], hour, row["status"], reason


def _first_run(
    before: Mapping[str, Any] | None, times: Sequence[tuple[bool, datetime, str]]
) -> tuple[str, timedelta] | None:
    """(level, run time) if the tick first has both a start and an end in this batch.

    The run time is from its first start: a retried tick ran all its attempts.
    """
    started = before and before["started_at"]
    finished = before and before["finished_at"]
    if started and finished:
        return None
    for start, when, level in times:
        if start:
            started = started or when
        else:
            finished = when
        if started and finished:
            return level, as_utc(finished) - as_utc(started)
    return None


def roll_up(conn: sa.Connection, before: date) -> None:
    """Move the hour counts of the days before `before` into their days' rows.

    A range of the hour index: after a day's first roll-up, what is left there is the
    corrections of ticks that were open, so the archive's batches call this at little
    cost. Sums move whole, so every reader that adds both tables counts the same.
    """
    hours = tick_hour_counts.c
    old = hours.hour < f"{before:%Y-%m-%d}T00"
    day = sa.func.substr(hours.hour, 1, 10)
    query = (
        sa.select(hours.level, day, hours.status, hours.reason, sa.func.sum(hours.ticks))
        .where(old)
        .group_by(hours.level, day, hours.status, hours.reason)
    )
    moved = [(*row[:4], int(row[4])) for row in conn.execute(query) if row[4]]
    conn.execute(tick_hour_counts.delete().where(old))
    if not moved:
        return
    add_sums(conn, tick_day_counts, ("level", "day", "status", "reason"), moved)
    days = tick_day_counts.c.day
    # Written out, as the partial index's predicate of the hour counts is.
    conn.execute(
        tick_day_counts.delete().where(
            days >= min(row[1] for row in moved),
            days <= max(row[1] for row in moved),
            sa.text("ticks = 0"),
        )
    )


def status_counts(conn: sa.Connection) -> list[tuple[str, str, int]]:
    """(level, status, ticks) for every pair that holds a tick now."""
    query = sa.select(tick_status_counts).order_by(
        tick_status_counts.c.level, tick_status_counts.c.status
    )
    return [(level, status, int(count)) for level, status, count in conn.execute(query)]


@dataclass(frozen=True)
class Durations:
    """Run times of a level's ended ticks, as a cumulative histogram over `DURATION_BUCKETS`."""

    level: str
    count: int
    total_seconds: float
    at_most: list[int]
    """Ticks that ran at most each bound, in the order of `DURATION_BUCKETS`."""


def durations(conn: sa.Connection, levels: Sequence[str] | None = None) -> list[Durations]:
    """Per level with an ended tick (of `levels`, if given), its run times, from the counters."""
    totals = tick_level_totals.c
    query = (
        sa.select(totals.level, totals.ended, totals.duration_us)
        .where(totals.ended > 0)
        .order_by(totals.level)
    )
    bucket_rows = sa.select(tick_duration_buckets)
    if levels is not None:
        query = query.where(among(conn, totals.level, levels))
        bucket_rows = bucket_rows.where(among(conn, tick_duration_buckets.c.level, levels))
    buckets: dict[str, dict[int, int]] = defaultdict(dict)
    for level, le_ms, count in conn.execute(bucket_rows):
        buckets[level][int(le_ms)] = int(count)
    found = []
    for level, ended, micros in conn.execute(query):
        within = buckets[level]
        cumulative, at_most = 0, []
        for bound in _BOUNDS_MS:
            cumulative += within.get(bound, 0)
            at_most.append(cumulative)
        found.append(Durations(level, int(ended), int(micros) / 1e6, at_most))
    return found


def tool_cap_counts(conn: sa.Connection) -> list[tuple[str, int, int]]:
    """(level, ticks whose tool-call cap refused a call, calls it refused) per level."""
    totals = tick_level_totals.c
    query = sa.select(totals.level, totals.cap_hits, totals.calls_refused).order_by(totals.level)
    return [(level, int(hits), int(calls)) for level, hits, calls in conn.execute(query)]


@dataclass(frozen=True)
class TickCounters:
    """Every level's counters at one moment: what a `/metrics` scrape shows of the ticks."""

    statuses: list[tuple[str, str, int]]
    """`status_counts`."""
    durations: list[Durations]
    tool_caps: list[tuple[str, int, int]]
    """`tool_cap_counts`."""


def tick_counters(store: EventStore) -> TickCounters:
    """Counts by status, run-time histograms and refused calls of every level, in one read."""
    with store.read_transaction() as conn:
        return TickCounters(status_counts(conn), durations(conn), tool_cap_counts(conn))
