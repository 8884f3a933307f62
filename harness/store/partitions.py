"""PostgreSQL's partitions of `events` (migration 0010): made ahead of their day, dropped whole.

Tick streams live in one partition per UTC day they began (`events_YYYYMMDD`), every
other stream in `events_hot`, and `events_default` catches a tick stream whose day has no
partition yet. Days are made ahead (today and the next two) by `tickwork migrate`, by
`tickwork run` daily, by the archiver, and by each writer before its first append of a
day, so the default partition stays empty; a day made while it holds some of that day's
rows takes them out of it.

A day is made as a table of its own and then attached, which takes only a SHARE UPDATE
EXCLUSIVE lock on `events` (and an exclusive one on the default partition while it is
checked, empty): appends and reads go on (`CREATE TABLE … PARTITION OF` would wait for
every running read and hold every append meanwhile). Leaving is DETACH and DROP
in the caller's transaction: its lock on `events` is exclusive, but held only for the
catalog change, and the transaction commits or leaves nothing changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

TICK_STREAM_PREFIX = "tick-"
DEFAULT = "events_default"
AHEAD_DAYS = 2
"""Days after today whose partitions are made in advance."""
_DAY_NAME = re.compile(r"^events_(\d{4})(\d{2})(\d{2})$")
_LOCK = 0x7061727469  # "parti": one process makes partitions at a time


class PartitionHeld(Exception):
    """A day's partition holds events its archive does not: it stays (nothing was changed)."""


def is_tick_stream(stream_id: str) -> bool:
    """Tick streams leave by day; every other stream stays hot."""
    return stream_id.startswith(TICK_STREAM_PREFIX)


def partition_name(day: date) -> str:
    """The table that holds the tick streams begun on `day`."""
    return f"events_{day:%Y%m%d}"


def partitioned(engine: Engine) -> bool:
    """Whether the store's events are partitioned (PostgreSQL)."""
    return engine.dialect.name == "postgresql"


def _exists(conn: sa.Connection, name: str) -> bool:
    return conn.exec_driver_sql("SELECT to_regclass(%s)", (name,)).scalar() is not None


def is_empty(conn: sa.Connection, day: date) -> bool:
    """Whether `day`'s partition holds no event (read without taking a lock on `events`)."""
    query = f"SELECT NOT EXISTS (SELECT FROM {partition_name(day)})"
    return bool(conn.exec_driver_sql(query).scalar_one())


def ensure_days(engine: Engine, days: Iterable[date]) -> int:
    """Make the partitions of `days` that are missing, each taking its rows from the default.

    One process at a time (an advisory lock): another that made a day meanwhile is seen.
    Returns how many events left the default partition.
    """
    wanted = sorted(set(days))
    moved = 0
    with engine.connect() as conn, conn.begin():
        missing = [day for day in wanted if not _exists(conn, partition_name(day))]
        if not missing:
            return 0
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_LOCK)))
        for day in missing:
            name = partition_name(day)
            if _exists(conn, name):
                continue
            conn.exec_driver_sql(f"CREATE TABLE {name} (LIKE events INCLUDING DEFAULTS)")
            moved += conn.exec_driver_sql(
                f"WITH moved AS (DELETE FROM {DEFAULT} WHERE tick_day = %s RETURNING *), "
                f"kept AS (INSERT INTO {name} SELECT * FROM moved) SELECT count(*) FROM moved",
                (day,),
            ).scalar_one()
            conn.exec_driver_sql(
                f"ALTER TABLE events ATTACH PARTITION {name} FOR VALUES IN ('{day}')"
            )
    return moved


def prepare_partitions(engine: Engine, today: date) -> int:
    """Today's and the next days' partitions, and a home for any tick day the default holds.

    Returns how many events left the default partition (0 in steady state).
    """
    if not partitioned(engine):
        return 0
    with engine.connect() as conn:
        stray = conn.exec_driver_sql(f"SELECT DISTINCT tick_day FROM {DEFAULT}").scalars().all()
    ahead = [today + timedelta(days=n) for n in range(AHEAD_DAYS + 1)]
    return ensure_days(engine, [*stray, *ahead])


def default_rows(conn: sa.Connection) -> int:
    """Events in the default partition: 0 in steady state (see `prepare_partitions`)."""
    return int(conn.exec_driver_sql(f"SELECT count(*) FROM {DEFAULT}").scalar_one())


def days(conn: sa.Connection) -> list[date]:
    """The days that have a partition, oldest first."""
    names = conn.exec_driver_sql(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'events'::regclass"
    ).scalars()
    found = []
    for name in names:
        match = _DAY_NAME.match(name)
        if match:
            found.append(date(*map(int, match.groups())))
    return sorted(found)


def drop_day(conn: sa.Connection, day: date, expected: int) -> None:
    """Detach and drop `day`'s partition, which must hold exactly `expected` events.

    The count is taken once the partition is detached, so no append can land in it
    meanwhile; any other count raises PartitionHeld and the caller's transaction rolls
    the detach back, as does a missing partition expected to hold some (its events
    were written elsewhere). The ids and stream rows of its events go with it.
    """
    name = partition_name(day)
    if not _exists(conn, name):
        if expected:
            raise PartitionHeld(f"{name} does not exist: the day's events lie elsewhere")
        return
    conn.exec_driver_sql(f"ALTER TABLE events DETACH PARTITION {name}")
    held = conn.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one()
    if held != expected:
        raise PartitionHeld(f"{name} holds {held} events, {expected} of them archived")
    conn.exec_driver_sql(f"DELETE FROM event_ids i USING {name} e WHERE i.event_id = e.event_id")
    conn.exec_driver_sql(
        f"DELETE FROM tick_streams s USING {name} e "
        "WHERE s.stream_id = e.stream_id AND e.stream_position = 1"
    )
    conn.exec_driver_sql(f"DROP TABLE {name}")


def delete_positions(conn: sa.Connection, positions: list[int]) -> int:
    """Delete events at `positions`, with their ids and (whole streams) their stream rows."""
    result = conn.exec_driver_sql(
        "WITH gone AS (DELETE FROM events WHERE global_position = ANY(%s) "
        "RETURNING event_id, stream_id, stream_position), "
        "ids AS (DELETE FROM event_ids WHERE event_id IN (SELECT event_id FROM gone)), "
        "streams AS (DELETE FROM tick_streams WHERE stream_id IN "
        "(SELECT stream_id FROM gone WHERE stream_position = 1)) "
        "SELECT count(*) FROM gone",
        (positions,),
    )
    return int(result.scalar_one())
