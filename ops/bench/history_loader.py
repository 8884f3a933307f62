"""Synthetic history, fast: ticks shaped like real ones, laid out as the store lays them out.

Shared by `growth_bench.py` and `archive_bench.py` (and the benches that load through
them). A tick is rendered from its shape's JSON templates (`Shape`: encoded once through
the event models and checked against them byte for byte at import), not built from
pydantic models, in a thread ahead of the inserts. A closed tick goes straight into its
`tick_rows` row, packed by the store's own encoder (`harness.store.tick_rows`), at the
positions its events would have had, as compaction leaves it once every checkpoint has
passed; an open tick's events go into `events`. SQLite: raw `executemany` with explicit
positions, LOAD_MINUTES of history a transaction, no journal and no syncs for the load
only (WAL again after); PostgreSQL: one transaction a minute laid out as the writer lays
out its appends (positions `(xid << 20) + k`, every tick stream in its day's partition,
its ids in `event_ids`, its day in `tick_streams`), rows sent by COPY.

`check_layout` appends a tick through the store, lets the store pack it, and compares it
with a loaded one, event rows and packed rows both: a mismatch stops the bench, whose
figures would describe another layout.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from queue import Queue
from typing import Any
from uuid import UUID

import orjson
import psycopg
import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.engine import make_url

from harness.contracts.events import (
    BudgetSpent,
    Event,
    ModelCalled,
    ModelCallStarted,
    TickCompleted,
    TickFailed,
    TickScheduled,
    TickStarted,
    ToolCalled,
    TranscriptEntry,
)
from harness.contracts.records import StoredEvent
from harness.folds.packed import records_of
from harness.store import open_store, schema
from harness.store.engine import stored_utc
from harness.store.partitions import ensure_days, partitioned, prepare_partitions
from harness.store.sql import SqlEventStore
from harness.store.tick_rows import CHECKPOINT, _row, compact, unpack

LEVELS = [f"l{n:04d}" for n in range(1000)]
PER_MINUTE = len(LEVELS)
"""Ticks a minute: every level ticks every minute."""
IN_FLIGHT = 50
"""The newest ticks have not ended yet."""
WORDS = (
    "the a of to and in is for on that with as it was at by from this be are or an not "
    "pager alert ticket queue deploy build test error retry latency disk memory cpu host "
    "service level tick model tool call result summary checked found moved closed opened "
    "owner team incident review merge branch release version config budget spend token "
    "quiet busy two three four none some every most new old last next first late early "
    "done pending failed passed green red yellow dashboard metric p95 p50 minute hour day "
    "week user customer report note agent says asked answered looked read wrote ran "
    "because after before while until since when then so but also only still again"
)


def _transcript(chars: int = 2800) -> str:
    """Words and numbers drawn at random: compressed, 2.35 to 1, as prose is (2 to 1).

    A sentence repeated 58 times, what this was, compresses 40 to 1 and flattered every
    store that compresses (PostgreSQL's TOAST kept it in 285 bytes).
    """
    rng = random.Random(58)
    vocabulary = WORDS.split()
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < chars:
        words.append(rng.choice(vocabulary) if rng.random() > 0.1 else str(rng.randrange(99999)))
    return " ".join(words)[:chars]


TRANSCRIPT = _transcript()
"""~2.8 KB: half of a tick's payload is its transcript."""
TOOL_TICKS = 0.65
"""Share of ticks with three model calls and two tool calls (15 events), the rest have
two calls and one tool call (11 events): 13.6 events a tick on average."""


# --- synthetic history ----------------------------------------------------------------


def tick_events(tick_id: str, level: str, start: datetime, calls: int, ending: str) -> list[Event]:
    """One tick's events as a worker and its runner record them; `ending` is one of ENDINGS."""
    at = iter(start + timedelta(seconds=s) for s in range(TICK_SECONDS))
    found: list[Event] = [
        TickScheduled(tick_id=tick_id, level=level, slot=start, occurred_at=next(at)),
        TickStarted(tick_id=tick_id, level=level, pid=4242, host="bench", occurred_at=next(at)),
    ]
    for call in range(1, calls + 1):
        spend = BudgetSpent(
            tick_id=tick_id,
            level=level,
            model="gpt-4o-mini",
            prompt_tokens=1200 * call,
            completion_tokens=80,
            occurred_at=next(at),
        )
        found += [
            ModelCallStarted(
                tick_id=tick_id,
                level=level,
                call=call,
                model="gpt-4o-mini",
                estimated_input_tokens=1200 * call,
                occurred_at=spend.occurred_at,
            ),
            spend,
            ModelCalled(
                tick_id=tick_id,
                level=level,
                model="gpt-4o-mini",
                provider="127.0.0.1:8000",
                call=call,
                duration_ms=850.0,
                stop_reason="tool_use" if call < calls else "end_turn",
                prompt_tokens=spend.prompt_tokens,
                completion_tokens=spend.completion_tokens,
                budget_event_id=spend.event_id,
                occurred_at=spend.occurred_at,
            ),
        ]
        if call < calls:
            found.append(
                ToolCalled(
                    tick_id=tick_id,
                    level=level,
                    name="rag_lookup",
                    status="ok",
                    duration_ms=40.0,
                    occurred_at=next(at),
                )
            )
    found.append(
        TranscriptEntry(
            tick_id=tick_id, level=level, kind="assistant", text=TRANSCRIPT, occurred_at=next(at)
        )
    )
    if ending == "failed":
        found.append(
            TickFailed(tick_id=tick_id, level=level, reason="empty output", occurred_at=next(at))
        )
    elif ending == "completed":
        found.append(
            TickCompleted(
                tick_id=tick_id,
                level=level,
                result_path=f"/var/lib/tickwork/results/{level}/{tick_id}.json",
                stop_reason="end_turn",
                prompt_tokens=1200 * calls * (calls + 1) // 2,
                completion_tokens=80 * calls,
                model_calls=calls,
                tool_calls=calls - 1,
                occurred_at=next(at),
            )
        )
    return found


TICK_SECONDS = 100
"""A tick's events are a second apart, from its start."""
ENDINGS = ("completed", "failed", "open")
TEMPLATE_TICK, TEMPLATE_LEVEL = "TICKTEMPLATE", "LEVELTEMPLATE"
TEMPLATE_START = datetime(2000, 1, 1, tzinfo=UTC)
_TIME = TypeAdapter(datetime)


def json_times(start: datetime) -> list[str]:
    """A tick's event times as its events' JSON spells them, second by second from `start`."""
    return [
        str(_TIME.dump_python(start + timedelta(seconds=s), mode="json"))
        for s in range(TICK_SECONDS)
    ]


@dataclass(frozen=True)
class Shape:
    """A kind of tick (its calls and its ending) encoded once, as `str.format` templates.

    Ticks of a shape differ only in id, level, times and event ids, so a tick is a few
    string substitutions instead of a dozen pydantic models, which made 1M events take 14
    minutes to load. `data[k].format(tick=, level=, t=json_times(start), ids=event ids)`
    is event k's JSON; `checked` proves it against the models at another tick and time.
    """

    types: tuple[str, ...]
    versions: tuple[int, ...]
    data: tuple[str, ...]
    seconds: tuple[int, ...]
    ended: bool
    named: tuple[int, ...]
    """The events whose ids other events' data name (a call's `budget_event_id`)."""

    @classmethod
    def of(cls, calls: int, ending: str) -> Shape:
        found = tick_events(TEMPLATE_TICK, TEMPLATE_LEVEL, TEMPLATE_START, calls, ending)
        ids = [(str(event.event_id), f"{{ids[{k}]}}") for k, event in enumerate(found)]
        times = [(f'"{t}"', f'"{{t[{s}]}}"') for s, t in enumerate(json_times(TEMPLATE_START))]
        templates = []
        for event in found:
            record = event.to_record()
            assert record.metadata == {}, "a tick's events carry no metadata here"
            text = orjson.dumps(record.data).decode().replace("{", "{{").replace("}", "}}")
            text = text.replace(TEMPLATE_TICK, "{tick}").replace(TEMPLATE_LEVEL, "{level}")
            for old, new in [*ids, *times]:
                text = text.replace(old, new)
            templates.append(text)
        return cls(
            types=tuple(event.type for event in found),
            versions=tuple(event.to_record().version for event in found),
            data=tuple(templates),
            seconds=tuple(int((e.occurred_at - TEMPLATE_START).total_seconds()) for e in found),
            ended=ending != "open",
            named=tuple(k for k, (_, new) in enumerate(ids) if any(new in t for t in templates)),
        )

    def render(self, tick_id: str, level: str, times: list[str], ids: list[str]) -> list[str]:
        """The JSON of each event of one tick: `times` from `json_times`, `ids` its event ids."""
        named = {k: str(UUID(ids[k])) for k in self.named}
        return [text.format(tick=tick_id, level=level, t=times, ids=named) for text in self.data]

    def checked(self, calls: int, ending: str) -> Shape:
        """This shape, once its templates render byte for byte what the models encode."""
        tick_id, level = "l0042-20261201T101010-0000abcd", "l0042"
        start = datetime(2026, 12, 1, 10, 10, 10, 123456, tzinfo=UTC)
        found = tick_events(tick_id, level, start, calls, ending)
        rendered = self.render(tick_id, level, json_times(start), [e.event_id.hex for e in found])
        for event, text in zip(found, rendered, strict=True):
            expected = orjson.dumps(event.to_record().data).decode()
            if text != expected:
                raise SystemExit(f"template of {event.type} renders {text}, not {expected}")
        return self


SHAPES = {
    (calls, ending): Shape.of(calls, ending).checked(calls, ending)
    for calls in (2, 3)
    for ending in ENDINGS
}


@dataclass(frozen=True)
class Span:
    """Whole minutes of history, 1,000 ticks each (the last may hold fewer), ending at `end`.

    Tick `n` (counted from `first`) is of level `n % 1000`; the last `in_flight` ticks of
    the span have not ended. A span appended to a kept store starts where it ended.
    """

    end: datetime
    ticks: int
    first: int = 0
    in_flight: int = IN_FLIGHT

    @classmethod
    def of_events(cls, events: int, end: datetime) -> Span:
        """About `events` events of history (13.6 a tick) ending at `end`."""
        return cls(end, round(events / (11 + 4 * TOOL_TICKS)))

    @property
    def minutes(self) -> int:
        return -(-self.ticks // PER_MINUTE)

    def start(self, minute: int) -> datetime:
        return self.end - timedelta(minutes=self.minutes - minute, seconds=30)


@dataclass(frozen=True)
class TickRows:
    """One tick's rows: its events' ids, JSON and second offsets, by stream position - 1."""

    tick_id: str
    shape: Shape
    ids: list[str]
    """32 hex digits, as SQLite keeps them (PostgreSQL reads them as well)."""
    data: list[str]

    @property
    def stream(self) -> str:
        return f"tick-{self.tick_id}"

    def packed(self, packing: bool) -> bool:
        """Whether the tick is in its `tick_rows` row rather than in `events`."""
        return packing and self.shape.ended


VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def event_ids(count: int) -> list[str]:
    """Random version 4 UUIDs, as `uuid4` makes them, in a third of its time."""
    block = os.urandom(16 * count).hex()
    return [
        f"{block[i : i + 12]}4{block[i + 13 : i + 16]}{VARIANT[block[i + 16]]}"
        f"{block[i + 17 : i + 32]}"
        for i in range(0, 32 * count, 32)
    ]


Minute = tuple[datetime, list[TickRows]]
"""A minute of history: its start, and its ticks."""


def history(span: Span) -> Iterator[Minute]:
    """Each minute's start and its ticks, rendered from the shapes."""
    rng = random.Random(24 + span.first)
    for minute in range(span.minutes):
        start = span.start(minute)
        times = json_times(start)
        ticks = []
        for k in range(minute * PER_MINUTE, min(span.ticks, (minute + 1) * PER_MINUTE)):
            n = span.first + k
            level = LEVELS[n % PER_MINUTE]
            tick_id = f"{level}-{start:%Y%m%dT%H%M%S}-{n:08x}"
            calls = 3 if rng.random() < TOOL_TICKS else 2
            ending = (
                "open"
                if span.ticks - k <= span.in_flight
                else "failed"
                if tick_id.endswith("7")
                else "completed"
            )
            shape = SHAPES[calls, ending]
            ids = event_ids(len(shape.types))
            data = shape.render(tick_id, level, times, ids)
            ticks.append(TickRows(tick_id, shape, ids, data))
        yield start, ticks


def ahead(minutes: Iterator[Minute], depth: int = 3) -> Iterator[Minute]:
    """The minutes, rendered by a thread up to `depth` ahead of the loader.

    Rendering is Python and holds the GIL; the loader's inserts and compression do not,
    so the two use both cores.
    """
    made: Queue[Minute | BaseException | None] = Queue(depth)

    def render() -> None:
        try:
            for minute in minutes:
                made.put(minute)
            made.put(None)
        except BaseException as error:
            made.put(error)

    threading.Thread(target=render, daemon=True).start()
    while (item := made.get()) is not None:
        if isinstance(item, BaseException):
            raise item
        yield item


Hot = list[tuple[int, TickRows, int]]
"""Events kept in `events`: (position, tick, index in its tick)."""


def placed(
    ticks: list[TickRows], times: list[datetime], last: int, packing: bool
) -> tuple[Hot, list[dict[str, Any]], int]:
    """A minute's events at positions after `last`: where each is kept, and the last one.

    An open tick's events stay in `events`; a closed tick's (with `packing`) are its
    `tick_rows` row, made by the store's own `_row` of the records as they would have
    been stored (`times`: the minute's second by second), as compaction makes it.
    """
    hot: Hot = []
    rows = []
    for tick in ticks:
        first = last + 1
        last += len(tick.data)
        if not tick.packed(packing):
            hot.extend((first + k, tick, k) for k in range(len(tick.data)))
            continue
        shape = tick.shape
        records = [
            StoredEvent.from_row(
                (
                    first + k,
                    UUID(tick.ids[k]),
                    tick.stream,
                    k + 1,
                    shape.types[k],
                    shape.versions[k],
                    tick.data[k],
                    "{}",
                    times[shape.seconds[k]],
                )
            )
            for k in range(len(tick.data))
        ]
        rows.append(_row(tick.tick_id, records, None))
    return hot, rows, last


ROW_COLUMNS = tuple(column.name for column in schema.tick_rows.columns)
LOAD_MINUTES = 10
"""SQLite: minutes of history (~136,000 events) a load transaction holds."""


def load_sqlite(url: str, span: Span, packing: bool) -> None:
    """Load the span with explicit positions, LOAD_MINUTES a transaction.

    For the load only: no journal, no syncs, a 1 GiB page cache (the unique index on
    random event ids is what a small cache makes slow); WAL again before the store opens
    (a store open meanwhile keeps its WAL: SQLite refuses the change, and the load runs
    journalled). AUTOINCREMENT's counter ends at the last position, packed or not, as
    the writer's appends and compaction's deletes leave it.
    """
    path = make_url(url).database
    assert path is not None
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        with contextlib.suppress(sqlite3.OperationalError):  # "locked": a store is open
            conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -1048576")
        (last,) = conn.execute(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
            "coalesce((SELECT max(global_position) FROM events), 0), "
            "coalesce((SELECT max(last_position) FROM tick_rows), 0))"
        ).fetchone()
        insert_row = (
            f"INSERT INTO tick_rows ({', '.join(ROW_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(ROW_COLUMNS))})"
        )
        conn.execute("BEGIN")
        for minute, (start, ticks) in enumerate(ahead(history(span)), 1):
            times = [start + timedelta(seconds=s) for s in range(TICK_SECONDS)]
            stamps = [_sqlite_time(at) for at in times]
            hot, rows, last = placed(ticks, times, last, packing)
            conn.executemany(
                "INSERT INTO events (global_position, event_id, stream_id, stream_position, "
                "type, version, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        at,
                        t.ids[k],
                        t.stream,
                        k + 1,
                        t.shape.types[k],
                        t.shape.versions[k],
                        t.data[k],
                        "{}",
                        stamps[t.shape.seconds[k]],
                    )
                    for at, t, k in hot
                ],
            )
            conn.executemany(
                insert_row, [tuple(_sqlite_value(r[c]) for c in ROW_COLUMNS) for r in rows]
            )
            if minute % LOAD_MINUTES == 0:
                conn.execute("COMMIT")
                conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'events', 0 "
            "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')"
        )
        conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'events'", (last,))
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def _sqlite_time(at: datetime) -> str:
    """A UTC time as SQLAlchemy stores it in SQLite (no zone)."""
    return at.isoformat(" ", "microseconds")[:26]


def _sqlite_value(value: Any) -> Any:
    """A tick row's value as SQLAlchemy binds it on SQLite: times and days as text."""
    if isinstance(value, datetime):
        return _sqlite_time(value)
    if isinstance(value, date):
        return value.isoformat()
    return value


def load_postgres(url: str, span: Span, packing: bool) -> None:
    """As `load_sqlite`, with COPY, one transaction a minute, as the writer lays it out.

    Positions `(xid << 20) + k` (`harness.store.writer`, migration 0010), every tick
    stream in its day's partition (made first, as the writer makes it), the ids of the
    records left in `events` in `event_ids` (packed ones leave it, migration 0023) and
    every tick's day in `tick_streams`, packed or not (compaction keeps it). Rows go as
    COPY text, the JSON's backslashes doubled, the only character of it COPY treats; tick
    rows as psycopg dumps their values.
    """
    store = open_store(url)
    prepare_partitions(store.engine, span.end.date())
    made: set[date] = set()
    columns = (
        "global_position, event_id, stream_id, stream_position, type, version, data, "
        "metadata, recorded_at, tick_day"
    )
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        for start, ticks in ahead(history(span)):
            day = start.date()
            if day not in made:
                ensure_days(store.engine, [day])
                made.add(day)
            times = [start + timedelta(seconds=s) for s in range(TICK_SECONDS)]
            stamps = [at.isoformat() for at in times]
            with conn.transaction(), conn.cursor() as cursor:
                found = cursor.execute("SELECT pg_current_xact_id()::text::bigint << 20").fetchone()
                assert found is not None
                hot, rows, _ = placed(ticks, times, found[0], packing)
                text = [
                    f"{at}\t{t.ids[k]}\t{t.stream}\t{k + 1}\t{t.shape.types[k]}\t"
                    f"{t.shape.versions[k]}\t{t.data[k].replace(chr(92), chr(92) * 2)}\t{{}}\t"
                    f"{stamps[t.shape.seconds[k]]}\t{day}\n"
                    for at, t, k in hot
                ]
                with cursor.copy(f"COPY events ({columns}) FROM STDIN") as copy:
                    copy.write("".join(text))
                with cursor.copy("COPY event_ids (event_id, global_position) FROM STDIN") as copy:
                    copy.write("".join(f"{t.ids[k]}\t{at}\n" for at, t, k in hot))
                with cursor.copy("COPY tick_streams (stream_id, tick_day) FROM STDIN") as copy:
                    copy.write("".join(f"{tick.stream}\t{day}\n" for tick in ticks))
                with cursor.copy(f"COPY tick_rows ({', '.join(ROW_COLUMNS)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(tuple(row[c] for c in ROW_COLUMNS))
        conn.execute("VACUUM ANALYZE")
    store.close()


def load(url: str, span: Span, packing: bool) -> tuple[int, int]:
    """Load the span and move compaction's checkpoint past it; records in `events` and rows.

    The checkpoint goes where a compaction pass after the load would have left it: every
    closed tick in its row, every open one's events still in `events`.
    """
    (load_sqlite if url.startswith("sqlite") else load_postgres)(url, span, packing)
    store = open_store(url)
    try:
        if packing:
            with store.tracking(CHECKPOINT) as tracking:
                store.save_checkpoint(tracking, tracking.horizon)
        with store.read_transaction() as conn:
            hot = conn.execute(sa.select(sa.func.count()).select_from(schema.events)).scalar_one()
            packed = conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(schema.tick_rows.c.events), 0))
            ).scalar_one()
        return int(hot), int(packed)
    finally:
        store.close()


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


SQLITE_SHAPE = (
    "SELECT e.stream_position, e.type, e.version, typeof(e.global_position), "
    "typeof(e.event_id), length(e.event_id), typeof(e.data), e.metadata, "
    "length(e.recorded_at), (SELECT group_concat(key) FROM "
    "(SELECT key FROM json_each(e.data) ORDER BY key)) FROM events e "
    "WHERE e.stream_id = ? AND e.stream_position <= ? ORDER BY e.stream_position"
)
POSTGRES_SHAPE = (
    "SELECT e.stream_position, e.type, e.version, "
    "e.global_position >> 20 > 0 AND e.global_position & 1048575 > 0, "
    "e.tableoid::regclass::text = 'events_' || to_char(e.tick_day, 'YYYYMMDD'), "
    "e.tick_day = (SELECT (f.recorded_at AT TIME ZONE 'UTC')::date FROM events f "
    "WHERE f.stream_id = e.stream_id AND f.stream_position = 1), "
    "i.global_position = e.global_position, s.tick_day = e.tick_day, e.metadata::text, "
    "(SELECT string_agg(k, ',' ORDER BY k) FROM json_object_keys(e.data) k) "
    "FROM events e LEFT JOIN event_ids i USING (event_id) "
    "LEFT JOIN tick_streams s USING (stream_id) "
    "WHERE e.stream_id = %s AND e.stream_position <= %s ORDER BY e.stream_position"
)
SQLITE_ROW = (
    "SELECT typeof(first_position), typeof(tick_id), typeof(last_position), typeof(version), "
    "typeof(events), typeof(day), length(day), typeof(last_recorded), length(last_recorded), "
    "typeof(transcript), typeof(archived_on), typeof(data) FROM tick_rows WHERE tick_id = ?"
)
POSTGRES_ROW = (
    "SELECT (SELECT count(*) FROM event_ids i WHERE i.global_position BETWEEN "
    "t.first_position AND t.last_position), "
    "(SELECT s.tick_day FROM tick_streams s WHERE s.stream_id = 'tick-' || t.tick_id) = t.day, "
    "(SELECT count(*) FROM events e WHERE e.stream_id = 'tick-' || t.tick_id) "
    "FROM tick_rows t WHERE t.tick_id = %s"
)
POSTGRES_TOTALS = (
    "SELECT (SELECT count(*) FROM events_default), "
    "(SELECT count(*) FROM events_hot WHERE left(stream_id, 5) = 'tick-'), "
    "(SELECT count(*) FROM events) - (SELECT count(*) FROM event_ids), "
    "(SELECT count(DISTINCT stream_id) FROM events WHERE left(stream_id, 5) = 'tick-') "
    "+ (SELECT count(*) FROM tick_rows) - (SELECT count(*) FROM tick_streams)"
)


def check_layout(
    store: SqlEventStore, packing: bool, before_packing: Callable[[], object] | None = None
) -> None:
    """Append a tick through the store, let it pack it, and check the load laid one out so.

    The store packs a tick only once every checkpoint passed it: run before the read
    models are folded (no checkpoint yet), or with `before_packing` catching them up.
    Checked, against a tick appended by the store with as many calls:

    - an open tick's events (those it has so far), row by row: column types, formats and
      JSON keys on SQLite; on PostgreSQL the position scheme, the partition, the tick
      day, `event_ids` and `tick_streams`;
    - with `packing`, a closed tick's row: its columns' types and formats (SQLite), its
      ids out of `event_ids` and its day in `tick_streams` (PostgreSQL); its records as the
      encoder holds them (positions rising; stream positions, types, versions, the keys
      of their data, metadata, the tick id and level said once); its day, last time,
      counts, positions and blob as the store's `_row` makes them of its records;
    - PostgreSQL's whole load: the default partition empty, no tick in `events_hot`, one
      `event_ids` row per record in `events` and one `tick_streams` row per tick stream; SQLite: the
      file back in WAL mode; both: the log's newest record in `events`, as the writer
      keeps it.
    """
    postgres = partitioned(store.engine)
    shape_query, row_query = (
        (POSTGRES_SHAPE, POSTGRES_ROW) if postgres else (SQLITE_SHAPE, SQLITE_ROW)
    )
    events = schema.events
    with store.read_transaction() as conn:
        newest = conn.execute(sa.select(sa.func.max(events.c.global_position))).scalar()
        packed_last = conn.execute(
            sa.select(sa.func.max(schema.tick_rows.c.last_position))
        ).scalar()
        open_sample = conn.execute(
            sa.select(events.c.stream_id)
            .where(events.c.type == TickScheduled.type, events.c.stream_id.like("tick-l____-2%"))
            .order_by(events.c.global_position.desc())
            .limit(1)
        ).scalar_one()
        held = conn.execute(
            sa.select(sa.func.count()).where(events.c.stream_id == open_sample)
        ).scalar_one()
        calls = conn.execute(
            sa.select(sa.func.count()).where(
                events.c.stream_id == open_sample, events.c.type == ModelCalled.type
            )
        ).scalar_one()
        row_sample = _packed_sample(conn, calls) if packing else None
    if packed_last is not None and packed_last >= newest:
        raise SystemExit(f"layout check failed: the newest record is packed ({packed_last})")
    now = datetime.now(UTC)
    tick_id = f"{LEVELS[0]}-layoutcheck-{now:%Y%m%dT%H%M%S%f}"  # one per load of a kept store
    stream = f"tick-{tick_id}"
    for event in tick_events(tick_id, LEVELS[0], now, calls, "completed"):
        store.append(stream, [event.to_record()])
    # The newest record is never packed: an open tick after it lets the check tick go whole.
    after = f"{tick_id}-open"
    store.append(f"tick-{after}", [TickScheduled(tick_id=after, level=LEVELS[0]).to_record()])
    with store.read_transaction() as conn:
        loaded, appended = (
            conn.exec_driver_sql(shape_query, (name, held)).all() for name in (open_sample, stream)
        )
    failures = [] if loaded == appended else [f"{open_sample} as {loaded}, appended as {appended}"]
    if row_sample is not None:
        if before_packing is not None:
            before_packing()
        compact(store)
        with store.read_transaction() as conn:
            rows = [_row_shape(conn, row_query, tick) for tick in (row_sample, tick_id)]
        if rows[0] != rows[1]:
            failures.append(f"row of {row_sample} {rows[0]}, of {tick_id} packed {rows[1]}")
    with store.read_transaction() as conn:
        totals = tuple(conn.exec_driver_sql(POSTGRES_TOTALS).one()) if postgres else (0,) * 4
        journal = "wal" if postgres else conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    if any(totals) or journal != "wal":
        failures.append(
            f"default rows, hot ticks, records without an id, streams without a day: {totals}; "
            f"journal mode {journal}"
        )
    if failures:
        raise SystemExit("layout check failed: " + "; ".join(failures))
    print(
        f"  layout check: {open_sample} has the events, {row_sample or 'no tick'} the packed "
        f"row of a tick the store appends and packs",
        flush=True,
    )


def _packed_sample(conn: sa.Connection, calls: int) -> str:
    """The first loaded tick row of a completed tick with `calls` model calls."""
    query = (
        sa.select(schema.tick_rows.c.tick_id, schema.tick_rows.c.data)
        .order_by(schema.tick_rows.c.first_position)
        .limit(100)
    )
    for tick, blob in conn.execute(query):
        types = [record.type for record in unpack(tick, bytes(blob))]
        if types.count(ModelCalled.type) == calls and types[-1] == TickCompleted.type:
            return str(tick)
    raise SystemExit(f"layout check failed: no completed tick of {calls} calls among 100 rows")


def _row_shape(conn: sa.Connection, row_query: str, tick: str) -> tuple[Any, ...]:
    """What a tick row must share with another's: its form, not its values (see check_layout)."""
    found = conn.execute(sa.select(schema.tick_rows).where(schema.tick_rows.c.tick_id == tick))
    got = found.one_or_none()
    if got is None:
        raise SystemExit(f"layout check failed: the store did not pack {tick} (a checkpoint lags)")
    row = got._asdict()
    level, records = records_of(bytes(row["data"]))
    stored = unpack(tick, bytes(row["data"]))
    remade = _row(tick, stored, None)
    same = {
        name: remade[name] == (stored_utc(row[name]) if name == "last_recorded" else row[name])
        for name in ROW_COLUMNS
        if name != "data"
    }
    return (
        tuple(conn.exec_driver_sql(row_query, (tick,)).one()),
        row["data"] == remade["data"],
        same,
        [r[0] for r in records] == sorted({r[0] for r in records}),
        [(r[2], r[3], r[4], sorted(r[5]), r[6], r[8]) for r in records],
        level == tick.split("-")[0],
    )
