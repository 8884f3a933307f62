"""Archive benchmark: one old UTC day of ticks leaving the hot store, and a rebuild after.

Fills a store with `--ticks` completed ticks (scheduled, started, two model calls' spend,
a tool call, completed: 6 events each) on one day `hot_days` + 10 ago, written by a store
whose clock stands on that day, and as many today, then runs `tickwork archive` as a
process of its own and prints its time and peak RSS, the archive's bytes per tick, the
hot store's size before and after (SQLite: after incremental vacuum; PostgreSQL: the
events' partitions and the tables of their ids), and the time of `tickwork projections
rebuild` reading the archive.

The archive's pace is printed as events and ticks a second of wall and of its own CPU
(user + sys, its fold workers' too), extrapolated to a day of 1,000 levels a minute (1.44M
ticks), beside its peak RSS: the child's own high-water mark (`VmHWM`, read by the child
as it exits), not `wait4`'s `ru_maxrss`, the largest of every child waited for so far.
`--profile FILE` writes the archive run's cProfile stats there. `--settled` folds the read
models and packs the closed ticks before the archive runs, as a running service keeps
them: the archive's figures are then its own pass, not the catch-up a store filled
without a service needs first.

`--hold-open` adds one tick still open on the old day: on PostgreSQL its partition cannot
be dropped, and the day's events leave by DELETE instead, the path every day took
before partitioning (migration 0010).

    .venv/bin/python ops/bench/archive_bench.py [--ticks 20000] [--store URL] [--hold-open]
        [--profile FILE] [--settled]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.store import SqlEventStore, migrate_store, open_store
from harness.store.tick_rows import compact

HOT_DAYS = 30
DAY_TICKS = 1_440_000
"""A day of 1,000 levels a minute."""
MEASURED_ENV = "ARCHIVE_BENCH_MEASURED"
PROFILE_ENV = "ARCHIVE_BENCH_PROFILE"
RUNNER = f"""
import atexit, json, os, resource, sys
from pathlib import Path
def said():
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["{PROFILE_ENV}"])
    status = Path("/proc/self/status").read_text().splitlines()
    hwm = next(line for line in status if line.startswith("VmHWM"))
    cpu = sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (0, -1)))
    Path(os.environ["{MEASURED_ENV}"]).write_text(json.dumps(
        {{"hwm_kib": int(hwm.split()[1]), "cpu": cpu}}))
profile = None
if os.environ.get("{PROFILE_ENV}"):
    import cProfile
    profile = cProfile.Profile()
    profile.enable()
atexit.register(said)
sys.argv[0] = "tickwork"
from harness.cli import main
main()
"""
"""`tickwork`, run so that it writes its own peak RSS and CPU as it exits (and profiles)."""


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


@dataclass(frozen=True)
class Run:
    """One `tickwork` process: wall seconds, its own CPU seconds and peak RSS (MiB)."""

    seconds: float
    cpu: float
    peak: float


def timed(folder: Path, *args: str, profile: str | None = None) -> Run:
    """Run one `tickwork` process; the lines saying how and how fast a day left are printed."""
    measured = folder / "measured.json"
    env = {**os.environ, "COLUMNS": "400", MEASURED_ENV: str(measured)}  # report lines unwrapped
    if profile:
        env[PROFILE_ENV] = str(Path(profile).absolute())
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *args], cwd=folder, capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"tickwork {' '.join(args)} failed: {done.stderr}")
    for line in done.stdout.splitlines():
        if "left the store" in line:
            print(line.strip())
    own = json.loads(measured.read_text())
    return Run(seconds, own["cpu"], own["hwm_kib"] / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20_000)
    parser.add_argument(
        "--store", help="an empty store's URL (default: SQLite in a temporary folder)"
    )
    parser.add_argument("--hold-open", action="store_true", help="one old tick stays open")
    parser.add_argument("--profile", help="write the archive run's cProfile stats to this file")
    parser.add_argument(
        "--settled", action="store_true", help="read models folded, ticks packed, before"
    )
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
        if options.settled:
            started = time.perf_counter()
            projector_for(store, PriceBook()).catch_up()
            compact(store)
            print(
                f"read models folded and ticks packed first: {time.perf_counter() - started:.1f} s"
            )
        before = size(store)
        store.close()
        archived = timed(folder, "archive", profile=options.profile)
        store = open_store(url)
        after = size(store)
        store.close()
        archive = sum(
            os.path.getsize(path) for path in (folder / ".tickwork" / "archive").rglob("*.gz")
        )
        rebuild = timed(folder, "projections", "rebuild").seconds
        events = options.ticks * len(tick("x"))
        held = ", one held open" if options.hold_open else ""
        print(
            f"archive of {options.ticks:,} ticks{held} ({events:,} events): "
            f"{archived.seconds:.2f} s wall, {archived.cpu:.2f} s CPU (user + sys), "
            f"peak RSS (VmHWM) {archived.peak:.0f} MiB"
        )
        for what, seconds in (("wall", archived.seconds), ("CPU", archived.cpu)):
            print(
                f"  per {what} second: {events / seconds:,.0f} events/s, "
                f"{options.ticks / seconds:,.0f} ticks/s; a day of {DAY_TICKS:,} ticks: "
                f"{DAY_TICKS / options.ticks * seconds / 3600:.2f} h"
            )
        print(f"archive bytes per tick: {archive / options.ticks:.0f}")
        print(f"hot store: {before / 2**20:.1f} MiB before, {after / 2**20:.1f} MiB after")
        print(f"projections rebuild (archive + hot store): {rebuild:.2f} s")


if __name__ == "__main__":
    main()
