"""What an archive run's VACUUM costs the PostgreSQL server: the store's tables or the database.

After each archive run a PostgreSQL store vacuums what the run deleted
(`harness.store.retention.reclaim_space`). The bench first runs a simulated month of days
through the real store and archive (`harness.devtools.soak`, as `retention_soak.py`), so
the system catalogs carry the dead rows of a month of day partitions made and dropped,
then times, alternately on one connection, the anchor `VACUUM (ANALYZE)` of the whole
database (every run did it before) and `VACUUM (ANALYZE)` of the store's tables
(`harness.store.sql.STORE_TABLES`, what a run does now). It prints each one's mean wall
and the server backend's mean CPU, read from its process (in clock ticks, so over all the
runs): the server must run on this host.

    .venv/bin/python ops/bench/vacuum_bench.py --store postgresql+psycopg://postgres@127.0.0.1/DB
        [--days 30] [--ticks 50] [--runs 20]

The database is migrated and filled; give it one made for the bench.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
from machine import describe

from harness.config import load_settings
from harness.devtools.soak import SimulatedClock, Soak
from harness.store import SqlEventStore, migrate_store, open_store
from harness.store.sql import STORE_TABLES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="a PostgreSQL URL the bench may fill")
    parser.add_argument("--days", type=int, default=30, help="simulated days archived first")
    parser.add_argument("--ticks", type=int, default=50, help="ticks per simulated day")
    parser.add_argument("--runs", type=int, default=20, help="runs of each VACUUM, alternated")
    args = parser.parse_args()
    print(describe())
    migrate_store(args.store)
    with tempfile.TemporaryDirectory() as temp:
        store = _soaked(args.store, Path(temp), args.days, args.ticks)
        try:
            tables = _compare(store, args.runs)
        finally:
            store.close()
    print(f"store tables: {tables}")


def _soaked(url: str, folder: Path, days: int, ticks: int) -> SqlEventStore:
    """The store after `days` simulated days, each archived after its midnight (hot_days 3)."""
    config = folder / "tickwork.toml"
    config.write_text(
        f'[store]\nurl = "{url}"\n[paths]\nresults = "{folder / "results"}"\n'
        f'[retention]\nhot_days = 3\narchive = "{folder / "archive"}"\n',
        encoding="utf-8",
    )
    first = datetime.now(UTC).date() - timedelta(days=days + 2)
    clock = SimulatedClock(datetime.combine(first, datetime.min.time(), UTC))
    store = open_store(url, clock=clock)
    soak = Soak(load_settings(config), store, clock, ticks, lambda line: None)
    started = time.perf_counter()
    for n in range(days):
        soak.day(first + timedelta(days=n))
    took = time.perf_counter() - started
    print(f"{days} simulated days of {ticks} ticks archived in {took:.1f} s")
    return store


def _compare(store: SqlEventStore, runs: int) -> int:
    """Print each VACUUM's median wall and backend CPU; the number of store tables."""
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        backend = psutil.Process(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        names = conn.exec_driver_sql(STORE_TABLES).scalars().all()
        statements = {
            "anchor: the whole database": "VACUUM (ANALYZE)",
            "the store's tables": f"VACUUM (ANALYZE) {', '.join(names)}",
        }
        spent: dict[str, list[tuple[float, float]]] = {label: [] for label in statements}
        for _ in range(runs):
            for label, statement in statements.items():
                cpu, started = _cpu(backend), time.perf_counter()
                conn.exec_driver_sql(statement)
                spent[label].append((time.perf_counter() - started, _cpu(backend) - cpu))
    print(f"{'VACUUM (ANALYZE) of':<28} {'wall ms':>8} {'server CPU ms':>14}  (means of {runs})")
    for label, pairs in spent.items():
        wall = statistics.fmean(pair[0] for pair in pairs) * 1000
        cpu = statistics.fmean(pair[1] for pair in pairs) * 1000
        print(f"{label:<28} {wall:>8.1f} {cpu:>14.1f}")
    return len(names)


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


if __name__ == "__main__":
    main()
