"""Closed ticks packed in tick rows: the log reads the same and every read model rebuilds equal.

A closed tick's events leave `events` for one packed row once every projection has folded
them; every reader of a stream gets them back in place, a rebuild of every read model
from zero (in parts, over the rows) equals the incremental one, and an event replayed
after its tick was packed (a late spool) is a no-op.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from itertools import zip_longest
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from harness.contracts import tick_id_for
from harness.contracts.events import TickScheduled, TranscriptEntry
from harness.devtools.soak import tick_events
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.store import NewEvent, SqlEventStore, open_store
from harness.store.schema import events, metadata, tick_rows
from harness.store.tick_rows import (
    archived_on,
    compact,
    drop_archived,
    forget,
    hot_transcripts,
)


def entry(tick_id: str, text: str) -> TranscriptEntry:
    return TranscriptEntry(tick_id=tick_id, level="min", kind="assistant", text=text)


def read_models(store: SqlEventStore) -> dict[str, list[tuple[Any, ...]]]:
    with store.read_transaction() as conn:
        return {
            table.name: sorted(tuple(row) for row in conn.execute(sa.select(table)))
            for table in metadata.sorted_tables
            if table.name not in ("events", "tick_rows", "projection_checkpoints")
        }


def hot_streams(store: SqlEventStore) -> set[str]:
    """The streams with events still in `events`."""
    query = sa.select(events.c.stream_id).distinct()
    with store.read_transaction() as conn:
        return set(conn.execute(query).scalars())


def test_packed_ticks_read_in_place_and_rebuilds_equal(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    try:
        streams = [f"tick-t{n}" for n in range(4)]
        endings = []
        for n, stream in enumerate(streams):
            *running, ended = tick_events(f"t{n}", tmp_path, 100 + n, datetime.now(UTC).date())
            store.append(stream, [e.to_record() for e in running])
            store.append(stream, [entry(f"t{n}", f"answer {n} " * 200).to_record()])
            endings.append((stream, ended))
        projector = projector_for(store, PriceBook())
        projector.catch_up()
        for stream, ended in endings:
            store.append(stream, [ended.to_record()])
        store.append("tick-open", [TickScheduled(tick_id="open", level="min").to_record()])
        store.append("tick-open", [entry("open", "still going").to_record()])
        assert compact(store) == 0, "nothing is packed before every projection has folded it"
        projector.catch_up()
        before = {stream: store.read_stream(stream) for stream in [*streams, "tick-open"]}
        models = read_models(store)

        stopping = threading.Event()
        stopping.set()
        assert compact(store, stopping) == 0, "a stopping service leaves it to its next start"
        assert compact(store) == 4
        assert hot_streams(store) == {"tick-open"}, "a running tick keeps its events"
        assert compact(store) == 0, "a second pass finds nothing new"
        for stream, found in before.items():
            assert store.read_stream(stream) == found
            assert store.read_stream(stream, after=2, limit=3) == found[2:5]
        assert store.read_streams(streams) == {s: before[s] for s in streams}
        typed = store.read_streams(streams[:1], types=["TranscriptEntry"])
        assert [e.data["text"] for e in typed[streams[0]]] == ["answer 0 " * 200]
        for name in projector.projections:
            projector.rebuild(name)
        assert read_models(store) == models, "a rebuild from zero equals the incremental one"

        spent = next(e for e in before[streams[0]] if e.type == "BudgetSpent")
        again = NewEvent(spent.event_id, spent.type, spent.version, spent.data)
        assert store.append(streams[0], [again]).duplicate, "a late replay is a no-op"
        store.append(streams[0], [entry("t0", "replayed late").to_record()])
        projector.catch_up()
        assert read_models(store) == models, "the replay counted no spend twice"
        entries = [e for e in store.read_stream(streams[0]) if e.type == "TranscriptEntry"]
        assert [e.data["text"] for e in entries] == ["answer 0 " * 200, "replayed late"]
        with store.read_transaction() as conn:
            rows = conn.execute(sa.select(sa.func.count()).select_from(tick_rows)).scalar()
        assert rows == 4
    finally:
        store.close()


def test_a_row_is_found_whether_or_not_its_tick_id_names_the_day_it_began(
    store_url: str, tmp_path: Path
) -> None:
    """A row is looked up in the partition of the day its tick's id names, and then in all.

    On PostgreSQL a row lies in its stream's day's partition (migration 0027). A slot's
    tick begins on its slot's day, but a backfilled one (or one claimed past midnight)
    begins later, and an id of another form names no day: each is read, replayed and
    appended to as a row of its own day.
    """
    now = datetime.now(UTC)
    ticks = [
        tick_id_for("min", now),  # names the day it begins on
        tick_id_for("min", now - timedelta(days=3)),  # a backfilled slot
        "by-hand",  # names no day
    ]
    store = open_store(store_url)
    try:
        for tick in ticks:
            events_ = tick_events(tick, tmp_path, 100, now.date())
            store.append(f"tick-{tick}", [e.to_record() for e in events_])
        store.append("tick-open", [TickScheduled(tick_id="open", level="min").to_record()])
        before = {tick: store.read_stream(f"tick-{tick}") for tick in ticks}

        assert compact(store) == len(ticks)
        assert hot_streams(store) == {"tick-open"}
        with store.read_transaction() as conn:
            days = dict(conn.execute(sa.select(tick_rows.c.tick_id, tick_rows.c.day)).all())
        assert days == dict.fromkeys(ticks, now.date()), "each row keeps the day it began"
        assert store.read_streams([f"tick-{tick}" for tick in ticks]) == {
            f"tick-{tick}": before[tick] for tick in ticks
        }
        for tick in ticks:
            stream, stored = f"tick-{tick}", before[tick]
            assert store.read_stream(stream) == stored
            assert store.stream_version(stream) == len(stored)
            assert archived_on(store, tick) is None
            replay = NewEvent(stored[2].event_id, stored[2].type, 1, stored[2].data)
            assert store.append(stream, [replay]).duplicate, "a replay of a packed event"
            late = store.append(stream, [entry(tick, "replayed late").to_record()])
            assert late.stream_version == len(stored) + 1
    finally:
        store.close()


def test_sqlite_finds_leaving_rows_by_their_index_never_by_reading_their_whole_day(
    tmp_path: Path,
) -> None:
    """The statements that archive a day's rows and transcripts find them by an index.

    SQLite plans without statistics, by the statement's shape alone: given the tick ids
    and their day, it chose the day's index and read every row of the day for each batch
    (a day of 1.44M ticks left at 128 ticks a second); walking the tick id index for a
    day's transcripts read every hot row. Every statement on `tick_rows` is planned here
    as it ran.
    """
    today = datetime.now(UTC).date()
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    ran: list[tuple[str, Any]] = []

    def keep(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any, many: bool) -> None:
        if "tick_rows" in statement and not statement.startswith("EXPLAIN"):
            ran.append((statement, parameters[0] if many else parameters))

    try:
        ticks = [f"t{n}" for n in range(3)]
        held = 0
        for tick in ticks:
            *running, ended = tick_events(tick, tmp_path, 100, today)
            records = [e.to_record() for e in [*running, entry(tick, "said"), ended]]
            store.append(f"tick-{tick}", records)
            held += len(records)
        store.append("tick-open", [TickScheduled(tick_id="open", level="min").to_record()])
        assert compact(store) == len(ticks)
        sa.event.listen(store.engine, "before_cursor_execute", keep)
        transcripts = list(hot_transcripts(store, today))
        ends = [(e[-1].stream_id.removeprefix("tick-"), e[-1].global_position) for e in transcripts]
        assert drop_archived(store, today, ends) == len(ticks)
        with store.write_transaction() as conn:
            assert forget(conn, ticks) == held - len(ticks), "their transcripts left before"
        sa.event.remove(store.engine, "before_cursor_execute", keep)

        assert len(transcripts) == len(ticks)
        assert len(ran) == 6, "days, a page; the rows' read and rewrite; their read and delete"
        with store.engine.connect() as conn:
            for statement, parameters in ran:
                plan = " ".join(
                    row[-1]
                    for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
                )
                assert "ix_tick_rows_day" not in plan, (statement, plan)
                assert "SCAN tick_rows" not in plan, (statement, plan)
                by_ids = "tick_rows.tick_id IN" in statement or "tick_rows.tick_id = ?" in statement
                wanted = "ix_tick_rows_tick_id" if by_ids else "ix_tick_rows_transcripts"
                assert wanted in plan, (statement, plan)
    finally:
        store.close()


def test_read_all_reads_interleaved_packed_ticks_as_it_read_their_events(
    store_url: str, tmp_path: Path
) -> None:
    # Appended in turns, the ticks' rows overlap each other and the open tick's events,
    # so a read after any position starts inside rows that began before it.
    store = open_store(store_url)
    try:
        day = datetime.now(UTC).date()
        ticks = {f"tick-t{n}": tick_events(f"t{n}", tmp_path, 100 + n, day) for n in range(4)}
        ticks["tick-open"] = [TickScheduled(tick_id="open", level="min")]
        for turn in zip_longest(*ticks.values()):
            for stream, event in zip(ticks, turn, strict=True):
                if event is not None:
                    store.append(stream, [event.to_record()])
        store.append("tick-open", [entry("open", "still going").to_record()])
        projector_for(store, PriceBook()).catch_up()
        logged = store.read_all(0, 10_000)
        assert compact(store) == 4 and hot_streams(store) == {"tick-open"}
        for after in [0, *(event.global_position for event in logged)]:
            later = [event for event in logged if event.global_position > after]
            for limit in (1, 2, 7, 10_000):
                assert store.read_all(after, limit) == later[:limit]
    finally:
        store.close()
