"""The dashboard's panels and `tickwork digest --since 1h` at 1,000 levels: CPU per path.

Issue 24's goals: `GET /dashboard/panels` within 150 ms and `tickwork digest --since 1h`
within 2 s of CPU (interpreter start included) at 1,000 levels, whatever the history. The
store is `metrics_bench`'s (`--store` keeps and reuses it, so the two benches share one
load), with `--days` earlier days of spend. Panels run in-process through the API, as a
browser's refresh reaches them; the digest as a subprocess. CPU is the path's own user +
system time (a shared machine's wall clock counts its wait for a core); the least of the
runs is the truest figure of the path's own work.

    .venv/bin/python ops/bench/panels_bench.py --store FOLDER [--events 300000]
        [--days 30] [--runs 7] [--cli-runs 3] [--fold-runs 0] [--profile]

`--fold-runs N` stores a minute of 1,000 ticks N times and times each fold of it (every
read model, as a request's catch-up folds it): what the panels' read models cost to keep.
It adds to the kept store. `--profile` prints where one panels draw spends its time
(cProfile, cumulative), drawn in the bench's own thread.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sqlite3
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from growth_bench import PER_MINUTE, TOOL_TICKS, cli, history, insert_sqlite
from machine import describe
from metrics_bench import add_days_of_spend, once, prepared

from harness.api import dashboard
from harness.api.app import create_app
from harness.api.reads import Reads
from harness.config import load_settings
from harness.devtools.upstream import env_for_ticks
from harness.execution.manual import ManualTicks
from harness.store import open_store


def figures(runs: list[tuple[float, float]]) -> str:
    """p50 wall, p50 and least CPU of (wall, CPU) seconds of runs."""
    walls, cpus = zip(*runs, strict=True)
    return (
        f"p50 {statistics.median(walls) * 1000:,.1f} ms wall, "
        f"{statistics.median(cpus) * 1000:,.1f} ms CPU (least {min(cpus) * 1000:,.1f})"
    )


def timed(runs: int, call: Callable[[], object]) -> str:
    """`figures` of `runs` calls after one unmeasured warm-up."""
    call()
    return figures([once(call, None) for _ in range(runs)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="the folder kept between runs")
    parser.add_argument("--events", type=int, default=300_000, help="events of a new store")
    parser.add_argument("--days", type=int, default=30, help="earlier days of spend (0: none)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--cli-runs", type=int, default=3, help="digest runs (0: none)")
    parser.add_argument(
        "--fold-runs", type=int, default=0, help="minutes of 1,000 ticks stored and folded, timed"
    )
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(describe())
    print(f"load average at start: {os.getloadavg()}", flush=True)
    args.store.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    url, config = prepared(args.store, args.events, now)
    if args.days:
        add_days_of_spend(url, args.days, now)
    store = open_store(url)
    settings = load_settings(config)
    # The read paths only: the run-now button's owner starts no tick here.
    manual = ManualTicks(settings, store, upstream=lambda: env_for_ticks(print), router=None)
    with TestClient(create_app(settings, store, manual)) as client:

        def draw() -> object:
            return client.get("/dashboard/panels").raise_for_status()

        print(f"GET /dashboard/panels: {timed(args.runs, draw)}", flush=True)
    if args.fold_runs:
        reads = Reads(settings, store).fresh()

        def a_minute() -> None:
            with sqlite3.connect(args.store / "metrics.db") as conn:
                for rows in history(round(PER_MINUTE * (11 + 4 * TOOL_TICKS)), datetime.now(UTC)):
                    insert_sqlite(conn, rows)

        folds = [once(reads.fresh, a_minute) for _ in range(args.fold_runs)]
        print(f"fold of a minute of 1,000 ticks: {figures(folds)}", flush=True)
    if args.profile:
        # In this thread: the test client serves the request in another, unseen by cProfile.
        reads = Reads(settings, store).fresh()
        with cProfile.Profile() as profile:
            dashboard.panels(reads)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    store.close()
    if args.cli_runs:
        digest = cli(config, "digest", "--since", "1h")
        print(f"tickwork digest --since 1h: {timed(args.cli_runs, digest)}", flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
