"""A range of the event log read on a bare DBAPI connection, in any process.

The store writes the query (`harness.store.sql` owns every statement on `events`); this
module runs it with the driver alone and decodes the rows, for the store's own windowed
reads and for a worker process that must not import the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from itertools import count, islice, repeat
from operator import itemgetter
from typing import Any, Literal, TypeVar

import orjson

from harness.folds.packed import unpack_data

EventData = tuple[int, str, dict[str, Any]]
"""(global_position, type, data) of an event read for a fold: a plain tuple, as a NamedTuple
costs ~0.8 s per million and a fold needs nothing else of the record."""

Data = dict[str, Any]
"""An event's data, all a sum fold reads: its sums do not depend on order or position."""

T = TypeVar("T")

SLICE = 5000
"""Rows fetched and decoded at a time: a fold never holds more of its range at once."""


def open_cursor(connection: Any, backend: str, sql: str, parameters: Sequence[Any]) -> Any:
    """A DBAPI cursor that ran `sql` (written with `?` marks); the caller closes it.

    PostgreSQL's is binary: times and UUIDs arrive without a round trip through text, and
    JSON arrives as text (the driver's C loader), as SQLite's does, for the caller to
    parse when and if it needs it: psycopg's own JSON loader is a Python call per value.
    """
    if backend == "postgresql":
        cursor = connection.cursor(binary=True)
        _json_as_text(cursor)
        cursor.execute(sql.replace("?", "%s"), parameters)
    else:
        cursor = connection.cursor()
        cursor.execute(sql, parameters)
    return cursor


def _json_as_text(cursor: Any) -> None:
    """Have a psycopg cursor hand JSON over as text, for orjson to parse."""
    from psycopg.types.string import TextBinaryLoader  # a SQLite store never imports it

    cursor.adapters.register_loader("json", TextBinaryLoader)


def fetched(cursor: Any) -> Iterator[Sequence[Any]]:
    """A cursor's rows, `SLICE` at a time."""
    while rows := cursor.fetchmany(SLICE):
        yield rows


def _streamed(connection: Any, sql: str, parameters: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """PostgreSQL's rows, `SLICE` at a time, a range of any length in bounded memory.

    With libpq 17 or later (psycopg's binary wheels bring one) in chunked mode: the server
    sends rows without waiting to be asked, so it produces the next slice while this
    process decodes one; a range of 300,000 events took 0.9 s here, against 1.25 s for a
    client-side cursor (which holds all of them) and 1.5 s for a server-side one (a round
    trip per slice, during which the server works and the client waits): the fallback.
    """
    import psycopg

    if psycopg.pq.version() >= 170000:
        cursor = connection.cursor(binary=True)
        _json_as_text(cursor)
        rows = cursor.stream(sql.replace("?", "%s"), parameters, size=SLICE)
        while chunk := list(islice(rows, SLICE)):
            yield chunk
        return
    cursor = connection.cursor("fold_range", binary=True)
    _json_as_text(cursor)
    cursor.execute(sql.replace("?", "%s"), parameters)
    try:
        yield from fetched(cursor)
    finally:
        cursor.close()


def event_slices(
    slices: Iterable[Sequence[Any]], kinds: Sequence[str]
) -> Iterator[Iterable[EventData]]:
    """Rows of `global_position, data` as `EventData`, a slice at a time, decoded on demand.

    The rows hold `type` between the two unless the query asked for one kind only (a type
    string built per row costs a million events 0.1 s). Each slice is decoded by C
    iterators (zip, map): a Python loop over the rows would cost a million events about a
    third of a second.
    """
    single = len(kinds) == 1
    for rows in slices:
        if single:
            positions, texts = zip(*rows, strict=True)
            yield zip(positions, repeat(kinds[0]), map(orjson.loads, texts), strict=False)
        else:
            positions, types, texts = zip(*rows, strict=True)
            yield zip(positions, types, map(orjson.loads, texts), strict=True)


def counted(events: Iterable[T]) -> tuple[Iterator[T], Iterator[int]]:
    """The events, and a counter whose next value, once they are all read, is their number.

    zip draws from the counter only after the events yield, so what is left in it counts
    them, at C speed: a counting generator would cost a Python call per event.
    """
    counter = count()
    return map(itemgetter(0), zip(events, counter, strict=False)), counter


def load_driver(backend: str) -> None:
    """Import the driver of `backend` ("sqlite" or "postgresql") before it is needed."""
    import_module("psycopg" if backend == "postgresql" else "sqlite3")


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
class PackedQuery:
    """The rows of packed ticks that reach into a range, and which of their records to fold."""

    sql: str
    parameters: tuple[Any, ...]
    after: int
    upper: int
    kinds: tuple[str, ...]

    def data(self, connection: Any, backend: str) -> Iterator[Data]:
        """The data of the rows' records of `kinds` in (after, upper]."""
        for rows in _slices(connection, backend, self.sql, self.parameters):
            for tick_id, blob in rows:
                found = unpack_data(tick_id, bytes(blob), self.after, self.upper, self.kinds)
                yield from map(_LAST, found)


@dataclass(frozen=True)
class RangeQuery:
    """The data of the events in one range of positions, as the store selects them.

    The query selects `data` alone: a sum fold needs neither position nor type (it asks
    for its types), and not building them saves a PostgreSQL fold ~8 % of its time.
    Closed ticks packed whole (`packed`) are read after, in the same snapshot: a
    compaction moving records between the two reads is seen whole or not at all.
    """

    database: Database
    sql: str
    parameters: tuple[Any, ...]
    packed: PackedQuery | None = None

    def data(self) -> Iterator[Data]:
        """The range's events' data, on a connection of its own, closed at the end.

        The range lies below a tracking horizon, so every event in it is committed already.
        """
        connection = self.database.connect()
        backend = self.database.backend
        try:
            if self.packed is not None:
                _one_snapshot(connection, backend)
            for rows in _slices(connection, backend, self.sql, self.parameters):
                yield from map(orjson.loads, map(_FIRST, rows))
            if self.packed is not None:
                yield from self.packed.data(connection, backend)
        finally:
            connection.close()


def _one_snapshot(connection: Any, backend: str) -> None:
    """Have the connection's next statements read one snapshot of the database."""
    if backend == "postgresql":
        import psycopg

        connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    else:
        connection.execute("BEGIN")


def _slices(
    connection: Any, backend: str, sql: str, parameters: Sequence[Any]
) -> Iterator[Sequence[Any]]:
    """A query's rows, a slice at a time (SQLite's cursor steps through them anyway)."""
    if backend == "postgresql":
        yield from _streamed(connection, sql, parameters)
        return
    cursor = open_cursor(connection, "sqlite", sql, parameters)
    try:
        yield from fetched(cursor)
    finally:
        cursor.close()


_FIRST = itemgetter(0)
_LAST = itemgetter(2)
