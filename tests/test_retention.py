"""Retention's steady state: `hot_days` honoured across a simulated month.

A month of ticks is appended through the real store on a simulated clock, with real
result and log files, and the real archive run takes each simulated day the days older
than `hot_days`. After N days the hot store's tick streams and the results folder hold
the last N days only, the store stops growing (SQLite's file after incremental vacuum,
PostgreSQL's rows), every archive verifies, and a rebuild from the archives and the hot
store equals the read models kept incrementally all month.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from itertools import pairwise
from pathlib import Path

from harness.config import load_settings
from harness.devtools.soak import SimulatedClock, Soak
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.store import open_store
from harness.store.archives import recorded_archives, verify
from tests.test_archive import config_file, read_models

HOT_DAYS = 3
DAYS = 30
TICKS_PER_DAY = 4
EVENTS_PER_TICK = 5
FIRST = datetime.now(UTC).date() - timedelta(days=DAYS + 5)


def test_hot_days_honoured_across_a_simulated_month(store_url: str, tmp_path: Path) -> None:
    config = config_file(tmp_path, store_url).read_text(encoding="utf-8")
    (tmp_path / "tickwork.toml").write_text(
        config.replace("hot_days = 30", f"hot_days = {HOT_DAYS}"), encoding="utf-8"
    )
    settings = load_settings(tmp_path / "tickwork.toml")
    clock = SimulatedClock(datetime.combine(FIRST, time(), UTC))
    store = open_store(store_url, clock=clock)
    try:
        lines: list[str] = []
        soak = Soak(settings, store, clock, TICKS_PER_DAY, lines.append)
        month = [soak.day(FIRST + timedelta(days=n)) for n in range(DAYS)]

        for n, left in enumerate(month):
            kept = [left.day - timedelta(days=back) for back in range(min(n + 1, HOT_DAYS))]
            assert list(left.store.tick_days) == sorted(kept), f"day {n}: tick streams kept"
            assert left.result_days == set(kept), f"day {n}: result files kept"
        steady = month[HOT_DAYS:]
        # Day N + n has written n + 1 archives; each one's ArchiveWritten stays hot.
        assert {left.store.events - n for n, left in enumerate(steady)} == {
            HOT_DAYS * TICKS_PER_DAY * EVENTS_PER_TICK + 1
        }, "the hot tick events stay flat"
        assert len({left.results_bytes for left in steady}) == 1, "the results folder is flat"
        assert not {path for path in settings.paths.results.rglob("*") if path.is_dir()} - {
            settings.paths.results / "min",
            *(settings.paths.results / "min" / day.isoformat() for day in month[-1].result_days),
        }, "an archived day leaves no empty folder behind"
        if store.engine.dialect.name == "sqlite":
            # Incremental vacuum hands the deleted events' pages back: the events table
            # grows only by the day's ArchiveWritten (under 600 bytes with its index
            # entries), within a couple of 4 KiB pages; a hot day of ticks is far more.
            sizes = [left.store.events_size for left in steady]
            bound = len(steady) * 600 + 2 * 4096
            assert max(sizes) - min(sizes) <= bound, f"the events table grows: {sizes}"
        assert all(b.archive_bytes > a.archive_bytes for a, b in pairwise(steady))

        archives = recorded_archives(store, settings.retention.archive)
        assert [archive.day for archive in archives] == [left.day for left in month[:-HOT_DAYS]]
        assert {verify(archive.folder).ticks for archive in archives} == {TICKS_PER_DAY}
        projector = projector_for(store, PriceBook())
        projector.catch_up()
        kept_incrementally = read_models(store)
        for name in projector.projections:
            projector.rebuild(name, archives=archives)
        assert read_models(store) == kept_incrementally
    finally:
        store.close()
