"""Each level's newest tick and newest ended tick, kept by the ticks projection.

The dashboard asks, at every refresh and for every level, for the status of its newest
tick (which lanes come first) and for its last outcome (the health panel). Walking the
end of each level's (level, list time) index cost one probe a level, 70 to 90 ms at 1,000
levels on PostgreSQL (RESULTS "Growth run made feasible"); this table answers both in
one read of a row a level. "Newest" is by list time (`sort_at`), then tick id, as the
tick lists order them.

The fold keeps the rows from the batch's final tick rows alone, but for two cases it
cannot see from them: the newest tick (or newest ended one) of a level moved back in
time or stopped being ended, or left with its archived events (`naming`). Those levels
are looked up again in the `ticks` table (`harness.projections.ticks.settle_latest`),
so the rows always equal what a walk of the index would answer, and a rebuild gives
the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from harness.projections.base import upsert
from harness.store import among, metadata
from harness.timespec import as_utc

ENDED = ("completed", "failed", "timed_out", "cancelled", "lost")
"""Statuses of a tick that ran (or was meant to) and ended; skipped ones never ran."""

tick_level_latest = sa.Table(
    "tick_level_latest",
    metadata,
    sa.Column("level", sa.String(100), primary_key=True),
    sa.Column("tick_id", sa.String(200), nullable=False),
    sa.Column("sort_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("ended_tick_id", sa.String(200)),
    sa.Column("ended_sort_at", sa.DateTime(timezone=True)),
    sa.Column("ended_status", sa.String(20)),
    sa.Column("ended_at", sa.DateTime(timezone=True)),
)
"""A row per level with a tick in `ticks` (migration 0024); the `ended_` columns are
null while none of its ticks has ended."""


@dataclass(frozen=True, slots=True)
class Latest:
    """A tick as this table keeps it: its id, list time, status and (ended) end."""

    tick_id: str
    sort_at: datetime
    status: str
    finished_at: datetime | None

    @property
    def key(self) -> tuple[datetime, str]:
        """Its place in a level's list, newest last."""
        return (self.sort_at, self.tick_id)


Kept = dict[str, tuple[Latest | None, Latest | None]]
"""Each level's (newest, newest ended) tick; None: it has none."""
Refind = Callable[[sa.Connection, list[str]], Kept]
"""`Kept` of the levels, looked up in the `ticks` table."""


def note(
    conn: sa.Connection,
    rows: Iterable[Latest],
    levels: Mapping[str, str],
    moved_from: Iterable[str],
    refind: Refind,
) -> None:
    """Fold a batch's ticks, as stored after it (`levels`: tick id -> level), into the rows.

    A level's newest tick is the newest of its stored newest and the batch's ticks, unless
    the stored one is in the batch and moved back: then one of the ticks the batch did not
    touch may be newer, and only the table knows (`refind`). Likewise for ended ticks,
    and for the levels a tick of the batch left (`moved_from`: an event named another
    level than its tick's earlier ones).
    """
    batch: dict[str, dict[str, Latest]] = {}
    for row in rows:
        batch.setdefault(levels[row.tick_id], {})[row.tick_id] = row
    stored = _stored(conn, list(batch))
    kept: Kept = {}
    lost = list(dict.fromkeys(moved_from))
    for level, mine in batch.items():
        if level in lost:
            continue
        newest, ended = stored.get(level, (None, None))
        ticks = list(mine.values())
        newest, gone = _newer(newest, ticks, lambda _: True)
        ended, gone_ended = _newer(ended, ticks, lambda tick: tick.status in ENDED)
        if gone or gone_ended:
            lost.append(level)
        else:
            kept[level] = (newest, ended)
    kept.update(refind(conn, lost) if lost else {})
    write(conn, kept)


def naming(conn: sa.Connection, tick_ids: Collection[str]) -> list[str]:
    """The levels whose kept ticks are among `tick_ids` (ticks whose rows are leaving)."""
    found = conn.execute(
        sa.select(
            tick_level_latest.c.level,
            tick_level_latest.c.tick_id,
            tick_level_latest.c.ended_tick_id,
        )
    )
    return [level for level, newest, ended in found if newest in tick_ids or ended in tick_ids]


def _newer(
    kept: Latest | None, batch: list[Latest], counts: Callable[[Latest], bool]
) -> tuple[Latest | None, bool]:
    """The newest of `kept` and the batch's ticks that `counts`, and whether the table must say.

    The table must say when `kept` is in the batch and no longer counts, or moved back.
    """
    candidates = [tick for tick in batch if counts(tick)]
    if kept is not None:
        again = next((tick for tick in batch if tick.tick_id == kept.tick_id), None)
        if again is None:
            candidates.append(kept)
        elif not counts(again) or again.key < kept.key:
            return None, True
    return max(candidates, key=lambda tick: tick.key, default=None), False


def _stored(conn: sa.Connection, levels: list[str]) -> Kept:
    c = tick_level_latest.c
    found: Kept = {}
    for row in conn.execute(sa.select(tick_level_latest).where(c.level.in_(levels))):
        ended = None
        if row.ended_tick_id is not None:
            ended = Latest(
                row.ended_tick_id, as_utc(row.ended_sort_at), row.ended_status, as_utc(row.ended_at)
            )
        found[row.level] = (Latest(row.tick_id, as_utc(row.sort_at), row.status, None), ended)
    return found


def write(conn: sa.Connection, rows: Mapping[str, tuple[Latest | None, Latest | None]]) -> None:
    """Replace the levels' rows; a level without a tick has none."""
    gone = [level for level, (newest, _) in rows.items() if newest is None]
    if gone:
        conn.execute(tick_level_latest.delete().where(tick_level_latest.c.level.in_(gone)))
    values = [
        {
            "level": level,
            "tick_id": newest.tick_id,
            "sort_at": newest.sort_at,
            "status": newest.status,
            **_ended_columns(ended),
        }
        for level, (newest, ended) in rows.items()
        if newest is not None
    ]
    if not values:
        return
    insert = upsert(conn, tick_level_latest)
    columns = [name for name in values[0] if name != "level"]
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=["level"], set_={name: insert.excluded[name] for name in columns}
        ),
        values,
    )


def _ended_columns(ended: Latest | None) -> dict[str, object]:
    if ended is None:
        return dict.fromkeys(("ended_tick_id", "ended_sort_at", "ended_status", "ended_at"))
    return {
        "ended_tick_id": ended.tick_id,
        "ended_sort_at": ended.sort_at,
        "ended_status": ended.status,
        "ended_at": ended.finished_at,
    }


def newest_statuses(conn: sa.Connection, levels: Iterable[str]) -> dict[str, str]:
    """Each of `levels`' newest tick's status; a level without a tick is absent."""
    c = tick_level_latest.c
    query = sa.select(c.level, c.status).where(among(conn, c.level, levels))
    return {level: status for level, status in conn.execute(query)}


def newest_ended(conn: sa.Connection, levels: Iterable[str]) -> dict[str, Latest]:
    """Each of `levels`' newest ended tick; a level none of whose ticks ended is absent."""
    c = tick_level_latest.c
    query = sa.select(c.level, c.ended_tick_id, c.ended_sort_at, c.ended_status, c.ended_at)
    chosen = query.where(among(conn, c.level, levels), c.ended_tick_id.is_not(None))
    return {
        level: Latest(tick_id, as_utc(sort_at), status, as_utc(at))
        for level, tick_id, sort_at, status, at in conn.execute(chosen)
    }
