"""PostgreSQL's partitions by day of `events` (migration 0010) and `tick_rows` (0027).

Tick streams live in one partition of `events` per UTC day they began (`events_YYYYMMDD`),
every other stream in `events_hot`, and `events_default` catches a tick stream whose day
has no partition yet. A tick's packed row (`harness.store.tick_rows`) keeps that same
day, in `tick_rows_YYYYMMDD` (`tick_rows_default` catching the rest): a day's two
partitions are made together, and once its ticks are archived both leave whole. Days are
made ahead (today and the next two) by `tickwork migrate`, by `tickwork run` daily, by
the archiver, and by each writer before its first append of a day, so the default
partitions stay empty; a day made while a default holds some of that day's rows takes
them out of it.

A day is made as a table of its own and then attached, which takes only a SHARE UPDATE
EXCLUSIVE lock on the parent (and an exclusive one on the default partition while it is
checked, empty): appends and reads go on (`CREATE TABLE … PARTITION OF` would wait for
every running read and hold every append meanwhile). Leaving is DETACH and DROP
in the caller's transaction: its lock on the parent is exclusive, but held only for the
catalog change, and the transaction commits or leaves nothing changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

TICK_STREAM_PREFIX = "tick-"
AHEAD_DAYS = 2
"""Days after today whose partitions are made in advance."""
_LOCK = 0x7061727469  # "parti": one process makes partitions at a time


@dataclass(frozen=True)
class Partitioned:
    """A table split by the UTC day of its tick: one partition a day, and a default.

    `events` lists its days (its hot streams have a partition of their own, for NULL);
    `tick_rows` ranges over them, one day wide.
    """

    table: str
    key: str
    ranged: bool

    @property
    def default(self) -> str:
        """The partition that holds a day's rows while that day has none of its own."""
        return f"{self.table}_default"

    def partition(self, day: date) -> str:
        """The table that holds the rows of `day`."""
        return f"{self.table}_{day:%Y%m%d}"

    def bounds(self, day: date) -> str:
        """The values `day`'s partition takes."""
        if self.ranged:
            return f"FROM ('{day}') TO ('{day + timedelta(days=1)}')"
        return f"IN ('{day}')"

    def day_of(self, name: str) -> date | None:
        """The day a partition's name says (None: not a day's partition)."""
        match = re.fullmatch(rf"{self.table}_(\d{{4}})(\d{{2}})(\d{{2}})", name)
        return None if match is None else date(*map(int, match.groups()))


EVENTS = Partitioned("events", "tick_day", ranged=False)
TICK_ROWS = Partitioned("tick_rows", "day", ranged=True)
TABLES = (EVENTS, TICK_ROWS)
DEFAULT = EVENTS.default


class PartitionHeld(Exception):
    """A day's partition holds rows its archive does not: it stays (nothing was changed)."""


def is_tick_stream(stream_id: str) -> bool:
    """Tick streams leave by day; every other stream stays hot."""
    return stream_id.startswith(TICK_STREAM_PREFIX)


def partition_name(day: date) -> str:
    """The table that holds the tick streams begun on `day`."""
    return EVENTS.partition(day)


def partitioned(engine: Engine) -> bool:
    """Whether the store's events and tick rows are partitioned (PostgreSQL)."""
    return engine.dialect.name == "postgresql"


def exists(conn: sa.Connection, name: str) -> bool:
    """Whether the table `name` exists."""
    return conn.exec_driver_sql("SELECT to_regclass(%s)", (name,)).scalar() is not None


def day_made(connection: Any, day: date) -> bool:
    """Whether both tables' partitions of `day` exist, asked in one statement.

    `connection`: a DB-API one, the writer's own. A tick process asked `ensure_days`,
    which took a pooled connection beside the writer's: a second session opened for each
    tick, for a day made days ahead.
    """
    names = [table.partition(day) for table in TABLES]
    query = " AND ".join(["to_regclass(%s) IS NOT NULL"] * len(names))
    return bool(connection.execute(f"SELECT {query}", names).fetchone()[0])


def is_empty(conn: sa.Connection, day: date, table: Partitioned = EVENTS) -> bool:
    """Whether `day`'s partition holds no row (read without taking a lock on the parent)."""
    query = f"SELECT NOT EXISTS (SELECT FROM {table.partition(day)})"
    return bool(conn.exec_driver_sql(query).scalar_one())


def ensure_days(engine: Engine, days: Iterable[date]) -> int:
    """Make the partitions of `days` that are missing, each taking its rows from the default.

    Both tables' partitions of a day, so a tick packed on any day that has events finds
    its row's partition. One process at a time (an advisory lock): another that made a
    day meanwhile is seen. Returns how many rows left the default partitions.
    """
    wanted = sorted(set(days))
    moved = 0
    with engine.connect() as conn, conn.begin():
        missing = [
            (table, day)
            for day in wanted
            for table in TABLES
            if not exists(conn, table.partition(day))
        ]
        if not missing:
            return 0
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_LOCK)))
        for table, day in missing:
            name = table.partition(day)
            if exists(conn, name):
                continue
            conn.exec_driver_sql(f"CREATE TABLE {name} (LIKE {table.table} INCLUDING DEFAULTS)")
            moved += conn.exec_driver_sql(
                f"WITH moved AS (DELETE FROM {table.default} WHERE {table.key} = %s RETURNING *), "
                f"kept AS (INSERT INTO {name} SELECT * FROM moved) SELECT count(*) FROM moved",
                (day,),
            ).scalar_one()
            conn.exec_driver_sql(
                f"ALTER TABLE {table.table} ATTACH PARTITION {name} FOR VALUES {table.bounds(day)}"
            )
    return moved


def prepare_partitions(engine: Engine, today: date) -> int:
    """Today's and the next days' partitions, and a home for any day a default holds.

    Returns how many rows left the default partitions (0 in steady state).
    """
    if not partitioned(engine):
        return 0
    with engine.connect() as conn:
        stray = [
            day
            for table in TABLES
            for day in conn.exec_driver_sql(
                f"SELECT DISTINCT {table.key} FROM {table.default}"
            ).scalars()
        ]
    ahead = [today + timedelta(days=n) for n in range(AHEAD_DAYS + 1)]
    return ensure_days(engine, [*stray, *ahead])


def default_rows(conn: sa.Connection, table: Partitioned = EVENTS) -> int:
    """Rows in a default partition: 0 in steady state (see `prepare_partitions`)."""
    return int(conn.exec_driver_sql(f"SELECT count(*) FROM {table.default}").scalar_one())


def days(conn: sa.Connection, table: Partitioned = EVENTS) -> list[date]:
    """The days that have a partition of `table`, oldest first."""
    names = conn.exec_driver_sql(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass",
        (table.table,),
    ).scalars()
    return sorted(day for day in map(table.day_of, names) if day is not None)


def detach(conn: sa.Connection, table: Partitioned, day: date, expected: int) -> bool:
    """Detach `day`'s partition of `table`, which must hold exactly `expected` rows.

    The count is taken once the partition is detached, so no write can land in it
    meanwhile; any other count raises PartitionHeld and the caller's transaction rolls
    the detach back, as does a missing partition expected to hold some (its rows were
    written elsewhere). False when there is no partition (and none was expected).
    """
    name = table.partition(day)
    if not exists(conn, name):
        if expected:
            raise PartitionHeld(f"{name} does not exist: the day's rows lie elsewhere")
        return False
    conn.exec_driver_sql(f"ALTER TABLE {table.table} DETACH PARTITION {name}")
    held = conn.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one()
    if held != expected:
        raise PartitionHeld(f"{name} holds {held} rows, {expected} of them archived")
    return True


def drop_day(conn: sa.Connection, day: date, expected: int) -> None:
    """Detach and drop `day`'s partition of `events`, which must hold exactly `expected` events.

    See `detach`. The ids and stream rows of its events go with it.
    """
    if not detach(conn, EVENTS, day, expected):
        return
    name = EVENTS.partition(day)
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
