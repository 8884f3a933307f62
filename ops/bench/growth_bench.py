"""Growth benchmark: every operator read path at two history sizes, and the ratio.

Invariant 14 says a read path costs what its window costs. This builds synthetic history
shaped like real ticks (issue 24's measurement of a real run: 13.6 events and 5.6 KB of
payload a tick, half of it transcript; 1,000 levels configured, each ticking every
minute, so the last hour holds 60,000 ticks whatever the size) at each size, on SQLite
and PostgreSQL, and prints each read path's p50 and the ratio of the larger size to the
smaller: a flat path stays near 1.

Each tick is rendered from its shape's JSON templates (`Shape`: encoded once through the
event models and checked against them byte for byte), not built from pydantic models, and
goes in with raw `executemany` in big transactions (SQLite, with no journal and no syncs
for the load only, WAL again after) or COPY (PostgreSQL), laid out as the store's writer
lays out its appends (PostgreSQL: each tick in its day's partition, with its `event_ids`
and `tick_streams` rows) and as compaction leaves a closed tick (its transcript in its
`transcripts` row, `harness.store.transcripts`; `--no-compaction` leaves them in
`events`). A tick appended through the store checks the layout at the end of the load
(`check_layout`); then `tickwork projections rebuild` folds the read models (its time is
a figure too). API paths run in-process through FastAPI's TestClient, CLI paths as
subprocesses (their time includes the interpreter's start), reconcile's and start-up's
queries as the service calls them. Disk per tick is the hot store's size over its ticks.

    .venv/bin/python ops/bench/growth_bench.py [--sizes 1000000,10000000]
        [--backends sqlite,postgresql] [--pg-url postgresql://postgres@127.0.0.1:5432/test]
        [--pg-database bench_growth] [--keep FOLDER [--reuse]]
        [--runs 7] [--cli-runs 3] [--run-seconds 90] [--only-disk] [--no-compaction]

`--keep` keeps each size's store for a later run, which `--reuse` tops up to the present
minute (loading a million events into SQLite costs ~35 s of CPU; ten million take 10+ GB
on disk). `--statements` prints each in-process path's slowest statements and a plan.
`--only-disk` stops after the disk figure and prints where the bytes are: per table and
index, and per event type (rows, and bytes of their JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from queue import Queue
from typing import Any
from uuid import UUID

import orjson
import psycopg
import sqlalchemy as sa
from fastapi.testclient import TestClient
from machine import describe, peak_rss
from pydantic import TypeAdapter
from sqlalchemy.engine import make_url
from store_bench import fresh_pg

from harness.api.app import create_app
from harness.config import load_settings
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
from harness.devtools.fake_llm import fake_upstream
from harness.devtools.upstream import env_for_ticks
from harness.execution.manual import ManualTicks
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.ticks import last_slots, open_ticks
from harness.store import migrate_store, open_store, schema
from harness.store.partitions import ensure_days, partitioned, prepare
from harness.store.sql import SqlEventStore
from harness.store.transcripts import CHECKPOINT, compact, encode

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
    transcript: int
    """The index of the tick's `TranscriptEntry`."""
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
            transcript=[event.type for event in found].index(TranscriptEntry.type),
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

    def compacted(self, compacting: bool) -> bool:
        """Whether the tick's transcript has left `events` for its row in `transcripts`."""
        return compacting and self.shape.ended


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


def transcript_row(tick: TickRows, start: datetime, position: int) -> TranscriptRow:
    """The `transcripts` row compaction makes of the tick's entry stored at `position`."""
    k = tick.shape.transcript
    entry = StoredEvent.from_row(
        (
            position,
            UUID(tick.ids[k]),
            tick.stream,
            k + 1,
            TranscriptEntry.type,
            tick.shape.versions[k],
            tick.data[k],
            "{}",
            start + timedelta(seconds=tick.shape.seconds[k]),
        )
    )
    return (tick.tick_id, start.date(), 1, position, encode([entry]))


TranscriptRow = tuple[str, date, int, int, bytes]
"""A `transcripts` row: tick id, day, entries, last position, compressed data."""


def placed(
    ticks: list[TickRows], start: datetime, last: int, compacting: bool
) -> tuple[list[tuple[int, TickRows, int]], list[TranscriptRow], int]:
    """A minute's events at positions after `last`: where each is kept, and the last one.

    The events `events` keeps, as (position, tick, index in its tick), and the
    `transcripts` rows of the entries compaction moved there (keeping their positions).
    """
    stored, kept = [], []
    for tick in ticks:
        for k in range(len(tick.data)):
            last += 1
            if k == tick.shape.transcript and tick.compacted(compacting):
                kept.append(transcript_row(tick, start, last))
            else:
                stored.append((last, tick, k))
    return stored, kept, last


def load_sqlite(url: str, span: Span, compacting: bool) -> None:
    """Load the span with explicit positions (AUTOINCREMENT's next), LOAD_MINUTES a transaction.

    For the load only: no journal, no syncs, a 1 GiB page cache (the unique index on
    random event ids is what a small cache makes slow); WAL again before the store opens.
    A compacted transcript keeps the position its entry had, as compaction leaves it.
    """
    path = make_url(url).database
    assert path is not None
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -1048576")
        (last,) = conn.execute("SELECT coalesce(max(global_position), 0) FROM events").fetchone()
        conn.execute("BEGIN")
        for minute, (start, ticks) in enumerate(ahead(history(span)), 1):
            stamps = [
                (start + timedelta(seconds=s)).isoformat(" ", "microseconds")[:26]
                for s in range(TICK_SECONDS)
            ]
            stored, kept, last = placed(ticks, start, last, compacting)
            rows = [
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
                for at, t, k in stored
            ]
            conn.executemany(
                "INSERT INTO events (global_position, event_id, stream_id, stream_position, "
                "type, version, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            conn.executemany(
                "INSERT INTO transcripts (tick_id, day, entries, last_position, data) "
                "VALUES (?, ?, ?, ?, ?)",
                [(t, d.isoformat(), n, p, b) for t, d, n, p, b in kept],
            )
            if minute % LOAD_MINUTES == 0:
                conn.execute("COMMIT")
                conn.execute("BEGIN")
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


LOAD_MINUTES = 10
"""SQLite: minutes of history (~136,000 events) a load transaction holds."""


def load_postgres(url: str, span: Span, compacting: bool) -> None:
    """As `load_sqlite`, with COPY, laid out as the writer lays out its appends.

    Each minute is one transaction (`harness.store.writer`, migration 0010): positions
    `(xid << 20) + k`, every tick stream in its day's partition (made first, as the
    writer makes it), its ids in `event_ids`, its day in `tick_streams`. Rows go as COPY
    text, the JSON's backslashes doubled, the only character of it COPY treats.
    """
    store = open_store(url)
    prepare(store.engine, span.end.date())
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
            stamps = [(start + timedelta(seconds=s)).isoformat() for s in range(TICK_SECONDS)]
            with conn.transaction(), conn.cursor() as cursor:
                found = cursor.execute("SELECT pg_current_xact_id()::text::bigint << 20").fetchone()
                assert found is not None
                stored, kept, _ = placed(ticks, start, found[0], compacting)
                rows = [
                    f"{at}\t{t.ids[k]}\t{t.stream}\t{k + 1}\t{t.shape.types[k]}\t"
                    f"{t.shape.versions[k]}\t{t.data[k].replace(chr(92), chr(92) * 2)}\t{{}}\t"
                    f"{stamps[t.shape.seconds[k]]}\t{day}\n"
                    for at, t, k in stored
                ]
                ids = [f"{t.ids[k]}\t{at}\n" for at, t, k in stored]
                with cursor.copy(f"COPY events ({columns}) FROM STDIN") as copy:
                    copy.write("".join(rows))
                with cursor.copy("COPY event_ids (event_id, global_position) FROM STDIN") as copy:
                    copy.write("".join(ids))
                with cursor.copy("COPY tick_streams (stream_id, tick_day) FROM STDIN") as copy:
                    copy.write("".join(f"{tick.stream}\t{day}\n" for tick in ticks))
                with cursor.copy(
                    "COPY transcripts (tick_id, day, entries, last_position, data) FROM STDIN"
                ) as copy:
                    for row in kept:
                        copy.write_row(row)
        conn.execute("VACUUM ANALYZE")
    store.close()


def load(url: str, span: Span, compacting: bool) -> int:
    """Load the span, move compaction's checkpoint past it, check the layout; events stored.

    Compaction's checkpoint goes where a compaction pass after the load would have left
    it: every ended tick's transcript is in its row, every open one's still in `events`.
    """
    (load_sqlite if url.startswith("sqlite") else load_postgres)(url, span, compacting)
    store = open_store(url)
    try:
        if compacting:
            with store.tracking(CHECKPOINT) as tracking:
                store.save_checkpoint(tracking, tracking.horizon)
        check_layout(store, compacting)
        with store.read_transaction() as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(schema.events)).scalar_one()
            )
    finally:
        store.close()


SQLITE_SHAPE = (
    "SELECT e.stream_position, e.type, e.version, typeof(e.global_position), "
    "typeof(e.event_id), length(e.event_id), typeof(e.data), e.metadata, "
    "length(e.recorded_at), (SELECT group_concat(key) FROM "
    "(SELECT key FROM json_each(e.data) ORDER BY key)) FROM events e "
    "WHERE e.stream_id = ? ORDER BY e.stream_position"
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
    "WHERE e.stream_id = %s ORDER BY e.stream_position"
)
SQLITE_TRANSCRIPT = (
    "SELECT t.entries, t.data IS NOT NULL, t.day = (SELECT substr(recorded_at, 1, 10) "
    "FROM events WHERE stream_id = 'tick-' || t.tick_id AND stream_position = 1) "
    "FROM transcripts t WHERE t.tick_id = ?"
)
POSTGRES_TRANSCRIPT = (
    "SELECT t.entries, t.data IS NOT NULL, t.day = (SELECT tick_day FROM tick_streams "
    "WHERE stream_id = 'tick-' || t.tick_id) FROM transcripts t WHERE t.tick_id = %s"
)
POSTGRES_TOTALS = (
    "SELECT (SELECT count(*) FROM events_default), "
    "(SELECT count(*) FROM events_hot WHERE left(stream_id, 5) = 'tick-'), "
    "(SELECT count(*) FROM events) - (SELECT count(*) FROM event_ids), "
    "(SELECT count(DISTINCT stream_id) FROM events WHERE left(stream_id, 5) = 'tick-') "
    "- (SELECT count(*) FROM tick_streams)"
)


def check_layout(store: SqlEventStore, compacting: bool) -> None:
    """Append one tick through the store and check the bulk load laid out one as it does.

    The first completed tick loaded and the appended one (as many calls, compacted alike)
    must give the same shape, row by row: column types, formats and keys on SQLite, and on
    PostgreSQL the position scheme, the partition, the tick day, `event_ids` and
    `tick_streams`; PostgreSQL's whole load must leave the default partition empty, no
    tick in `events_hot`, and one `event_ids` row per event, one `tick_streams` row per
    tick stream; SQLite's load must leave the file in WAL mode, as the store opens it. A
    mismatch stops the bench: its figures would describe another layout.
    """
    postgres = partitioned(store.engine)
    shape, transcript = (
        (POSTGRES_SHAPE, POSTGRES_TRANSCRIPT) if postgres else (SQLITE_SHAPE, SQLITE_TRANSCRIPT)
    )
    with store.read_transaction() as conn:
        sample = conn.execute(
            sa.select(schema.events.c.stream_id)
            .where(schema.events.c.type == TickCompleted.type)
            .order_by(schema.events.c.global_position)
            .limit(1)
        ).scalar_one()
        calls = conn.execute(
            sa.select(sa.func.count()).where(
                schema.events.c.stream_id == sample, schema.events.c.type == ModelCalled.type
            )
        ).scalar_one()
    now = datetime.now(UTC)
    tick_id = f"{LEVELS[0]}-layoutcheck-{now:%Y%m%dT%H%M%S%f}"  # one per load of a kept store
    for event in tick_events(tick_id, LEVELS[0], now, calls, "completed"):
        store.append(f"tick-{tick_id}", [event.to_record()])
    if compacting:
        compact(store)
    with store.read_transaction() as conn:
        loaded, appended = (
            (
                conn.exec_driver_sql(shape, (stream,)).all(),
                conn.exec_driver_sql(transcript, (stream.removeprefix("tick-"),)).all(),
            )
            for stream in (sample, f"tick-{tick_id}")
        )
        totals = tuple(conn.exec_driver_sql(POSTGRES_TOTALS).one()) if postgres else (0,) * 4
        journal = "wal" if postgres else conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    if loaded != appended or any(totals) or journal != "wal":
        raise SystemExit(
            f"layout check failed: {sample} loaded as {loaded}, appended as {appended}; "
            f"default rows, hot ticks, events without an id, streams without a day: {totals}; "
            f"journal mode {journal}"
        )
    print(f"  layout check: {sample} has the shape of a tick the store appends", flush=True)


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def write_config(root: Path, url: str) -> Path:
    """1,000 levels every minute, on `url`."""
    levels = "".join(
        f'[levels.{level}]\nevery = "1m"\nmodel = "gpt-4o-mini"\nprompt = "Check."\n'
        for level in LEVELS
    )
    config = root / "tickwork.toml"
    config.write_text(
        f'[store]\nurl = "{url}"\n[paths]\nresults = "{root}/results"\nspool = "{root}/spool"\n'
        f'digests = "{root}/digests"\n\n{levels}'
    )
    return config


def disk_bytes(url: str) -> int:
    """The hot store's size: the database file and its WAL, or the PostgreSQL database."""
    if url.startswith("sqlite"):
        path = Path(make_url(url).database or "")
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    with psycopg.connect(_dsn(url)) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert size is not None
        return int(size[0])


def dead_tuples(url: str) -> int:
    """Dead rows PostgreSQL counts in the store's tables (the load left none: it vacuumed).

    Each table with any is printed: a rebuild should swap or truncate, not delete.
    """
    with psycopg.connect(_dsn(url)) as conn:
        found = conn.execute(
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE n_dead_tup > 0 "
            "ORDER BY n_dead_tup DESC"
        ).fetchall()
    for table, rows in found:
        print(f"    dead tuples in {table}: {rows:,}")
    return sum(rows for _, rows in found)


def print_breakdown(url: str, ticks: int) -> None:
    """Bytes per tick of each table and index, then rows and JSON bytes per event type."""
    if url.startswith("sqlite"):
        path = make_url(url).database
        assert path is not None
        with sqlite3.connect(path) as conn:
            sizes = conn.execute(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            ).fetchall()
            kinds = conn.execute(
                "SELECT type, count(*), sum(length(data) + length(metadata)) FROM events "
                "GROUP BY type ORDER BY 3 DESC"
            ).fetchall()
    else:
        with psycopg.connect(_dsn(url)) as conn:
            sizes = conn.execute(
                "SELECT relname, pg_relation_size(oid) + "
                "coalesce(pg_relation_size(nullif(reltoastrelid, 0)), 0) FROM pg_class "
                "WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'i') "
                "ORDER BY 2 DESC"
            ).fetchall()
            kinds = conn.execute(
                "SELECT type, count(*), sum(pg_column_size(data) + pg_column_size(metadata)) "
                "FROM events GROUP BY type ORDER BY 3 DESC"
            ).fetchall()
    print(f"    {'table or index':<40}{'B/tick':>9}")
    for name, size in sizes:
        if size and size / ticks >= 1:
            print(f"    {name:<40}{size / ticks:>9,.0f}")
    print(f"    {'event type':<40}{'rows/tick':>9}{'JSON B/tick':>12}")
    for kind, rows, size in kinds:
        print(f"    {kind:<40}{rows / ticks:>9.2f}{size / ticks:>12,.0f}")


# --- timing ---------------------------------------------------------------------------


def p50(runs: int, call: Callable[[], object]) -> tuple[float, float]:
    """Median seconds of `runs` calls after one unmeasured warm-up: wall clock, and CPU.

    CPU is this process's (every thread: the API's server thread too) and its waited-for
    children's (a CLI run), user and system: on a machine other work shares, what the path
    itself cost, where the wall clock also counts the time it waited for a core.
    """
    call()
    walls, cpus = [], []
    for _ in range(runs):
        began, spent = time.perf_counter(), _cpu()
        call()
        walls.append(time.perf_counter() - began)
        cpus.append(_cpu() - spent)
    return statistics.median(walls), statistics.median(cpus)


def _cpu() -> float:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


STATEMENTS_SHOWN = 3


def print_statements(store: SqlEventStore, label: str, call: Callable[[], object]) -> None:
    """The statements one call of an in-process path sends, slowest first, and a plan.

    The slowest query's plan (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL, with
    the parameters it was sent with) says where a path that grows spends.
    """
    spent: dict[str, list[float]] = {}
    sent: dict[str, Any] = {}

    def before(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        conn.info.setdefault("began", []).append(time.perf_counter())

    def after(conn: sa.Connection, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        spent.setdefault(statement, []).append(time.perf_counter() - conn.info["began"].pop())
        sent[statement] = parameters

    sa.event.listen(store.engine, "before_cursor_execute", before)
    sa.event.listen(store.engine, "after_cursor_execute", after)
    try:
        call()
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", before)
        sa.event.remove(store.engine, "after_cursor_execute", after)
    slowest = sorted(spent.items(), key=lambda item: -sum(item[1]))[:STATEMENTS_SHOWN]
    print(f"    {label}: {sum(map(len, spent.values()))} statements", flush=True)
    for statement, seconds in slowest:
        flat = " ".join(statement.split())
        print(f"      {sum(seconds) * 1000:9.1f} ms in {len(seconds):>4} x  {flat[:600]}")
    queries = [q for q, _ in slowest if q.lstrip().upper().startswith(("SELECT", "WITH"))]
    if not queries:
        return
    statement = queries[0]
    explain = "EXPLAIN QUERY PLAN " if store.engine.dialect.name == "sqlite" else "EXPLAIN "
    with store.read_transaction() as conn:
        plan = conn.exec_driver_sql(explain + statement, sent[statement]).all()
    for row in plan:
        print(f"        {str(row[-1])[:300]}")


def cli(config: Path, *arguments: str) -> Callable[[], object]:
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), *arguments]

    def run() -> object:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(arguments)} failed: {done.stderr.strip()[-2000:]}")
        return done

    return run


def peak_rss_mib(config: Path, *arguments: str) -> float:
    """Peak RSS of one CLI run (`own_peak_mib`)."""
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), *arguments]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = own_peak_mib(child)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments)} exited {child.returncode}")
    return peak


HWM_POLL_SECONDS = 0.02


def own_peak_mib(child: subprocess.Popen[Any]) -> float:
    """A child's own peak RSS: its `VmHWM`, read until it ends (then reaped).

    Not `wait4`'s `ru_maxrss`: Linux carries the high-water mark across exec, so a child
    of this process reports this process's peak when that is larger (after the loader's
    1 GiB page cache, a 121 MiB digest read as 940 MiB). `VmHWM` belongs to the address
    space the exec made; the peak can only rise, so the last read misses at most what the
    child grew in its last HWM_POLL_SECONDS.
    """
    status, peak = Path(f"/proc/{child.pid}/status"), 0
    while child.poll() is None:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        time.sleep(HWM_POLL_SECONDS)
    return peak / 1024


def run_rss_mib(config: Path, seconds: int) -> float:
    """Peak RSS of `tickwork run` on the history (ticks not included), sampled twice a second."""
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), "run"]
    with fake_upstream() as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
        env["OPENAI_BASE_URL"] = fake.url
        service = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        peak = peak_rss(service, seconds)
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            print(f"    tickwork run still ran {STOP_SECONDS} s after SIGTERM: killed", flush=True)
            service.kill()
            service.wait()
    return peak / 2**20


STOP_SECONDS = 120


class Figures(dict[str, float]):
    """A size's figures, each printed as it is measured: a run cut short keeps what it had."""

    def __setitem__(self, label: str, value: float) -> None:
        super().__setitem__(label, value)
        print(f"    {label:<40}{value if '(' in label else value * 1000:>11,.1f}", flush=True)


TOP_UP_MINUTES = 65
"""A reused store gets at most this much new history: the windows read (the last hour)
full, and a gap before them, rather than the whole time since it was kept."""


def measure(url: str, size: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    """Load `size` events into the store at `url` (or top a kept one up) and time every path.

    A kept store (`--keep`) has its history in `root/history.json`; reused (`--reuse`),
    it gets the whole minutes since its end (the last TOP_UP_MINUTES of them, after a
    gap), so the last hour is as full as a fresh load's, and its read models catch up
    instead of being rebuilt (no rebuild figure).
    """
    figures = Figures()
    compacting = not args.no_compaction
    marker = root / "history.json"
    kept = orjson.loads(marker.read_bytes()) if args.reuse and marker.exists() else None
    config = write_config(root, url)
    if kept is None:
        span = Span.of_events(size, datetime.now(UTC))
    else:
        if kept["compacting"] != compacting:
            raise SystemExit(f"{marker}: kept with compacting={kept['compacting']}, not this run")
        end = datetime.fromisoformat(kept["end"])
        gap = (datetime.now(UTC) - end) // timedelta(minutes=1)
        added = min(gap, TOP_UP_MINUTES) * PER_MINUTE
        span = Span(end + timedelta(minutes=gap), added, kept["ticks"])
    began, spent = time.perf_counter(), _cpu()
    events = load(url, span, compacting)
    print(
        f"  {size:,} events{' (kept, topped up)' if kept else ''}: {span.ticks:,} ticks "
        f"loaded in {time.perf_counter() - began:.0f} s (CPU {_cpu() - spent:.0f} s), "
        f"{events:,} events stored, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    ticks = span.ticks + (kept["ticks"] if kept else 0)
    if args.keep:
        marker.write_bytes(
            orjson.dumps({"end": span.end.isoformat(), "ticks": ticks, "compacting": compacting})
        )
    began, spent = time.perf_counter(), _cpu()
    if kept is None:
        cli(config, "projections", "rebuild")()
        figures["projections rebuild (s)"] = time.perf_counter() - began
        figures["projections rebuild CPU (s)"] = _cpu() - spent
    else:
        store = open_store(url)
        projector_for(store, PriceBook(load_settings(config).prices)).catch_up()
        store.close()
        print(f"  read models caught up in {time.perf_counter() - began:.0f} s", flush=True)
    if not url.startswith("sqlite"):
        if kept is None:
            figures["dead tuples after rebuild (rows)"] = dead_tuples(url)
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
    figures["disk per tick (KB)"] = disk_bytes(url) / ticks / 1000
    if args.only_disk:
        print_breakdown(url, ticks)
        return figures

    def timed(label: str, seconds: tuple[float, float]) -> None:
        figures[label], figures[f"{label} [CPU]"] = seconds

    def in_process(label: str, call: Callable[[], object]) -> None:
        timed(label, p50(args.runs, call))
        if args.statements:
            print_statements(store, label, call)

    settings = load_settings(config)
    store = open_store(url)
    recent = f"{LEVELS[7]}-{span.end - timedelta(minutes=2, seconds=30):%Y%m%dT%H%M%S}"
    # The read paths only: the run-now button's owner starts no tick here.
    manual = ManualTicks(settings, store, upstream=lambda: env_for_ticks(print), router=None)
    with TestClient(create_app(settings, store, manual)) as client:
        for label, path in (
            ("GET /dashboard/panels", "/dashboard/panels"),
            ("GET /metrics", "/metrics"),
            ("GET /ticks", "/ticks"),
            ("GET /ticks?level=", f"/ticks?level={LEVELS[500]}"),
            ("GET /status", "/status"),
        ):
            in_process(label, lambda path=path: client.get(path).raise_for_status())
        shown = client.get("/ticks", params={"level": LEVELS[7], "limit": 3}).json()
    projector = projector_for(store, PriceBook(settings.prices))

    def reconcile() -> object:
        projector.catch_up(["ticks"])
        with store.read_transaction() as conn:
            return open_ticks(conn)

    def start_up() -> object:
        projector.catch_up(["ticks"])
        with store.read_transaction() as conn:
            return last_slots(conn, LEVELS)

    in_process("reconcile: open ticks", reconcile)
    in_process("start-up: last slots of 1,000 levels", start_up)
    store.close()
    tick_id = shown[-1]["tick_id"] if shown else recent
    if args.cli_runs:
        for label, arguments in (
            ("tickwork status", ("status",)),
            ("tickwork show", ("show", tick_id)),
            ("tickwork digest --since 1h", ("digest", "--since", "1h")),
            ("tickwork events --since 1h", ("events", "--since", "1h")),
        ):
            timed(label, p50(args.cli_runs, cli(config, *arguments)))
        figures["digest --since 1h peak RSS (MiB)"] = peak_rss_mib(
            config, "digest", "--since", "1h"
        )
    if args.run_seconds:
        figures["tickwork run peak RSS (MiB)"] = run_rss_mib(config, args.run_seconds)
    return figures


def store_for(backend: str, size: int, root: Path, args: argparse.Namespace) -> str:
    """The store of one size: a SQLite file in `root`, or a PostgreSQL database.

    At head, and empty unless a kept one is reused: `--keep` names the PostgreSQL
    database after the size, so each size's store outlives the run.
    """
    database = f"{args.pg_database}_{size}" if args.keep else args.pg_database
    if not (args.reuse and (root / "history.json").exists()):
        for stale in [root / "history.json", *root.glob("events.db*")]:
            stale.unlink(missing_ok=True)
        return fresh_store(backend, root, args.pg_url, database)
    url = f"sqlite:///{root}/events.db" if backend == "sqlite" else _pg_url(args.pg_url, database)
    migrate_store(url)
    return url


def fresh_store(backend: str, root: Path, pg_url: str, pg_database: str) -> str:
    """An empty store at head: a SQLite file in `root`, or a PostgreSQL database made afresh."""
    url = f"sqlite:///{root}/events.db" if backend == "sqlite" else fresh_pg(pg_url, pg_database)
    migrate_store(url)
    return url


def _pg_url(admin: str, database: str) -> str:
    return (
        make_url(admin)
        .set(drivername="postgresql+psycopg", database=database)
        .render_as_string(hide_password=False)
    )


def drop_pg(admin: str, database: str) -> None:
    """Drop a database the run made and does not keep: 10M events take ~10 GB."""
    with psycopg.connect(_dsn(admin), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@contextmanager
def folder_for(backend: str, size: int, keep: str | None) -> Iterator[Path]:
    """Where a size's store and its config live: kept under `keep`, or a temporary folder."""
    if keep:
        root = Path(keep) / f"{backend}-{size}"
        root.mkdir(parents=True, exist_ok=True)
        yield root
        return
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def report(backend: str, sizes: list[int], results: list[dict[str, float]]) -> None:
    small, large = results[0], results[-1]
    head = "".join(f"{size:>14,}" for size in sizes)
    print(f"\n{backend}: p50 at each size (events), and the ratio of the last to the first")
    print(f"  {'path':<40}{head}{'ratio':>9}")
    for label in dict.fromkeys(label for result in results for label in result):
        unit = "" if "(" in label else " ms"
        scale = 1 if "(" in label else 1000
        values = "".join(
            f"{result[label] * scale:>11,.1f}{unit or '   '}" if label in result else f"{'-':>14}"
            for result in results
        )
        ratio = f"{large[label] / small[label]:>8.2f}x" if label in small and label in large else ""
        print(f"  {label:<40}{values}{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="events, comma-separated")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--pg-database",
        default="bench_growth",
        help="the database made afresh (dropped first): one per run sharing the server",
    )
    parser.add_argument("--runs", type=int, default=7, help="runs of each in-process path")
    parser.add_argument(
        "--cli-runs", type=int, default=3, help="runs of each CLI path (0: none, no digest RSS)"
    )
    parser.add_argument(
        "--no-compaction",
        action="store_true",
        help="leave transcripts in `events`, as before they had a form of their own",
    )
    parser.add_argument(
        "--only-disk", action="store_true", help="stop at disk per tick, with its breakdown"
    )
    parser.add_argument(
        "--run-seconds", type=int, default=90, help="how long `tickwork run` runs (0: not)"
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="print each in-process path's slowest statements and the slowest one's plan",
    )
    parser.add_argument(
        "--keep",
        metavar="FOLDER",
        help="keep each size's store: SQLite in FOLDER/<backend>-<size>/, PostgreSQL in "
        "database <pg-database>_<size>; without it both are deleted at the end",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: top a kept store up to now instead of loading it afresh",
    )
    args = parser.parse_args()
    if args.reuse and not args.keep:
        parser.error("--reuse needs --keep")
    sizes = [int(size) for size in args.sizes.split(",")]

    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    print(f"sizes: {', '.join(f'{size:,}' for size in sizes)} events; {len(LEVELS):,} levels")
    for backend in args.backends.split(","):
        print(f"\n{backend}:", flush=True)
        results = []
        for size in sizes:
            with folder_for(backend, size, args.keep) as root:
                url = store_for(backend, size, root, args)
                try:
                    results.append(measure(url, size, args, root))
                finally:
                    if backend == "postgresql" and not args.keep:
                        drop_pg(args.pg_url, args.pg_database)
        report(backend, sizes, results)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
