"""Event store benchmark: tickwork beside the `eventsourcing` library's recorders, one run.

Prints, for SQLite and PostgreSQL: single-event transactional appends from 1 and from 4
processes, the 4 again with a reader following the log meanwhile (which checks that no
event is skipped), for both systems alike (on SQLite, 1 process, raw `sqlite3` inserting
the same rows into the same table at the same `synchronous` setting is the floor), batch
appends, read_all throughput, then the spend rebuild over 1,000,000 BudgetSpent events
and the spend query by level and day. `--repeat` runs the append and read figures several
times and prints each figure's median and spread.

tickwork's events carry the ids the product mints (`new_event_id`: UUIDv7, time-ordered),
and raw `sqlite3` inserts the same kind, since the floor is the same appends. A caller
may bring its own ids, random ones too: they still work, only slower (each lands on a
random page of the event-id index), so the SQLite rows "random ids (uuid4)" measure that
beside the others. The raw floor sends BEGIN IMMEDIATE, INSERT, COMMIT per append; tickwork
sends a single event as one INSERT in autocommit, so the floor is also measured that way
("sqlite3 autocommit"), so that no ratio credits tickwork with a saving the floor could
make too.

    .venv/bin/python ops/bench/store_bench.py [--appends 5000] [--rebuild 1000000]
        [--pg-url postgresql://postgres@127.0.0.1:5432/test] [--db-prefix bench]
        [--no-postgres] [--no-sqlite] [--no-rebuild | --rebuild-only] [--repeat 1]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg
from machine import describe
from sqlalchemy.engine import make_url

from harness.contracts import new_event_id
from harness.prices import PriceBook
from harness.projections import projector_for, spend_report
from harness.store import ANY, Durability, NewEvent, migrate_store, open_store
from harness.store.engine import SQLITE_SYNCHRONOUS

DURABILITIES: tuple[Durability, ...] = ("process", "power")
RAW_INSERT = (
    "INSERT INTO events (event_id, stream_id, stream_position, type, version, data, "
    "metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
AUTOCOMMIT = "autocommit"
"""Raw sqlite3 sending a single event as tickwork does: one statement, its own transaction."""
RANDOM = "random ids (uuid4)"
"""tickwork appending ids a caller brought, random ones: the rows that show what they cost."""
READ_PAGES = 400
"""Pages of read_all per system and run, the log read over again. A full collection of the
bench's heap (40-50 ms, the time of 15 pages) lands on whichever system's page triggers it:
at 40 pages one such page decided the ratio; at 400 each system pays about its share."""

PAYLOAD = {
    "occurred_at": "2026-11-30T02:14:50.788909Z",
    "tick_id": "min-2026-11-30T02:14",
    "level": "min",
    "model": "gpt-4o-mini",
    "prompt_tokens": 1234,
    "completion_tokens": 200,
    "cache_read_tokens": None,
    "cache_write_tokens": None,
    "estimated": False,
    "source": "worker",
}


# --- the two systems behind one small interface --------------------------------------


class Tickwork:
    def __init__(
        self,
        url: str,
        durability: Durability = "process",
        mint: Callable[[], uuid.UUID] = new_event_id,
    ) -> None:
        self.store = open_store(url, durability=durability)
        self.mint = mint

    def append(self, stream: int, version: int, count: int = 1) -> None:
        events = [NewEvent(self.mint(), "BudgetSpent", 1, PAYLOAD) for _ in range(count)]
        self.store.append(f"tick-{stream}", events, ANY)

    def page(self, after: int) -> tuple[int, int]:
        """Read the page after position `after`: (events read, where the next page starts)."""
        batch = self.store.read_all(after, 1000)
        return len(batch), batch[-1].global_position if batch else after

    def positions_after(self, after: int) -> list[int]:
        return [e.global_position for e in self.store.read_all(after, 1000)]

    def last(self) -> int:
        return self.store.last_position()

    def close(self) -> None:
        self.store.close()


class RawSqlite:
    """The same rows into the same table with bare `sqlite3`: what the database costs alone.

    Each append is BEGIN IMMEDIATE, the inserts and COMMIT; `alone`, an append of one event
    is its one INSERT in autocommit instead, as tickwork's own writer sends it: the floor
    without the two statements that tickwork saves.
    """

    def __init__(self, url: str, durability: Durability, alone: bool = False) -> None:
        open_store(url).close()  # migrated: the same table and indexes
        self.alone = alone
        self.connection = sqlite3.connect(make_url(url).database or "", isolation_level=None)
        self.connection.execute("PRAGMA journal_mode = WAL")
        self.connection.execute(f"PRAGMA synchronous = {SQLITE_SYNCHRONOUS[durability]}")

    def append(self, stream: int, version: int, count: int = 1) -> None:
        stamp = f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S.%f}"
        rows = [
            (
                new_event_id().hex,
                f"tick-{stream}",
                version + i,
                "BudgetSpent",
                1,
                orjson.dumps(PAYLOAD).decode(),
                "{}",
                stamp,
            )
            for i in range(count)
        ]
        if self.alone and count == 1:
            self.connection.execute(RAW_INSERT, rows[0])
            return
        self.connection.execute("BEGIN IMMEDIATE")
        self.connection.executemany(RAW_INSERT, rows)
        self.connection.execute("COMMIT")

    def close(self) -> None:
        self.connection.close()


class EventSourcing:
    """eventsourcing's application recorder: the anchor the issue names."""

    def __init__(self, target: str, create: bool = True) -> None:
        self.streams: dict[int, uuid.UUID] = {}
        if target.startswith("sqlite:"):
            from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

            self.datastore: Any = SQLiteDatastore(target.removeprefix("sqlite:"), lock_timeout=30)
            self.recorder: Any = SQLiteApplicationRecorder(self.datastore)
        else:
            from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

            url = make_url(target)
            self.datastore = PostgresDatastore(
                url.database or "",
                url.host or "",
                url.port or 5432,
                url.username or "",
                url.password or "",
            )
            self.recorder = PostgresApplicationRecorder(self.datastore)
        if create:  # its CREATE … IF NOT EXISTS races between processes: the parent does it
            self.recorder.create_table()

    def append(self, stream: int, version: int, count: int = 1) -> None:
        from eventsourcing.persistence import StoredEvent

        originator = self.streams.setdefault(stream, uuid.uuid4())
        state = orjson.dumps(PAYLOAD)
        events = [StoredEvent(originator, version + i, "BudgetSpent", state) for i in range(count)]
        self.recorder.insert_events(events)

    def page(self, after: int) -> tuple[int, int]:
        batch = self.recorder.select_notifications(after + 1, 1000)
        return len(batch), batch[-1].id if batch else after

    def positions_after(self, after: int) -> list[int]:
        return [n.id for n in self.recorder.select_notifications(after + 1, 1000)]

    def last(self) -> int:
        return int(self.recorder.max_notification_id() or 0)

    def close(self) -> None:
        self.datastore.close()


def open_system(
    kind: str, target: str, durability: Durability, create: bool = True
) -> Tickwork | RawSqlite | EventSourcing:
    if kind == "tickwork":
        return Tickwork(target, durability)
    if kind == "sqlite3":
        return RawSqlite(target, durability)
    return EventSourcing(target, create)


# --- measurements ---------------------------------------------------------------------


def appender(
    kind: str,
    target: str,
    durability: Durability,
    worker: int,
    count: int,
    start: Any,
    results: Any,
) -> None:
    system = open_system(kind, target, durability, create=False)
    versions: dict[int, int] = {}
    start.wait()
    began = time.time()
    for i in range(count):
        stream = worker * 1000 + i % 50
        version = versions.get(stream, 1)
        system.append(stream, version)
        versions[stream] = version + 1
    results.put((began, time.time(), count))
    system.close()


def every_position(reader: Tickwork | EventSourcing) -> list[int]:
    """Every position stored, read back once all writers are done (not dense on PostgreSQL)."""
    found: list[int] = []
    while batch := reader.positions_after(found[-1] if found else 0):
        found += batch
    return found


def appends_per_second(
    kind: str,
    target: str,
    processes: int,
    count: int,
    durability: Durability = "process",
    followed: bool = False,
) -> tuple[float, str]:
    """Events/s over the wall time of all writers; `followed`, whether a reader saw them all.

    A followed run has a reader follow the log meanwhile, as a service's projections do:
    what it saw must be every position read back once the writers are done, in the same
    order. Either system is measured both ways, so each ratio compares like with like
    (until 2026-12-06 only tickwork's four writers ran, and always with the reader).
    """
    schema = open_system(kind, target, durability)  # schema made once, before the race
    reader = schema if followed and not isinstance(schema, RawSqlite) else None
    if reader is None:
        schema.close()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    workers = [
        context.Process(
            target=appender,
            args=(kind, target, durability, w, count, start, results),
        )
        for w in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.0)
    start.set()
    seen: list[int] = []
    while reader is not None:
        alive = any(worker.is_alive() for worker in workers)
        found = reader.positions_after(seen[-1] if seen else 0)
        seen.extend(found)
        if not found:
            if not alive:
                break
            time.sleep(0.001)
    outcomes = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise SystemExit(f"{kind} writer failed with exit code {worker.exitcode}")
    total = sum(n for _, _, n in outcomes)
    wall = max(end for _, end, _ in outcomes) - min(began for began, _, _ in outcomes)
    note = ""
    if reader is not None:
        every = every_position(reader)
        gap_free = len(every) == total and seen == every
        note = "reader saw every event in order" if gap_free else "READER SKIPPED EVENTS"
        reader.close()
    return total / wall, note


def fresh_pg(admin: str, name: str) -> str:
    dsn = make_url(admin).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return (
        make_url(admin)
        .set(drivername="postgresql+psycopg", database=name)
        .render_as_string(hide_password=False)
    )


def analyze(url: str) -> None:
    """Gather the planner's statistics, as autovacuum does within a minute of a bulk load.

    Read right after the appends, a table has none: PostgreSQL then guesses a range of
    positions holds few rows and plans a page as a bitmap scan and sort of everything after
    it (5-10 ms a page instead of 2). The figure is the steady state, for both systems.
    """
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


Figures = dict[str, list[float]]
"""Every value each figure took, one per run (ratios are taken within a run)."""


def row(
    figures: Figures,
    label: str,
    value: float,
    unit: str,
    anchors: dict[str, float] | None = None,
    note: str = "",
) -> None:
    """Print a figure with its ratios to the anchors measured in the same run; keep them."""
    figures.setdefault(f"{label} ({unit})", []).append(value)
    ratios = []
    for name, anchor in (anchors or {}).items():
        ratios.append(f"{value / anchor:5.2f}x {name}")
        figures.setdefault(f"{label} / {name}", []).append(value / anchor)
    print(f"  {label:<52} {value:>12,.0f} {unit:<9} {', '.join(ratios):<22} {note}")


System = Tickwork | RawSqlite | EventSourcing


def interleaved(
    systems: dict[str, System], rounds: int, step: Callable[[str, System, int], int]
) -> dict[str, float]:
    """Events/s of each system doing `step` in turn with the others, `rounds` times.

    One operation of each, then the next: a shared machine's load drifts within seconds,
    and alternating puts every system under the same drift. Each is timed on its own
    operations only.
    """
    spent = dict.fromkeys(systems, 0.0)
    done = dict.fromkeys(systems, 0)
    for i in range(rounds):
        for name, system in systems.items():
            began = time.perf_counter()
            done[name] += step(name, system, i)
            spent[name] += time.perf_counter() - began
    return {name: done[name] / spent[name] for name in systems}


def append_one(_: str, system: System, i: int) -> int:
    system.append(i % 50, i // 50 + 1)
    return 1


def append_batch(_: str, system: System, i: int) -> int:
    system.append(i % 50, (i // 50) * 100 + 1, 100)
    return 100


def append_suite(
    backend: str, make_target: Callable[[str], str], appends: int, figures: Figures, run: int
) -> None:
    def target(name: str) -> str:
        return make_target(f"{name}-{run}")

    print(f"\n{backend}: single-event transactional appends (events/s)")
    for processes, followed in ((1, False), (4, False), (4, True)):
        shape = f"{processes} process(es)" + (" and a reader" if followed else "")
        name = f"{processes}{'-followed' if followed else ''}"
        es_rate, es_note = appends_per_second(
            "eventsourcing",
            target(f"es-{name}"),
            processes,
            appends // processes,
            followed=followed,
        )
        row(figures, f"{backend} eventsourcing, {shape}", es_rate, "events/s", note=es_note)
        for durability in DURABILITIES:
            rate, note = appends_per_second(
                "tickwork",
                target(f"tw-{durability}-{name}"),
                processes,
                appends // processes,
                durability,
                followed,
            )
            label = f"{backend} tickwork, {shape}, durability={durability}"
            row(figures, label, rate, "events/s", {"eventsourcing": es_rate}, note)

    if backend == "SQLite":
        print(f"\n{backend}: tickwork beside raw sqlite3, one append each in turn (events/s)")
        for durability in DURABILITIES:
            side: dict[str, System] = {
                "sqlite3": RawSqlite(target(f"raw-{durability}"), durability),
                AUTOCOMMIT: RawSqlite(target(f"raw-alone-{durability}"), durability, alone=True),
                "tickwork": Tickwork(target(f"tw-raw-{durability}"), durability),
                RANDOM: Tickwork(target(f"tw-raw-uuid4-{durability}"), durability, uuid.uuid4),
            }
            rates = interleaved(side, appends, append_one)
            synchronous = SQLITE_SYNCHRONOUS[durability]
            raw = f"{backend} raw sqlite3, synchronous={synchronous}"
            row(figures, raw, rates["sqlite3"], "events/s")
            row(figures, f"{raw}, {AUTOCOMMIT}", rates[AUTOCOMMIT], "events/s")
            floor = {"sqlite3": rates["sqlite3"], "sqlite3 autocommit": rates[AUTOCOMMIT]}
            label = f"{backend} tickwork, durability={durability}"
            row(figures, label, rates["tickwork"], "events/s", floor)
            row(figures, f"{label}, {RANDOM}", rates[RANDOM], "events/s", floor)
            for system in side.values():
                system.close()

    print(f"\n{backend}: batch appends of 100 events, one batch each in turn (events/s)")
    systems: dict[str, System] = {
        "eventsourcing": EventSourcing(target("es-batch")),
        "tickwork": Tickwork(target("tw-batch")),
    }
    if backend == "SQLite":
        systems[RANDOM] = Tickwork(target("tw-batch-uuid4"), mint=uuid.uuid4)
    rates = interleaved(systems, appends * 4 // 100, append_batch)
    row(figures, f"{backend} eventsourcing, batches", rates["eventsourcing"], "events/s")
    anchors = {"eventsourcing": rates["eventsourcing"]}
    row(figures, f"{backend} tickwork, batches", rates["tickwork"], "events/s", anchors)
    if RANDOM in systems:
        label = f"{backend} tickwork, batches, {RANDOM}"
        row(figures, label, rates[RANDOM], "events/s", anchors)
        systems.pop(RANDOM).close()

    print(f"\n{backend}: read_all in pages of 1000, one page each in turn (events/s)")
    if backend == "PostgreSQL":
        for name in ("es-batch", "tw-batch"):
            analyze(target(name))
    cursors = dict.fromkeys(systems, 0)
    ends = {name: s.last() for name, s in systems.items() if not isinstance(s, RawSqlite)}

    def read_page(name: str, system: System, _: int) -> int:
        """The next page; at the end of the log, from its start again (no empty pages)."""
        assert not isinstance(system, RawSqlite)
        count, cursors[name] = system.page(cursors[name])
        if cursors[name] >= ends[name]:
            cursors[name] = 0
        return count

    rates = interleaved(systems, READ_PAGES, read_page)
    row(figures, f"{backend} eventsourcing read_all", rates["eventsourcing"], "events/s")
    label = f"{backend} tickwork read_all (typed records)"
    row(figures, label, rates["tickwork"], "events/s", {"eventsourcing": rates["eventsourcing"]})
    for system in systems.values():
        system.close()


def summary(figures: Figures) -> None:
    """Median and spread of every figure over the runs."""
    print("\nsummary over runs: median (min - max)")
    for label, values in figures.items():
        digits = 2 if " / " in label else 0
        low, high = min(values), max(values)
        print(
            f"  {label:<78} {statistics.median(values):>10,.{digits}f} "
            f"({low:,.{digits}f} - {high:,.{digits}f})"
        )


def load_budget_spent(url: str, count: int) -> None:
    """Load a month of spend in time order, as a store fills.

    20 levels, 4 models (one tiered, one unpriced), prompt sizes up to 300k tokens.
    """
    store = open_store(url)
    rng = random.Random(7)
    levels = [f"level{i}" for i in range(20)]
    models = ["gpt-4o-mini", "claude-sonnet-4-5", "gemini-2.5-pro", "local-qwen"]
    chunks = count // 1000
    for chunk in range(chunks):
        day = 1 + chunk * 30 // chunks
        events = [
            NewEvent(
                uuid.uuid4(),
                "BudgetSpent",
                1,
                {
                    **PAYLOAD,
                    "occurred_at": f"2026-11-{day:02d}T12:00:00Z",
                    "level": rng.choice(levels),
                    "model": rng.choice(models),
                    "prompt_tokens": rng.randint(100, 300_000),
                    "completion_tokens": rng.randint(1, 4000),
                    "estimated": rng.random() < 0.01,
                },
            )
            for _ in range(1000)
        ]
        store.append(f"load-{chunk}", events, ANY)
    store.close()


def rebuild_suite(backend: str, url: str, count: int) -> None:
    print(f"\n{backend}: spend projection over {count:,} BudgetSpent events")
    began = time.perf_counter()
    load_budget_spent(url, count)
    print(f"  (loaded in {time.perf_counter() - began:.1f} s)")
    if backend == "PostgreSQL":
        # Autovacuum analyzes a table a million rows grew within its next naptime; without
        # statistics the planner sorts a window's 100,000 rows on disk instead of reading
        # them in primary-key order (92 ms against 25 ms a window), and the figure would
        # depend on whether autovacuum happened to run during the load. It also vacuums a
        # table that inserts grew (PostgreSQL 13 and later), which sets the visibility map
        # a live store has: without it, counting the events of a window reads the table
        # instead of the primary key (0.26 s a million against 0.06 s), and a vacuum of a
        # million rows could start in the middle of a rebuild.
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE events")
    store = open_store(url)
    prices = PriceBook()
    projector = projector_for(store, prices)
    timings = []
    for _ in range(3):
        began = time.perf_counter()
        projector.rebuild("spend")
        timings.append(time.perf_counter() - began)
    print(f"  {'rebuild from position 0 (median of 3)':<52} {statistics.median(timings):>12.2f} s")
    queries = []
    with store.read_transaction() as conn:
        spend_report(conn, prices, by=["level", "day"], levels=["level3"])
        for i in range(200):
            began = time.perf_counter()
            spend_report(conn, prices, by=["level", "day"], levels=[f"level{i % 20}"])
            queries.append(time.perf_counter() - began)
    print(
        f"  {'spend query by level and day (median / p99 of 200)':<52} "
        f"{statistics.median(queries) * 1000:>12.2f} ms  "
        f"p99 {sorted(queries)[197] * 1000:.2f} ms"
    )
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=5000, help="single appends per run")
    parser.add_argument("--rebuild", type=int, default=1_000_000, help="events for the rebuild")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--db-prefix", default="bench", help="PostgreSQL databases are named <prefix>_<system>"
    )
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-rebuild", action="store_true", help="skip the 1M-event part")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the append and read part")
    parser.add_argument("--rebuild-only", action="store_true", help="only the 1M-event part")
    args = parser.parse_args()

    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    figures: Figures = {}
    with tempfile.TemporaryDirectory() as folder:

        def sqlite_target(name: str) -> str:
            path = Path(folder) / f"{name}.db"
            return f"sqlite:{path}" if name.startswith("es") else f"sqlite:///{path}"

        created: dict[str, str] = {}

        def pg_target(name: str) -> str:
            if name not in created:
                created[name] = fresh_pg(args.pg_url, f"{args.db_prefix}_{name}".replace("-", "_"))
                if not name.startswith("es"):
                    migrate_store(created[name])
            return created[name]

        for run in range(0 if args.rebuild_only else args.repeat):
            if not args.no_sqlite:
                append_suite("SQLite", sqlite_target, args.appends, figures, run)
            if not args.no_postgres:
                append_suite("PostgreSQL", pg_target, args.appends, figures, run)
            print(f"load average after run {run + 1}: {os.getloadavg()}")
        if args.repeat > 1:
            summary(figures)
        if args.no_rebuild:
            return
        if not args.no_sqlite:
            rebuild_suite("SQLite", f"sqlite:///{folder}/rebuild.db", args.rebuild)
        if not args.no_postgres:
            rebuild_url = fresh_pg(args.pg_url, f"{args.db_prefix}_rebuild")
            migrate_store(rebuild_url)
            rebuild_suite("PostgreSQL", rebuild_url, args.rebuild)


if __name__ == "__main__":
    main()
