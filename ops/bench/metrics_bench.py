"""`GET /metrics` at 1,000 levels: its time, its size, and whether days of spend move it.

Issue 24's goal is a scrape within 100 ms at 1,000 levels whatever the history holds. The
events come from `growth_bench`'s builder (a minute of 1,000 ticks at a time, folded by
`tickwork projections rebuild`); it spans minutes, not days, so `--days` adds spend rows
for 1,000 levels on each of that many earlier days, the shape a month of running leaves
in the spend read model. The collector runs in-process, as the API calls it. On a shared
machine the least CPU of the runs is the truest figure of the scrape's own work.

    .venv/bin/python ops/bench/metrics_bench.py [--events 100000] [--days 30] [--runs 7]
        [--profile] [--store FOLDER | --url URL]

`--store` keeps the loaded and folded store in FOLDER and reuses it on the next run (a 1M
store takes minutes to load on a busy machine). `--url` scrapes a store loaded and folded
elsewhere (a PostgreSQL database `growth_bench.py --keep` kept) as it is, migrated to
head. A kept store ages: its spend is moved so its last day is today, or a scrape after
midnight would show no spend of today.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from growth_bench import cli, cpu_seconds, write_config
from history_loader import LEVELS, PER_MINUTE, Span, load
from machine import describe
from sqlalchemy.engine import make_url

from harness.api.metrics import Exposition
from harness.api.reads import Reads
from harness.config import load_settings
from harness.projections.spend import spend_daily
from harness.store import migrate_store, open_store


def add_days_of_spend(url: str, days: int, now: datetime) -> None:
    """A row per level on each of `days` days before the loaded history (replacing any)."""
    store = open_store(url)
    zero = {"cache_read_tokens": 0, "cache_write_tokens": 0, "estimated_calls": 0}
    with store.write_transaction() as conn:
        conn.execute(spend_daily.delete().where(spend_daily.c.day < now.date()))
        for back in range(1, days + 1):
            day = (now - timedelta(days=back)).date()
            conn.execute(
                spend_daily.insert(),
                [
                    {
                        "level": level,
                        "model": "gpt-4o-mini",
                        "day": day,
                        "price_tier": -1,
                        "template_hash": "",
                        "prompt_tokens": 1440 * 900,
                        "completion_tokens": 1440 * 60,
                        "model_calls": 1440 * 2,
                        **zero,
                    }
                    for level in LEVELS
                ],
            )
    store.close()


def spend_to_today(url: str, today: date) -> None:
    """Move every spend row by the days between its last day and `today` (a kept store)."""
    store = open_store(url)
    with store.write_transaction() as conn:
        rows = [dict(row) for row in conn.execute(sa.select(spend_daily)).mappings()]
        if rows:
            shift = today - max(row["day"] for row in rows)
            conn.execute(spend_daily.delete())
            conn.execute(spend_daily.insert(), [{**row, "day": row["day"] + shift} for row in rows])
    store.close()


def prepared(root: Path, events: int, now: datetime, given: str | None) -> tuple[str, Path]:
    """The store's URL and config in `root`: loaded and folded there, unless it already was."""
    url = given or f"sqlite:///{root}/metrics.db"
    config = write_config(root, url)
    if given:
        print(f"scraping the store at {make_url(url).render_as_string()}", flush=True)
        migrate_store(url)
        spend_to_today(url, now.date())
        return url, config
    if (root / "metrics.db").exists():
        print(f"reusing the store kept in {root}", flush=True)
        spend_to_today(url, now.date())
        return url, config
    migrate_store(url)
    load(url, Span.of_events(events, now), packing=True)
    cli(config, "projections", "rebuild")()
    return url, config


def once(scrape: Callable[[], bytes], before: Callable[[], None] | None) -> tuple[float, float]:
    """Wall and CPU seconds of one scrape, after `before` (not timed)."""
    if before is not None:
        before()
    began, spent = time.perf_counter(), cpu_seconds()
    scrape()
    return time.perf_counter() - began, cpu_seconds() - spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--store", type=Path, help="a folder to keep the store in and reuse")
    parser.add_argument("--url", help="a loaded and folded store to scrape as it is")
    args = parser.parse_args()
    if args.url and args.store:
        parser.error("--url scrapes a store kept elsewhere: no --store")
    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    now = datetime.now(UTC)
    with contextlib.ExitStack() as stack:
        root = args.store or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        url, config = prepared(root, args.events, now, args.url)
        store = open_store(url)
        reads = Reads(load_settings(config), store)

        kept = Exposition(reads)

        def fresh() -> bytes:
            return Exposition(reads).text()

        def ticked() -> None:
            """A minute of 1,000 ticks stored and folded, as a running service leaves it."""
            load(url, Span(datetime.now(UTC), PER_MINUTE), packing=True)
            reads.fresh()

        for days in dict.fromkeys((0, args.days)):
            if days:
                add_days_of_spend(url, days, now)
            kept.text()
            for label, before, scrape in (
                ("whole render", None, fresh),
                ("kept, nothing new", None, kept.text),
                ("kept, a minute of 1,000 ticks since", ticked, kept.text),
            ):
                walls, cpus = zip(*(once(scrape, before) for _ in range(args.runs)), strict=True)
                print(
                    f"{days} earlier days of spend, {label}: "
                    f"p50 {statistics.median(walls) * 1000:.1f} ms wall, "
                    f"{statistics.median(cpus) * 1000:.1f} ms CPU (least {min(cpus) * 1000:.1f})",
                    flush=True,
                )
        text = fresh()
        assert text == kept.text(), "the kept text is a fresh render's"
        lines = text.count(b"\n")
        print(f"{len(LEVELS):,} levels: {lines:,} lines, {len(text) / 1000:.0f} KB")
        families = collections.Counter(
            line.split(b"{")[0].split(b" ")[0] for line in text.splitlines() if line[:1] != b"#"
        )
        print(", ".join(f"{name.decode()} {count:,}" for name, count in families.most_common()))
        if args.profile:
            ticked()
            with cProfile.Profile() as profile:
                kept.text()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
        store.close()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
