"""Retention soak: a simulated month archived day by day shows the plateau of `hot_days`.

Runs `harness.devtools.soak` (the retention test's month) at a larger scale: `--ticks`
completed ticks a day (5 events each, a result and a log file each) appended through the
real store on a simulated clock, and the real archive run after each simulated midnight.
Prints per simulated day the hot store (events, the `events` table's bytes, the whole
store's bytes: SQLite's file after incremental vacuum, PostgreSQL's database), the
results folder's files and bytes, and the archive folder's bytes.

    .venv/bin/python ops/bench/retention_soak.py [--days 30] [--hot-days 7] [--ticks 500]
        [--store URL]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from machine import describe

from harness.config import load_settings
from harness.devtools.soak import SimulatedClock, Soak
from harness.store import migrate_store, open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--hot-days", type=int, default=7)
    parser.add_argument("--ticks", type=int, default=500, help="ticks per simulated day")
    parser.add_argument("--store", help="a PostgreSQL URL (default: SQLite in a temp folder)")
    args = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        url = args.store or f"sqlite:///{folder}/events.db"
        if args.store:
            migrate_store(url)
        config = folder / "tickwork.toml"
        config.write_text(
            f'[store]\nurl = "{url}"\n[paths]\nresults = "{folder / "results"}"\n'
            f'[retention]\nhot_days = {args.hot_days}\narchive = "{folder / "archive"}"\n',
            encoding="utf-8",
        )
        first = datetime.now(UTC).date() - timedelta(days=args.days + 2)
        clock = SimulatedClock(datetime.combine(first, datetime.min.time(), UTC))
        store = open_store(url, clock=clock)
        soak = Soak(load_settings(config), store, clock, args.ticks, lambda line: None)
        print(
            f"store {store.engine.dialect.name}, hot_days {args.hot_days}, "
            f"{args.ticks} ticks a day, {args.days} days"
        )
        print(
            "day  hot events  events KiB  store KiB  result files  results KiB  archive KiB  day s"
        )
        for n in range(args.days):
            started = time.perf_counter()
            left = soak.day(first + timedelta(days=n))
            print(
                f"{n + 1:>3}  {left.store.events:>10,}  {left.store.events_size // 1024:>10,}  "
                f"{left.store.size // 1024:>9,}  {left.result_files:>12,}  "
                f"{left.results_bytes // 1024:>11,}  {left.archive_bytes // 1024:>11,}  "
                f"{time.perf_counter() - started:>5.1f}",
                flush=True,
            )
        store.close()


if __name__ == "__main__":
    main()
