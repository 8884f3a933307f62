"""Retention's steady state: `hot_days` honoured across a simulated month.

A month of ticks is appended through the real store on a simulated clock, with real
result and log files, and the real archive run takes each simulated day the days older
than `hot_days`. After N days the hot store's tick streams and the results folder hold
the last N days only, the store stops growing (SQLite's file after incremental vacuum,
PostgreSQL's rows), every archive verifies, and a rebuild from the archives and the hot
store equals the read models kept incrementally all month.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, time, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from harness.api.reads import Reads
from harness.config import load_settings
from harness.devtools.soak import SimulatedClock, Soak, tick_events
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling.archiving import Archiver
from harness.store import migrate_store, open_store
from harness.store.archives import EVENTS_FILE, Archive, day_folder, recorded_archives, verify
from harness.store.archives import read_stream as archived_stream
from tests.conftest import fresh_pg_database
from tests.test_archive import config_file, read_models, tick_ids

HOT_DAYS = 3
DAYS = 30
TICKS_PER_DAY = 4
EVENTS_PER_TICK = 5
FIRST = datetime.now(UTC).date() - timedelta(days=DAYS + 5)
LATE = f"min-{FIRST:%Y%m%d}T235900Z"
"""A tick of the first day still open when that day is archived (a straggler)."""


@contextmanager
def simulated(store_url: str, tmp_path: Path) -> Iterator[Soak]:
    """A soak run of `HOT_DAYS` from `FIRST` on, its store on a simulated clock."""
    config = config_file(tmp_path, store_url)
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("hot_days = 30", f"hot_days = {HOT_DAYS}"), encoding="utf-8")
    clock = SimulatedClock(datetime.combine(FIRST, time(), UTC))
    store = open_store(store_url, clock=clock)
    try:
        yield Soak(load_settings(config), store, clock, TICKS_PER_DAY, lambda line: None)
    finally:
        store.close()


def _rebuilt_equals_kept(soak: Soak) -> list[Archive]:
    """Rebuild every read model from the archives and the hot store: equal to the kept ones."""
    archives = recorded_archives(soak.store, soak.settings.retention.archive)
    projector = projector_for(soak.store, PriceBook())
    projector.catch_up()
    kept_incrementally = read_models(soak.store)
    for name in projector.projections:
        projector.rebuild(name, archives=archives)
    assert read_models(soak.store) == kept_incrementally
    return archives


@pytest.fixture(params=["sqlite", "postgresql"])
def own_store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated, empty store of each backend, PostgreSQL's a database of its own.

    The session's database keeps the day partitions other tests made, emptied but with
    their indexes' pages: a soak that archives one of those days drops them, and its
    store seems to shrink (0027 partitions `tick_rows` too, each day with five indexes).
    """
    if request.param == "sqlite":
        yield request.getfixturevalue("sqlite_url")
        return
    with fresh_pg_database() as url:
        migrate_store(url)
        yield url


@pytest.mark.long
def test_hot_days_honoured_across_a_simulated_month(own_store_url: str, tmp_path: Path) -> None:
    with simulated(own_store_url, tmp_path) as soak:
        settings, store = soak.settings, soak.store
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
        # The deleted events' space goes back (SQLite: incremental vacuum; PostgreSQL: a
        # VACUUM, their space reused by the next appends): the events table grows only by
        # each day's ArchiveWritten (under 600 bytes with its index entries), within a
        # few pages (PostgreSQL's partitions, tick rows and their indexes settle by a page
        # or four, as its VACUUM meets the machine's load); 27 days of ticks kept would add
        # ~270 KiB.
        sizes = [left.store.events_size for left in steady]
        page = 4096 if store.engine.dialect.name == "sqlite" else 8192
        bound = len(steady) * 600 + 8 * page
        assert max(sizes) - min(sizes) <= bound, f"the events table grows: {sizes}"
        assert all(b.archive_bytes > a.archive_bytes for a, b in pairwise(steady))
        assert len(tick_ids(store)) == HOT_DAYS * TICKS_PER_DAY, "rows of archived ticks left"

        archives = _rebuilt_equals_kept(soak)
        assert [archive.day for archive in archives] == [left.day for left in month[:-HOT_DAYS]]
        assert {verify(archive.folder).ticks for archive in archives} == {TICKS_PER_DAY}


def test_a_tick_open_when_its_day_was_archived_leaves_once_it_closed(
    store_url: str, tmp_path: Path
) -> None:
    with simulated(store_url, tmp_path) as soak:
        settings, store = soak.settings, soak.store
        opened, *closing = tick_events(LATE, settings.paths.results, 9, FIRST)
        store.append(f"tick-{LATE}", [opened.to_record(), closing.pop(0).to_record()])
        days = [FIRST + timedelta(days=n) for n in range(2 * HOT_DAYS + 2)]
        for day in days[: HOT_DAYS + 2]:
            left = soak.day(day)
        assert FIRST in left.store.tick_days and FIRST in left.result_days, "open: kept hot"
        assert FIRST not in {archive.day for archive in _archives(soak)[1:]}
        assert [archive.day for archive in _archives(soak)][:1] == [FIRST]
        first = verify(day_folder(settings.retention.archive, FIRST))
        assert first.ticks == TICKS_PER_DAY, "the day's archive went without the open tick"

        soak.clock.now += timedelta(minutes=1)
        store.append(f"tick-{LATE}", [event.to_record() for event in closing])
        for day in days[HOT_DAYS + 2 :]:
            left = soak.day(day)
        took = days[2]  # the day the first run after the tick closed archived
        assert FIRST not in left.store.tick_days and FIRST not in left.result_days
        assert not store.read_stream(f"tick-{LATE}"), "the straggler left the hot store"
        folder = day_folder(settings.retention.archive, took)
        assert verify(folder).ticks == TICKS_PER_DAY + 1
        late = [event.type for event in archived_stream(folder, f"tick-{LATE}")]
        assert late == ["TickScheduled", "TickStarted", *(e.type for e in closing)]
        # Its row left with it; it is found by the day its id names, days before `took`.
        detail = Reads(settings, store).tick(LATE)
        assert detail is not None and detail.tick is None and not detail.events
        assert detail.archive == str(folder / EVENTS_FILE)
        archives = _rebuilt_equals_kept(soak)
        assert len(archives) == len({archive.day for archive in archives}), "one per day"
        again = Archiver(settings, store, lambda line: None).archive(before=days[-HOT_DAYS])
        assert again == [], "a rerun finds nothing more to do"


def _archives(soak: Soak) -> list[Archive]:
    return recorded_archives(soak.store, soak.settings.retention.archive)
