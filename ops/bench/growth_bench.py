"""Growth benchmark: every operator read path at two history sizes, and the ratio.

Invariant 14 says a read path costs what its window costs. This builds synthetic history
shaped like real ticks (issue 24's measurement of a real run: 13.6 events and 5.6 KB of
payload a tick, half of it transcript; 1,000 levels configured, each ticking every
minute, so the last hour holds 60,000 ticks whatever the size) at each size, on SQLite
and PostgreSQL, and prints each read path's p50 and the ratio of the larger size to the
smaller: a flat path stays near 1.

The history goes in with raw `executemany` (SQLite) or COPY (PostgreSQL), not one append
at a time, laid out as the store's writer lays out its appends (PostgreSQL: each tick in
its day's partition, with its `event_ids` and `tick_streams` rows), which a tick appended
through the store checks at the end of the load (`check_layout`); then `tickwork
projections rebuild` folds the read models (its time is a figure too). API paths run
in-process through FastAPI's TestClient, CLI paths as subprocesses (their time includes
the interpreter's start), reconcile's and start-up's queries as the service calls them.
Disk per tick is the hot store's size over its ticks. Closed ticks are packed into tick
rows after each minute of history is loaded, as the service does while it runs
(`harness.store.tick_rows`; `--no-compaction` leaves them in `events`).

    .venv/bin/python ops/bench/growth_bench.py [--sizes 1000000,10000000]
        [--backends sqlite,postgresql] [--pg-url postgresql://postgres@127.0.0.1:5432/test]
        [--pg-database bench_growth]
        [--runs 7] [--cli-runs 3] [--run-seconds 90] [--only-disk] [--no-compaction]

`--only-disk` stops after the disk figure and prints where the bytes are: per table and
index, and per event type (rows, and bytes of their JSON).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg
import sqlalchemy as sa
from fastapi.testclient import TestClient
from machine import describe, peak_rss
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
from harness.devtools.fake_llm import fake_upstream
from harness.devtools.upstream import env_for_ticks
from harness.execution.manual import ManualTicks
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.ticks import last_slots, open_ticks
from harness.store import migrate_store, open_store, schema
from harness.store.partitions import ensure_days, partitioned, prepare
from harness.store.sql import SqlEventStore
from harness.store.tick_rows import compact

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
COMPACT_VACUUM_MINUTES = 10
"""PostgreSQL: a plain VACUUM of `events` and `event_ids` every this many minutes of
history loaded, as autovacuum does for the tables whose rows compaction deletes (nearly
all of them: `events`' TOAST table, and the packed ids, which leave `event_ids`)."""
TOOL_TICKS = 0.65
"""Share of ticks with three model calls and two tool calls (15 events), the rest have
two calls and one tool call (11 events): 13.6 events a tick on average."""


# --- synthetic history ----------------------------------------------------------------


def tick_events(tick_id: str, level: str, start: datetime, calls: int, ended: bool) -> list[Event]:
    """One tick's events as a worker and its runner record them."""
    at = iter(start + timedelta(seconds=s) for s in range(100))
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
    if not ended:
        return found
    if tick_id.endswith("7"):
        found.append(
            TickFailed(tick_id=tick_id, level=level, reason="empty output", occurred_at=next(at))
        )
    else:
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


Row = tuple[Any, str, int, str, int, str, str, datetime, date]
"""An event as `events` holds it, without its position: event id, stream, stream
position, type, version, data, metadata, recorded_at, and its tick stream's day."""


def history(events: int, now: datetime) -> Iterator[list[Row]]:
    """Rows of about `events` events, a minute of 1,000 ticks at a time, ending at `now`."""
    rng = random.Random(24)
    ticks = round(events / (11 + 4 * TOOL_TICKS))
    minutes = -(-ticks // PER_MINUTE)
    for minute in range(minutes):
        start = now - timedelta(minutes=minutes - minute, seconds=30)
        rows: list[Row] = []
        for n in range(minute * PER_MINUTE, min(ticks, (minute + 1) * PER_MINUTE)):
            level = LEVELS[n % PER_MINUTE]
            tick_id = f"{level}-{start:%Y%m%dT%H%M%S}-{n:08x}"
            calls = 3 if rng.random() < TOOL_TICKS else 2
            ended = ticks - n > IN_FLIGHT
            found = tick_events(tick_id, level, start, calls, ended)
            # The writer's partition key: the UTC day the stream's first event was recorded.
            day = found[0].occurred_at.astimezone(UTC).date()
            for version, event in enumerate(found, 1):
                record = event.to_record()
                rows.append(
                    (
                        event.event_id,
                        f"tick-{tick_id}",
                        version,
                        record.type,
                        record.version,
                        orjson.dumps(record.data).decode(),
                        orjson.dumps(record.metadata).decode(),
                        event.occurred_at,
                        day,
                    )
                )
        yield rows


def load_sqlite(url: str, events: int, now: datetime, compacting: bool) -> int:
    """Load the history a minute at a time, packing closed ticks after each (`compacting`).

    Positions come from AUTOINCREMENT, as the writer's do; SQLite has no tick day.
    """
    path = make_url(url).database
    assert path is not None
    store = open_store(url)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA synchronous = OFF")
        for minute, rows in enumerate(history(events, now)):
            insert_sqlite(conn, rows)
            if minute == 0:
                check_layout(store)
            if compacting:
                compact(store)
        store.close()
        return int(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])


def insert_sqlite(conn: sqlite3.Connection, rows: list[Row]) -> None:
    """Rows of `history` into SQLite's `events`, committed, as the writer stores them."""
    conn.executemany(
        "INSERT INTO events (event_id, stream_id, stream_position, "
        "type, version, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (i.hex, s, v, t, n, d, m, at.isoformat(" ", "microseconds")[:26])
            for i, s, v, t, n, d, m, at, _ in rows
        ],
    )
    conn.commit()


def load_postgres(url: str, events: int, now: datetime, compacting: bool) -> int:
    """As `load_sqlite`, with COPY, and the VACUUM that autovacuum would run meanwhile.

    Each minute is one transaction laid out as the writer lays out its appends
    (`harness.store.writer`, migration 0010): positions `(xid << 20) + k`, every tick stream
    in its day's partition (made first, as the writer makes it), its ids in `event_ids`,
    its day in `tick_streams`.
    """
    store = open_store(url)
    prepare(store.engine, now.date())
    made: set[date] = set()
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        columns = (
            "global_position, event_id, stream_id, stream_position, type, version, data, "
            "metadata, recorded_at, tick_day"
        )
        for minute, rows in enumerate(history(events, now), 1):
            days = {row[-1] for row in rows} - made
            if days:
                ensure_days(store.engine, days)
                made |= days
            with conn.transaction(), conn.cursor() as cursor:
                xid = cursor.execute("SELECT pg_current_xact_id()::text::bigint << 20").fetchone()
                assert xid is not None
                with cursor.copy(f"COPY events ({columns}) FROM STDIN") as copy:
                    for k, row in enumerate(rows, 1):
                        copy.write_row((xid[0] + k, *row))
                with cursor.copy("COPY event_ids (event_id, global_position) FROM STDIN") as copy:
                    for k, row in enumerate(rows, 1):
                        copy.write_row((row[0], xid[0] + k))
                with cursor.copy("COPY tick_streams (stream_id, tick_day) FROM STDIN") as copy:
                    for row in rows:
                        if row[2] == 1:
                            copy.write_row((row[1], row[-1]))
            if minute == 1:
                check_layout(store)
            if compacting:
                compact(store)
                if minute % COMPACT_VACUUM_MINUTES == 0:
                    conn.execute("VACUUM events, event_ids")
        store.close()
        conn.execute("VACUUM ANALYZE events, event_ids")
        counted = conn.execute("SELECT COUNT(*) FROM events").fetchone()
        assert counted is not None
        return int(counted[0])


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
POSTGRES_TOTALS = (
    "SELECT (SELECT count(*) FROM events_default), "
    "(SELECT count(*) FROM events_hot WHERE left(stream_id, 5) = 'tick-'), "
    "(SELECT count(*) FROM events) - (SELECT count(*) FROM event_ids), "
    "(SELECT count(DISTINCT stream_id) FROM events WHERE left(stream_id, 5) = 'tick-') "
    "- (SELECT count(*) FROM tick_streams)"
)


def check_layout(store: SqlEventStore) -> None:
    """Append one tick through the store and check the bulk load laid out one as it does.

    Run on the first minute loaded, before any tick of it is packed (packing is the
    store's own, alike for both). The first completed tick loaded and the appended one
    (as many calls) must give the same shape, row by row: column types, formats and keys
    on SQLite, and on PostgreSQL the position scheme, the partition, the tick day, `event_ids` and
    `tick_streams`; PostgreSQL's whole load must leave the default partition empty, no
    tick in `events_hot`, and one `event_ids` row per event, one `tick_streams` row per
    tick stream. A mismatch stops the bench: its figures would describe another layout.
    """
    postgres = partitioned(store.engine)
    shape = POSTGRES_SHAPE if postgres else SQLITE_SHAPE
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
    tick_id = f"{LEVELS[0]}-layoutcheck-00000000"
    for event in tick_events(tick_id, LEVELS[0], datetime.now(UTC), calls, ended=True):
        store.append(f"tick-{tick_id}", [event.to_record()])
    with store.read_transaction() as conn:
        loaded, appended = (
            conn.exec_driver_sql(shape, (stream,)).all() for stream in (sample, f"tick-{tick_id}")
        )
        totals = tuple(conn.exec_driver_sql(POSTGRES_TOTALS).one()) if postgres else (0,) * 4
    if loaded != appended or any(totals):
        raise SystemExit(
            f"layout check failed: {sample} loaded as {loaded}, appended as {appended}; "
            f"default rows, hot ticks, events without an id, streams without a day: {totals}"
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
        began, spent = time.perf_counter(), cpu_seconds()
        call()
        walls.append(time.perf_counter() - began)
        cpus.append(cpu_seconds() - spent)
    return statistics.median(walls), statistics.median(cpus)


def cpu_seconds() -> float:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def cli(config: Path, *arguments: str) -> Callable[[], object]:
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), *arguments]

    def run() -> object:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(arguments)} failed: {done.stderr.strip()[-2000:]}")
        return done

    return run


def peak_rss_mib(config: Path, *arguments: str) -> float:
    """Peak RSS of one CLI run, as the kernel accounted it when the process ended."""
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), *arguments]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments)} exited {child.returncode}")
    return usage.ru_maxrss / 1024


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
        service.wait(120)
    return peak / 2**20


def measure(url: str, size: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    """Load `size` events into a fresh store at `url` and time every path on it."""
    figures: dict[str, float] = {}
    now = datetime.now(UTC)
    began = time.perf_counter()
    load = load_sqlite if url.startswith("sqlite") else load_postgres
    events = load(url, size, now, not args.no_compaction)
    ticks = round(size / (11 + 4 * TOOL_TICKS))
    print(
        f"  {size:,} events: {events:,} stored, {ticks:,} ticks, loaded in "
        f"{time.perf_counter() - began:.0f} s",
        flush=True,
    )
    config = write_config(root, url)
    began = time.perf_counter()
    cli(config, "projections", "rebuild")()
    figures["projections rebuild (s)"] = time.perf_counter() - began
    if not url.startswith("sqlite"):
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
    figures["disk per tick (KB)"] = disk_bytes(url) / ticks / 1000
    if args.only_disk:
        print_breakdown(url, ticks)
        return figures

    def timed(label: str, seconds: tuple[float, float]) -> None:
        figures[label], figures[f"{label} [CPU]"] = seconds

    settings = load_settings(config)
    store = open_store(url)
    recent = f"{LEVELS[7]}-{now - timedelta(minutes=2, seconds=30):%Y%m%dT%H%M%S}"
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
            timed(label, p50(args.runs, lambda path=path: client.get(path).raise_for_status()))
        shown = client.get("/ticks", params={"level": LEVELS[7], "limit": 3}).json()
    projector = projector_for(store, PriceBook(settings.prices))

    def reconcile() -> object:
        projector.catch_up(["ticks"])
        return open_ticks(store)

    def start_up() -> object:
        projector.catch_up(["ticks"])
        return last_slots(store, LEVELS)

    timed("reconcile: open ticks", p50(args.runs, reconcile))
    timed("start-up: last slots of 1,000 levels", p50(args.runs, start_up))
    store.close()
    tick_id = shown[-1]["tick_id"] if shown else recent
    for label, arguments in (
        ("tickwork status", ("status",)),
        ("tickwork show", ("show", tick_id)),
        ("tickwork digest --since 1h", ("digest", "--since", "1h")),
        ("tickwork events --since 1h", ("events", "--since", "1h")),
    ):
        timed(label, p50(args.cli_runs, cli(config, *arguments)))
    figures["digest --since 1h peak RSS (MiB)"] = peak_rss_mib(config, "digest", "--since", "1h")
    if args.run_seconds:
        figures["tickwork run peak RSS (MiB)"] = run_rss_mib(config, args.run_seconds)
    return figures


def fresh_store(backend: str, root: Path, pg_url: str, pg_database: str) -> str:
    """An empty store at head: a SQLite file in `root`, or a PostgreSQL database made afresh."""
    url = f"sqlite:///{root}/events.db" if backend == "sqlite" else fresh_pg(pg_url, pg_database)
    migrate_store(url)
    return url


def report(backend: str, sizes: list[int], results: list[dict[str, float]]) -> None:
    small, large = results[0], results[-1]
    head = "".join(f"{size:>14,}" for size in sizes)
    print(f"\n{backend}: p50 at each size (events), and the ratio of the last to the first")
    print(f"  {'path':<40}{head}{'ratio':>9}")
    for label in small:
        unit = "" if "(" in label else " ms"
        scale = 1 if "(" in label else 1000
        values = "".join(f"{result[label] * scale:>11,.1f}{unit or '   '}" for result in results)
        print(f"  {label:<40}{values}{large[label] / small[label]:>8.2f}x")


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
    parser.add_argument("--cli-runs", type=int, default=3, help="runs of each CLI path")
    parser.add_argument(
        "--no-compaction",
        action="store_true",
        help="leave closed ticks in `events`, as before they had a form of their own",
    )
    parser.add_argument(
        "--only-disk", action="store_true", help="stop at disk per tick, with its breakdown"
    )
    parser.add_argument(
        "--run-seconds", type=int, default=90, help="how long `tickwork run` runs (0: not)"
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    print(f"sizes: {', '.join(f'{size:,}' for size in sizes)} events; {len(LEVELS):,} levels")
    for backend in args.backends.split(","):
        print(f"\n{backend}:", flush=True)
        results = []
        for size in sizes:
            with tempfile.TemporaryDirectory() as folder:
                root = Path(folder)
                url = fresh_store(backend, root, args.pg_url, args.pg_database)
                results.append(measure(url, size, args, root))
            for label, value in results[-1].items():
                print(
                    f"    {label:<40}{value if '(' in label else value * 1000:>11,.1f}", flush=True
                )
        report(backend, sizes, results)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
