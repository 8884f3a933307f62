"""A range of the event log read on a bare DBAPI connection, in any process.

The store writes the query (`harness.store.sql` owns every statement on `events`); this
module runs it with the driver alone and decodes the rows, for the store's own windowed
reads and for a worker process that must not import the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, count, repeat
from operator import itemgetter
from typing import Any, Literal

import orjson

EventData = tuple[int, str, dict[str, Any]]
"""(global_position, type, data) of an event read for a fold: a plain tuple, as a NamedTuple
costs ~0.8 s per million and a fold needs nothing else of the record."""

SLICE = 5000
"""Rows fetched and decoded at a time: a fold never holds more of its range at once."""


def open_cursor(
    connection: Any, backend: str, sql: str, parameters: Sequence[Any], name: str | None = None
) -> Any:
    """A DBAPI cursor that ran `sql` (written with `?` marks); the caller closes it.

    PostgreSQL's is binary: times and UUIDs arrive without a round trip through text, and
    JSON arrives as text (the driver's C loader), as SQLite's does, for the caller to
    parse when and if it needs it: psycopg's own JSON loader is a Python call per value.
    A `name` makes it a server-side cursor, which fetches `SLICE` rows at a time instead
    of the whole result at `execute`: a range of millions of events never sits in memory.
    """
    if backend == "postgresql":
        from psycopg.types.string import TextBinaryLoader  # a SQLite store never imports it

        cursor = connection.cursor(name, binary=True) if name else connection.cursor(binary=True)
        cursor.adapters.register_loader("json", TextBinaryLoader)
        cursor.execute(sql.replace("?", "%s"), parameters)
    else:
        cursor = connection.cursor()
        cursor.execute(sql, parameters)
    return cursor


def event_slices(cursor: Any, kinds: Sequence[str]) -> Iterator[Iterable[EventData]]:
    """The cursor's rows as `EventData`, one `fetchmany` slice at a time, decoded on demand.

    The cursor selects `global_position, data`, with `type` between them unless it asked
    for one kind only (a type string built per row costs a million events 0.1 s). Each
    slice is decoded by C iterators (zip, map): a Python loop over the rows would cost a
    million events about a third of a second.
    """
    single = len(kinds) == 1
    while rows := cursor.fetchmany(SLICE):
        if single:
            positions, texts = zip(*rows, strict=True)
            yield zip(positions, repeat(kinds[0]), map(orjson.loads, texts), strict=False)
        else:
            positions, types, texts = zip(*rows, strict=True)
            yield zip(positions, types, map(orjson.loads, texts), strict=True)


def counted(events: Iterable[EventData]) -> tuple[Iterator[EventData], Iterator[int]]:
    """The events, and a counter whose next value, once they are all read, is their number.

    zip draws from the counter only after the events yield, so what is left in it counts
    them, at C speed: a counting generator would cost a Python call per event.
    """
    counter = count()
    return map(itemgetter(0), zip(events, counter, strict=False)), counter


@dataclass(frozen=True)
class Database:
    """How another process connects: a SQLite file, or psycopg's keyword arguments.

    The password is kept apart and never shown: a job reaches a worker over its stdin
    pipe, never its argv, which `ps` shows to every user of the host.
    """

    backend: Literal["sqlite", "postgresql"]
    arguments: Mapping[str, Any]
    password: str | None = field(default=None, repr=False)

    def connect(self) -> Any:
        """A new DBAPI connection (SQLite's waits for a busy database as the store's does)."""
        if self.backend == "postgresql":
            import psycopg

            return psycopg.connect(**self.arguments, password=self.password)
        import sqlite3

        return sqlite3.connect(**self.arguments)


@dataclass(frozen=True)
class RangeQuery:
    """The events of `kinds` in one range of positions, as the store selects them."""

    database: Database
    sql: str
    parameters: tuple[Any, ...]
    kinds: tuple[str, ...]

    def events(self) -> Iterator[EventData]:
        """The range's events in global order, on a connection of its own, closed at the end.

        PostgreSQL reads them in one transaction through a server-side cursor; the range
        lies below a tracking horizon, so every event in it is committed already.
        """
        connection = self.database.connect()
        try:
            cursor = open_cursor(
                connection, self.database.backend, self.sql, self.parameters, name="fold_range"
            )
            try:
                yield from chain.from_iterable(event_slices(cursor, self.kinds))
            finally:
                cursor.close()
        finally:
            connection.close()
