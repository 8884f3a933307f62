"""Archive benchmark: one old UTC day of ticks leaving the hot store, and a rebuild after.

Fills a store with `--ticks` ticks of 1,000 levels a minute (1,440,000 is a whole day),
all closed, from the start of a day `hot_days` + 10 ago, and `--hot-ticks` ending now
(default as many), with `history_loader`: ticks shaped like real ones (13.6 events),
closed ones packed in their tick rows, laid out as the store lays them out (checked). The read
models are rebuilt first, as a running service keeps them current (its time is printed).
Then `tickwork archive` runs as a process of its own; the bench prints its time and peak
RSS, the archive's bytes per tick, the hot store's size before and after (SQLite: after
incremental vacuum; PostgreSQL: the database after its VACUUM) and the part of it
`tick_rows` takes (on PostgreSQL a day's rows leave as its partition, migration 0027),
and the time of `tickwork projections rebuild` reading the archive.

`--transcripts-only` archives the old day's transcripts alone, its ticks staying hot
(`transcript_days` = 30, `hot_days` = 60): the pass a service with a shorter
`transcript_days` runs each day (a day whose ticks leave takes its transcripts along).

`--hold-open` adds one tick still open on the old day: on PostgreSQL its partition cannot
be dropped, and the day's events leave by DELETE instead, the path every day took
before partitioning (migration 0010).

A whole day takes far longer to load and fold than to archive: `--prepared FOLDER`
(SQLite) keeps the loaded and folded store there and archives a copy of it, so a second
run (another tree's code, through `PYTHONPATH`) starts from the same store, on the same
UTC day. `--no-rebuild` skips the rebuild after the archive.

    .venv/bin/python ops/bench/archive_bench.py [--ticks 20000] [--hot-ticks N]
        [--store URL] [--hold-open] [--prepared FOLDER] [--no-rebuild] [--transcripts-only]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from history_loader import PER_MINUTE, Span, check_layout, load
from machine import describe, own_peak_mib

from harness.contracts.events import TickScheduled
from harness.store import SqlEventStore, migrate_store, open_store, schema

TICKWORK = str(Path(sys.executable).with_name("tickwork"))
HOT_DAYS = 30


def size(store: SqlEventStore) -> int:
    """Bytes the whole store takes on disk, read models and packed tick rows included.

    SQLite: its pages (free ones too, so after the archive's incremental vacuum, what
    the file takes); PostgreSQL: the database (after the archive's VACUUM, dead tuples'
    space is reusable but still counted until a table is rewritten).
    """
    with store.read_transaction() as conn:
        if conn.dialect.name == "postgresql":
            query = "SELECT pg_database_size(current_database())"
            return int(conn.exec_driver_sql(query).scalar_one())
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        return int(pages * conn.exec_driver_sql("PRAGMA page_size").scalar())


def rows_size(store: SqlEventStore) -> int:
    """Bytes `tick_rows` takes with its indexes (PostgreSQL: its partitions', 0027, and TOAST)."""
    with store.read_transaction() as conn:
        if conn.dialect.name == "postgresql":
            # A partitioned table has no storage of its own; an unpartitioned one (before
            # 0027) no partition tree.
            query = (
                "SELECT pg_total_relation_size('tick_rows') + coalesce((SELECT "
                "sum(pg_total_relation_size(relid)) FROM pg_partition_tree('tick_rows')), 0)"
            )
        else:
            query = (
                "SELECT sum(pgsize) FROM dbstat WHERE name IN "
                "(SELECT name FROM sqlite_schema WHERE tbl_name = 'tick_rows')"
            )
        return int(conn.exec_driver_sql(query).scalar() or 0)


def timed(folder: Path, *args: str) -> tuple[float, float, float]:
    """(seconds, CPU seconds, peak RSS MiB) of one `tickwork` process (`machine.own_peak_mib`).

    CPU is the user and system time of the child once reaped: at this machine's load the
    wall clock measures the other processes more than this one. The lines saying how
    and how fast a day left the store are printed.
    """
    wide = {**os.environ, "COLUMNS": "400"}  # its report lines unwrapped
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        child = subprocess.Popen([TICKWORK, *args], cwd=folder, env=wide, stdout=out, stderr=err)
        peak = own_peak_mib(child)
        seconds = time.perf_counter() - started
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"tickwork {' '.join(args)} failed: {err.read()}")
        for line in out.read().splitlines():
            if "left the store" in line:
                print(line.strip())
    return seconds, cpu, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20_000, help="ticks of the old day")
    parser.add_argument(
        "--hot-ticks", type=int, help="ticks ending now, at least 100 (default: --ticks)"
    )
    parser.add_argument(
        "--store", help="an empty store's URL (default: SQLite in a temporary folder)"
    )
    parser.add_argument("--hold-open", action="store_true", help="one old tick stays open")
    parser.add_argument(
        "--prepared", type=Path, help="SQLite: keep the folded store here, archive a copy"
    )
    parser.add_argument("--no-rebuild", action="store_true", help="no rebuild after archiving")
    parser.add_argument(
        "--transcripts-only", action="store_true", help="the old day's transcripts leave alone"
    )
    options = parser.parse_args()
    if options.prepared and options.store:
        parser.error("--prepared: SQLite stores only")
    hot_ticks = options.ticks if options.hot_ticks is None else options.hot_ticks
    if hot_ticks < 100:
        # Open ticks end the log (its newest record is never packed) and the layout check
        # needs a closed one beside them.
        parser.error("--hot-ticks: at least 100")
    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        url = options.store or f"sqlite:///{folder}/events.db"
        retention = f"hot_days = {HOT_DAYS}\n"
        if options.transcripts_only:
            retention = f"hot_days = {2 * HOT_DAYS}\ntranscript_days = {HOT_DAYS}\n"
        (folder / "tickwork.toml").write_text(
            f'[store]\nurl = "{url}"\n[retention]\n{retention}', encoding="utf-8"
        )
        day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(
            days=HOT_DAYS + 10
        )
        kept = options.prepared
        if kept is not None and (kept / "events.db").exists():
            copy_store(kept, folder)
            print(f"store copied from {kept}", flush=True)
        else:
            prepare(folder, url, day, options.ticks, hot_ticks, options.hold_open)
            if kept is not None:
                kept.mkdir(parents=True, exist_ok=True)
                copy_store(folder, kept)
        store = open_store(url)
        before, rows_before = size(store), rows_size(store)
        old_events = events_before(store, day + timedelta(days=1))
        store.close()
        seconds, cpu, peak = timed(folder, "archive")
        store = open_store(url)
        after, rows_after = size(store), rows_size(store)
        store.close()
        archive = sum(
            os.path.getsize(path) for path in (folder / ".tickwork" / "archive").rglob("*.gz")
        )
        rebuild = None if options.no_rebuild else timed(folder, "projections", "rebuild")[0]
        held = ", one held open" if options.hold_open else ""
        print(
            f"archive of {options.ticks:,} ticks{held} ({old_events:,} events): {seconds:.2f} s, "
            f"CPU {cpu:.2f} s, peak RSS {peak:.0f} MiB"
        )
        print(f"archive bytes per tick: {archive / options.ticks:.0f}")
        print(f"hot store: {before / 2**20:.1f} MiB before, {after / 2**20:.1f} MiB after")
        print(
            f"  of which tick_rows: {rows_before / 2**20:.1f} MiB before, "
            f"{rows_after / 2**20:.1f} MiB after"
        )
        if rebuild is not None:
            print(f"projections rebuild (archive + hot store): {rebuild:.2f} s")
    print(f"load average at end: {os.getloadavg()}")


def copy_store(source: Path, target: Path) -> None:
    """A closed SQLite store's file, and its write-ahead log if one was left."""
    for name in ("events.db", "events.db-wal"):
        if (source / name).exists():
            shutil.copyfile(source / name, target / name)


def prepare(
    folder: Path, url: str, day: datetime, ticks: int, hot_ticks: int, hold_open: bool
) -> None:
    """Load the old day and the hot ticks, and fold the read models as a service keeps them."""
    migrate_store(url)
    minutes = -(-ticks // PER_MINUTE)
    old = Span(day + timedelta(minutes=minutes, seconds=30), ticks, in_flight=0)
    began = time.perf_counter()
    load(url, old, packing=True)
    hot, packed = load(url, Span(datetime.now(UTC), hot_ticks, first=ticks), True)
    print(
        f"loaded {hot:,} events and {packed:,} packed records in "
        f"{time.perf_counter() - began:.0f} s",
        flush=True,
    )
    with contextlib.closing(open_store(url)) as store:
        check_layout(store, packing=True)
    if hold_open:
        with contextlib.closing(open_store(url, clock=lambda: day)) as then:
            then.append("tick-held", [TickScheduled(tick_id="held", level="min").to_record()])
    built, _, _ = timed(folder, "projections", "rebuild")
    print(f"projections rebuild before archiving: {built:.2f} s", flush=True)


def events_before(store: SqlEventStore, end: datetime) -> int:
    """Records of the ticks begun before `end` (the old day's): packed, and left in `events`."""
    rows = schema.tick_rows
    packed = sa.select(sa.func.coalesce(sa.func.sum(rows.c.events), 0)).where(
        rows.c.day < end.date()
    )
    hot = sa.select(sa.func.count()).where(schema.events.c.recorded_at < end)
    with store.read_transaction() as conn:
        return int(conn.execute(packed).scalar_one()) + int(conn.execute(hot).scalar_one())


if __name__ == "__main__":
    main()
