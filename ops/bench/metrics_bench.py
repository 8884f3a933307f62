"""`GET /metrics` at 1,000 levels: its time, its size, and whether days of spend move it.

Issue 24's goal is a scrape within 100 ms at 1,000 levels whatever the history holds. The
events come from `growth_bench`'s builder (a minute of 1,000 ticks at a time, folded by
`tickwork projections rebuild`); it spans minutes, not days, so `--days` adds spend rows
for 1,000 levels on each of that many earlier days, the shape a month of running leaves
in the spend read model. The collector runs in-process, as the API calls it. On a shared
machine the least CPU of the runs is the truest figure of the scrape's own work.

    .venv/bin/python ops/bench/metrics_bench.py [--events 100000] [--days 30] [--runs 7]
        [--profile]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import statistics
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from growth_bench import LEVELS, Span, cli, load, p50, write_config
from machine import describe

from harness.api.metrics import StoreCollector, text_format
from harness.api.reads import Reads
from harness.config import load_settings
from harness.projections.spend import spend_daily
from harness.store import migrate_store, open_store


def add_days_of_spend(url: str, days: int, now: datetime) -> None:
    """A row per level on each of `days` days before the loaded history."""
    store = open_store(url)
    zero = {"cache_read_tokens": 0, "cache_write_tokens": 0, "estimated_calls": 0}
    with store.write_transaction() as conn:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(describe())
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root}/metrics.db"
        config = write_config(root, url)
        migrate_store(url)
        load(url, Span.of_events(args.events, now), compacting=True)
        cli(config, "projections", "rebuild")()
        store = open_store(url)
        reads = Reads(load_settings(config), store)

        def scrape() -> bytes:
            return text_format(StoreCollector(reads).collect())

        for days in (0, args.days):
            if days:
                add_days_of_spend(url, days, now)
            walls, cpus = zip(*(p50(1, scrape) for _ in range(args.runs)), strict=True)
            text = scrape()
            lines = text.count(b"\n")
            print(
                f"{args.events:,} events, {len(LEVELS):,} levels, {days} earlier days of spend: "
                f"p50 {statistics.median(walls) * 1000:.0f} ms wall, "
                f"{statistics.median(cpus) * 1000:.0f} ms CPU (least {min(cpus) * 1000:.0f}); "
                f"{lines:,} lines, {len(text) / 1000:.0f} KB",
                flush=True,
            )
        families = collections.Counter(
            line.split(b"{")[0].split(b" ")[0] for line in text.splitlines() if line[:1] != b"#"
        )
        print(", ".join(f"{name.decode()} {count:,}" for name, count in families.most_common()))
        if args.profile:
            with cProfile.Profile() as profile:
                scrape()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
        store.close()


if __name__ == "__main__":
    main()
