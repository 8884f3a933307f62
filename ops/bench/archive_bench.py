"""Archive benchmark: one old UTC day of ticks leaving the hot store, and a rebuild after.

Fills a store with `--ticks` completed ticks (scheduled, started, two model calls' spend,
a tool call, completed: 6 events each) on one day `hot_days` + 10 ago, written by a store
whose clock stands on that day, and as many today, then runs `tickwork archive` as a
process of its own and prints its time and peak RSS, the archive's bytes per tick, the
hot store's size before and after (SQLite: after incremental vacuum; PostgreSQL: the
events' partitions and the tables of their ids), and the time of `tickwork projections
rebuild` reading the archive.

`--hold-open` adds one tick still open on the old day: on PostgreSQL its partition cannot
be dropped, and the day's events leave by DELETE instead, the path every day took
before partitioning (migration 0010).

    .venv/bin/python ops/bench/archive_bench.py [--ticks 20000] [--store URL] [--hold-open]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from machine import describe

from harness.contracts.events import (
    BudgetSpent,
    Event,
    TickCompleted,
    TickScheduled,
    TickStarted,
    ToolCalled,
)
from harness.store import SqlEventStore, migrate_store, open_store

TICKWORK = str(Path(sys.executable).with_name("tickwork"))
HOT_DAYS = 30


def tick(tick_id: str) -> list[Event]:
    ids = {"tick_id": tick_id, "level": "min"}
    return [
        TickScheduled(**ids, model="m"),
        TickStarted(**ids, pid=1, host="h"),
        BudgetSpent(**ids, model="m", prompt_tokens=1200, completion_tokens=80),
        ToolCalled(**ids, name="shell", status="ok"),
        BudgetSpent(**ids, model="m", prompt_tokens=1500, completion_tokens=120),
        TickCompleted(**ids, prompt_tokens=2700, completion_tokens=200, model_calls=2),
    ]


def fill(store: SqlEventStore, ticks: int, prefix: str) -> None:
    """Append the ticks."""
    for n in range(ticks):
        store.append(f"tick-{prefix}{n}", [event.to_record() for event in tick(f"{prefix}{n}")])


def size(store: SqlEventStore) -> int:
    """Bytes the store takes on disk (SQLite: the file; PostgreSQL: the events' tables).

    PostgreSQL: every partition of `events` (or the table, not partitioned before
    migration 0010), with `event_ids` and `tick_streams` where they exist.
    """
    with store.read_transaction() as conn:
        if conn.dialect.name == "postgresql":
            query = (
                "SELECT COALESCE((SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree('events')), pg_total_relation_size('events')) + "
                "COALESCE(pg_total_relation_size(to_regclass('event_ids')), 0) + "
                "COALESCE(pg_total_relation_size(to_regclass('tick_streams')), 0)"
            )
            return int(conn.exec_driver_sql(query).scalar())
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        return int(pages * conn.exec_driver_sql("PRAGMA page_size").scalar())


def timed(folder: Path, *args: str) -> tuple[float, float]:
    """(seconds, peak RSS MiB of the children so far) of one `tickwork` process.

    The archive runs first, so its peak is its own (it folds the read models itself).
    The lines saying how and how fast a day left the store are printed.
    """
    started = time.perf_counter()
    wide = {**os.environ, "COLUMNS": "400"}  # its report lines unwrapped
    done = subprocess.run([TICKWORK, *args], cwd=folder, capture_output=True, text=True, env=wide)
    if done.returncode != 0:
        raise SystemExit(f"tickwork {' '.join(args)} failed: {done.stderr}")
    for line in done.stdout.splitlines():
        if "left the store" in line:
            print(line.strip())
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return time.perf_counter() - started, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20_000)
    parser.add_argument(
        "--store", help="an empty store's URL (default: SQLite in a temporary folder)"
    )
    parser.add_argument("--hold-open", action="store_true", help="one old tick stays open")
    options = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        url = options.store or f"sqlite:///{folder}/events.db"
        (folder / "tickwork.toml").write_text(
            f'[store]\nurl = "{url}"\n[retention]\nhot_days = {HOT_DAYS}\n', encoding="utf-8"
        )
        migrate_store(url)
        day = datetime.now(UTC) - timedelta(days=HOT_DAYS + 10)
        with contextlib.closing(open_store(url, clock=lambda: day)) as then:
            fill(then, options.ticks, "old")
            if options.hold_open:
                then.append("tick-held", [TickScheduled(tick_id="held", level="min").to_record()])
        store = open_store(url)
        fill(store, options.ticks, "new")
        before = size(store)
        store.close()
        seconds, peak = timed(folder, "archive")
        store = open_store(url)
        after = size(store)
        store.close()
        archive = sum(
            os.path.getsize(path) for path in (folder / ".tickwork" / "archive").rglob("*.gz")
        )
        rebuild, _ = timed(folder, "projections", "rebuild")
        events = options.ticks * len(tick("x"))
        held = ", one held open" if options.hold_open else ""
        print(
            f"archive of {options.ticks:,} ticks{held} ({events:,} events): {seconds:.2f} s, "
            f"peak RSS {peak:.0f} MiB"
        )
        print(f"archive bytes per tick: {archive / options.ticks:.0f}")
        print(f"hot store: {before / 2**20:.1f} MiB before, {after / 2**20:.1f} MiB after")
        print(f"projections rebuild (archive + hot store): {rebuild:.2f} s")


if __name__ == "__main__":
    main()
