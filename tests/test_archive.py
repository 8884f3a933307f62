"""Archiving (invariant 13): closed ticks of past days leave for verified day archives.

Nothing is lost and nothing changes: a rebuild from the archives and the hot store
equals the read models kept before archiving, and a SIGKILL at any phase of an archive
run leaves every event in the hot store or in a verified archive, never in neither and
never in two. Ticks are written with real events by a store whose clock stands on an
old day (the archive's day follows `recorded_at`), as a month of history would be.
"""

from __future__ import annotations

import contextlib
import gzip
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from time import monotonic
from typing import Any

import pytest
import sqlalchemy as sa

from harness.api.reads import Reads
from harness.config import Settings, load_settings
from harness.contracts.budgets import BudgetEntry
from harness.contracts.events import (
    ARCHIVE_STREAM,
    ArchiveWritten,
    Event,
    LevelPaused,
    TickCompleted,
    TickScheduled,
    TickSkipped,
    TranscriptEntry,
    level_stream,
)
from harness.devtools.fake_llm import FakeUpstream
from harness.devtools.soak import ARCHIVE_AFTER_MIDNIGHT, SimulatedClock, tick_events
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.periods import period_counts
from harness.projections.spend import spend_daily
from harness.projections.tick_counts import TABLES as COUNTERS
from harness.projections.tick_counts import tick_day_counts, tick_hour_counts
from harness.projections.ticks import last_slots, runs_of, ticks
from harness.scheduling import archiving, transcript_archiving
from harness.scheduling.archiving import PHASES, Archiver
from harness.scheduling.budget import Budgets
from harness.scheduling.triggers import slot_tick_id
from harness.store import SqlEventStore, migrate_store, open_store, retention
from harness.store import tick_rows as tick_rows_module
from harness.store.archives import (
    EVENTS_FILE,
    FILES_FILE,
    TRANSCRIPTS_FILE,
    Archive,
    ArchiveError,
    day_folder,
    recorded_archives,
    verify,
    verify_transcripts,
)
from harness.store.archives import read_events as archived_events
from harness.store.partitions import EVENTS, TICK_ROWS, Partitioned
from harness.store.partitions import days as partition_days
from harness.store.schema import events, tick_rows
from harness.store.tick_rows import compact, drop_rows_day, unpack
from tests.commands import (
    COLD,
    Output,
    forked,
    forked_each,
    start_service,
    warm_for_forks,
    write_config,
)
from tests.conftest import fresh_pg_database
from tests.waiting import wait_until

TODAY = datetime.now(UTC).date()
OLD = TODAY - timedelta(days=40)
MID = TODAY - timedelta(days=10)
"""Older than `transcript_days`, younger than `hot_days`."""


@pytest.fixture(scope="module", autouse=True)
def _warm_for_forks() -> None:
    """The archive and rebuild commands forked below find the price tables loaded.

    Whichever test of this module a worker runs first (xdist hands each worker a part of
    the module): without it, each child forked before this process folded spend itself
    loaded them on its own.
    """
    warm_for_forks()


def old(n: int, day: date = OLD) -> str:
    """The id of the `n`th tick of `day`: a slot's id, which names its day."""
    return f"min-{day:%Y%m%d}T12{n:02d}00Z"


def config_file(tmp_path: Path, store_url: str, transcript_days: int | None = None) -> Path:
    path = tmp_path / "tickwork.toml"
    transcripts = "" if transcript_days is None else f"transcript_days = {transcript_days}\n"
    path.write_text(
        f'[store]\nurl = "{store_url}"\n[paths]\nresults = "{tmp_path / "results"}"\n'
        f'[retention]\nhot_days = 30\n{transcripts}archive = "{tmp_path / "archive"}"\n',
        encoding="utf-8",
    )
    return path


def history(store: SqlEventStore, results: Path, day: date = OLD) -> set[int]:
    """A tick still open the day before, ten ticks of `day`, one recent tick: the ten's positions.

    Each of the ten's events interleave with a level event, which stays hot, and each has
    a transcript entry before its end. The open tick keeps its day (on PostgreSQL, its
    partition) in the store; `day` leaves whole.
    """
    with _store_on(store, day - timedelta(days=1)) as then:
        scheduled = TickScheduled(
            tick_id="open", level="min", occurred_at=noon(day - timedelta(days=1))
        )
        then.append("tick-open", [scheduled.to_record()])
    archived = ten_ticks(store, results, day)
    for event in with_transcript("new", tick_events("new", results, 5, TODAY)):
        store.append("tick-new", [event.to_record()])
    return archived


def ten_ticks(store: SqlEventStore, results: Path, day: date) -> set[int]:
    """Ten closed ticks of `day`, each with a transcript entry: their positions."""
    archived: set[int] = set()
    with _store_on(store, day) as then:
        for n in range(10):
            for event in with_transcript(
                old(n, day), tick_events(old(n, day), results, 100 + n, day)
            ):
                event = event.model_copy(update={"occurred_at": noon(day, n)})
                archived.add(then.append(f"tick-{old(n, day)}", [event.to_record()]).positions[0])
                if event.type == "TickStarted":
                    pause = LevelPaused(level="min", reason=f"r{n}")
                    then.append(level_stream("min"), [pause.to_record()])
    return archived


def noon(day: date, hours: int = 0) -> datetime:
    """When a tick of `day` happened: noon, or `hours` after it (the hour it counts in)."""
    return datetime.combine(day, time(12), UTC) + timedelta(hours=hours)


@contextlib.contextmanager
def _store_on(store: SqlEventStore, day: date) -> Iterator[SqlEventStore]:
    """The store, with a clock that stands at noon of `day`."""
    url = store.engine.url.render_as_string(hide_password=False)
    noon = datetime.combine(day, time(12), UTC)
    with contextlib.closing(open_store(url, clock=lambda: noon)) as then:
        yield then


def with_transcript(tick_id: str, events: list[Event]) -> list[Event]:
    """A tick's events with what its model said before its end."""
    *running, ended = events
    said = TranscriptEntry(tick_id=tick_id, level="min", kind="assistant", text=f"{tick_id} said")
    return [*running, said, ended]


def entry_positions(store: SqlEventStore, archived: set[int]) -> set[int]:
    """The positions of the archived ticks' transcript entries (before compaction)."""
    with store.read_transaction() as conn:
        stored = conn.execute(
            sa.select(events.c.global_position).where(events.c.type == TranscriptEntry.type)
        ).scalars()
        return set(stored) & archived


def read_models(store: SqlEventStore) -> dict[str, list[tuple[Any, ...]]]:
    """The aggregates archiving must keep to the token, and the rows of the ticks kept hot.

    The hour counts as counts per day: an archived day's hours become its day's row.
    """
    rolled = (tick_hour_counts, tick_day_counts)
    with store.read_transaction() as conn:
        models = {
            table.name: sorted(tuple(row) for row in conn.execute(sa.select(table)))
            for table in (spend_daily, *COUNTERS)
            if table not in rolled
        }
        hot = ticks.c.tick_id.in_(["open", "new"])
        models["ticks"] = sorted(tuple(row) for row in conn.execute(sa.select(ticks).where(hot)))
        by_day: Counter[tuple[str, ...]] = Counter()
        for table in rolled:
            for level, when, status, reason, n in conn.execute(sa.select(table)):
                by_day[(level, when[:10], status, reason)] += n
        models["counts by day"] = sorted((*key, n) for key, n in by_day.items() if n)
        return models


def hours_counted(store: SqlEventStore) -> set[str]:
    """The days whose hours `tick_hour_counts` holds."""
    with store.read_transaction() as conn:
        hours = conn.execute(sa.select(tick_hour_counts.c.hour)).scalars()
        return {hour[:10] for hour in hours}


def day_counted(store: SqlEventStore, day: date) -> list[tuple[str, str, str | None, int]]:
    """What a digest of the whole `day` counts."""
    start = datetime.combine(day, time(), UTC)
    with store.read_transaction() as conn:
        return sorted(period_counts(conn, start, start + timedelta(days=1), ["min"]))


def tick_ids(store: SqlEventStore) -> set[str]:
    with store.read_transaction() as conn:
        return set(conn.execute(sa.select(ticks.c.tick_id)).scalars())


def hot_positions(store: SqlEventStore) -> set[int]:
    """Positions of the hot store: events, and the records packed in tick rows."""
    with store.read_transaction() as conn:
        found = set(conn.execute(sa.text("SELECT global_position FROM events")).scalars())
        rows = conn.execute(sa.select(tick_rows.c.tick_id, tick_rows.c.data))
        for tick_id, blob in rows:
            found |= {record.global_position for record in unpack(tick_id, blob)}
    return found


def archive_positions(folder: Path) -> set[int]:
    """Positions of a day's verified archive, events and transcripts ({} until verified)."""
    found: set[int] = set()
    with contextlib.suppress(ArchiveError):  # not written whole: nothing left the store
        verify(folder)
        found |= {e.global_position for e in archived_events(folder)}
    with contextlib.suppress(ArchiveError):
        verify_transcripts(folder)
        found |= {e.global_position for e in archived_events(folder, TRANSCRIPTS_FILE)}
    return found


@pytest.fixture(params=["pages", "small pages"])
def pages(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The archive's pages as they are, or a few records each: a day spans many pages.

    The day's ticks are found again page by page (never held as a set), so where a page
    ends must change nothing.
    """
    if request.param == "small pages":
        for module, name, size in (
            (retention, "PAGE", 3),
            (tick_rows_module, "PAGE", 3),
            (retention, "SCAN_PAGE", 4),
            (retention, "MAX_BATCH", 2),
            (archiving, "DELETE_BATCH", 7),
        ):
            monkeypatch.setattr(module, name, size)


@pytest.mark.usefixtures("pages")
def test_archive_then_rebuild_equals_no_archive(store_url: str, tmp_path: Path) -> None:
    settings = load_settings(config_file(tmp_path, store_url))
    store = open_store(store_url)
    try:
        archived = history(store, settings.paths.results)
        entries = entry_positions(store, archived)
        projector = projector_for(store, PriceBook())
        projector.catch_up()
        before = read_models(store)
        digest = day_counted(store, OLD)
        assert sum(n for *_, n in digest) == 10
        assert hours_counted(store) == {f"{d}" for d in (OLD - timedelta(days=1), OLD, TODAY)}
        lines: list[str] = []

        days = Archiver(settings, store, lines.append).archive()

        assert [(d.day, d.ticks, d.events, d.files) for d in days] == [(OLD, 10, 60, 20)]
        assert not archived & hot_positions(store), "every archived event left the hot store"
        folder = day_folder(settings.retention.archive, OLD)
        assert entries and {e.global_position for e in archived_events(folder)} == archived
        assert not (folder / TRANSCRIPTS_FILE).exists(), "its transcripts left with the day"
        with store.read_transaction() as conn:
            kept = conn.execute(sa.select(tick_rows.c.tick_id)).scalars().all()
        assert kept == [], "archived ticks' rows left with them (`new` ends the log: hot)"
        assert verify(folder).ticks == 10
        assert not (settings.paths.results / "min" / OLD.isoformat()).exists()
        assert store.read_stream("tick-open"), "a tick still open stays hot"
        assert len(store.read_stream(level_stream("min"))) == 10, "level events stay hot"
        assert read_models(store) == before, "archiving changes no read model"
        assert hours_counted(store) == {f"{TODAY}"}, "archived days' hours became day counts"
        assert day_counted(store, OLD) == digest, "a digest of an archived day counts the same"
        newest = store.read_all(store.lookback(8), 8)
        assert len(newest) == 8, "the newest events are counted past the archived gap"
        if store.engine.dialect.name == "sqlite":
            with store.read_transaction() as conn:
                vacuum = conn.exec_driver_sql("PRAGMA auto_vacuum").scalar()
                free = conn.exec_driver_sql("PRAGMA freelist_count").scalar()
            assert (vacuum, free) == (2, 0), "incremental vacuum gave the freed pages back"
        assert tick_ids(store) == {"open", "new"}, "archived ticks' rows left with them"

        for name in projector.projections:
            projector.rebuild(name, archives=_archives(store, settings))
        assert read_models(store) == before, "a rebuild from archives equals no archive"
        assert hours_counted(store) == {f"{TODAY}"}, "the rebuild rolls the hours up as the run"
        assert day_counted(store, OLD) == digest
        assert tick_ids(store) == {"open", "new"}, "the rebuild drops them as the run did"
        assert Archiver(settings, store, lines.append).archive() == [], "a rerun does nothing"
    finally:
        store.close()


def test_a_levels_last_slot_and_runs_outlive_its_archived_ticks(
    store_url: str, tmp_path: Path
) -> None:
    """Start-up resumes after the last slot and `max_runs` counts on, once the rows left."""
    settings = load_settings(config_file(tmp_path, store_url))
    store = open_store(store_url)
    slots = [datetime.combine(OLD, time(9 + n), UTC) for n in range(3)]
    twin = f"{slot_tick_id('min', slots[0])}-twin"
    ticks_of_day: list[tuple[str, datetime, type[TickCompleted] | type[TickSkipped]]] = [
        (slot_tick_id("min", slots[0]), slots[0], TickCompleted),
        (twin, slots[0], TickCompleted),  # the same slot, run twice: it counts once
        (slot_tick_id("min", slots[1]), slots[1], TickCompleted),
        (slot_tick_id("min", slots[2]), slots[2], TickSkipped),  # skipped: not a run
    ]
    try:
        with _store_on(store, OLD) as then:
            for tick_id, slot, end in ticks_of_day:
                ended = (
                    TickSkipped(tick_id=tick_id, level="min", reason="budget", slot=slot)
                    if end is TickSkipped
                    else TickCompleted(tick_id=tick_id, level="min")
                )
                scheduled = TickScheduled(tick_id=tick_id, level="min", slot=slot)
                then.append(f"tick-{tick_id}", [scheduled.to_record(), ended.to_record()])
        projector = projector_for(store, PriceBook())
        projector.catch_up()

        def kept() -> tuple[dict[str, datetime], int, int]:
            runs = runs_of(store, {"min": 100})["min"], runs_of(store, {"min": 1})["min"]
            return last_slots(store, ["min"]), *runs

        assert kept() == ({"min": slots[2]}, 2, 1)
        days = Archiver(settings, store, lambda line: None).archive()
        assert [d.ticks for d in days] == [4]
        assert tick_ids(store) == set(), "no row of an archived tick stays"
        assert kept() == ({"min": slots[2]}, 2, 1)
        projector.rebuild("ticks", archives=_archives(store, settings))
        assert kept() == ({"min": slots[2]}, 2, 1), "a rebuild from the archive agrees"
        assert tick_ids(store) == set()
    finally:
        store.close()


def _archives(store: SqlEventStore, settings: Settings) -> list[Archive]:
    return recorded_archives(store, settings.retention.archive)


@pytest.mark.parametrize("phase", PHASES)
def test_a_kill_at_any_phase_loses_and_duplicates_nothing(
    store_url: str, tmp_path: Path, phase: str
) -> None:
    """An old day leaves whole, transcripts along; a younger one's transcripts leave alone."""
    config = config_file(tmp_path, store_url, transcript_days=7)
    settings = load_settings(config)
    store = open_store(store_url)
    try:
        archived = history(store, settings.paths.results)
        younger = ten_ticks(store, settings.paths.results, MID)
        # The log's newest record is never packed: one after its last tick lets it be.
        store.append(level_stream("min"), [LevelPaused(level="min", reason="end").to_record()])
        entries = entry_positions(store, younger)
        everything = hot_positions(store)
        killed = forked(
            tmp_path, "-c", str(config), "archive", env={"TICKWORK_ARCHIVE_KILL_AT": phase}
        )
        assert killed.returncode == -9, killed.stderr
        folders = [day_folder(settings.retention.archive, day) for day in (OLD, MID)]
        in_archives = archive_positions(folders[0]) | archive_positions(folders[1])
        assert everything <= hot_positions(store) | in_archives, f"killed at {phase}: lost"

        finished = forked(tmp_path, "-c", str(config), "archive")
        assert finished.returncode == 0, finished.stderr
        records = store.read_stream(ARCHIVE_STREAM)
        assert len(records) == 1, "one ArchiveWritten per day, whatever the kills"
        left = archived | entries
        assert hot_positions(store) == everything - left | {records[0].global_position}
        assert [e.global_position for e in archived_events(folders[0])] == sorted(archived)
        said = [e.global_position for e in archived_events(folders[1], TRANSCRIPTS_FILE)]
        assert sorted(said) == sorted(entries), "each entry archived once"
        assert not (folders[0] / TRANSCRIPTS_FILE).exists()
        assert (folders[0] / FILES_FILE).exists()
    finally:
        store.close()


@pytest.mark.parametrize("phase", ["writing", "verified", "packed", "recorded", "deleting"])
def test_a_stopping_service_ends_its_archive_run_at_the_next_phase_and_loses_nothing(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    """SIGTERM came while a day was archived: the run ends there, the next one finishes it.

    A day of 1,000 levels takes minutes to archive, and the service's shutdown waits for
    its companions: it waited for the whole day.
    """
    settings = load_settings(config_file(tmp_path, store_url))
    store = open_store(store_url)
    stopping = threading.Event()
    monkeypatch.setattr(archiving, "_killed_at", lambda at: at == phase and stopping.set())
    try:
        archived = history(store, settings.paths.results)
        everything = hot_positions(store)
        lines: list[str] = []
        archiver = Archiver(settings, store, lines.append)
        ran = threading.Thread(target=archiver.run, args=(stopping,))
        ran.start()
        ran.join(60)
        assert not ran.is_alive() and lines[-1].startswith("archive: stopped with the service")
        folder = day_folder(settings.retention.archive, OLD)
        assert everything <= hot_positions(store) | archive_positions(folder)

        Archiver(settings, store, lines.append).archive()  # after the last batch: nothing left
        records = store.read_stream(ARCHIVE_STREAM)
        assert len(records) == 1
        assert hot_positions(store) == everything - archived | {records[0].global_position}
        assert [e.global_position for e in archived_events(folder)] == sorted(archived)
    finally:
        store.close()


def test_a_transcripts_run_cut_short_is_finished_before_its_day_leaves(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries a killed run took out of their rows are in the transcripts file only.

    Had the day's own archive been written first, the entries still in their rows would
    be in both files.
    """
    monkeypatch.setattr(transcript_archiving, "PAGE", 3)  # killed after the first 3 of 10
    config = config_file(tmp_path, store_url, transcript_days=7)
    settings = load_settings(config)
    store = open_store(store_url)
    try:
        archived = history(store, settings.paths.results, MID)
        entries = entry_positions(store, archived)
        killed = forked(
            tmp_path,
            "-c",
            str(config),
            "archive",
            env={"TICKWORK_ARCHIVE_KILL_AT": "transcripts-dropping"},
        )
        assert killed.returncode == -9, killed.stderr
        later = (MID + timedelta(days=1)).isoformat()
        finished = forked(tmp_path, "-c", str(config), "archive", "--before", later)
        assert finished.returncode == 0, finished.stderr

        folder = day_folder(settings.retention.archive, MID)
        said = [e.global_position for e in archived_events(folder, TRANSCRIPTS_FILE)]
        assert sorted(said) == sorted(entries)
        kept = [e.global_position for e in archived_events(folder)]
        assert kept == sorted(archived - entries), "each entry archived once"
    finally:
        store.close()


def test_a_new_budgets_refold_counts_the_spend_its_window_holds_in_an_archive(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A budget added after its window's day was archived counts that day's spend all the same."""
    settings = load_settings(config_file(tmp_path, sqlite_url))
    store = open_store(sqlite_url)
    noon = datetime.combine(OLD, time(12), UTC)
    try:
        with _store_on(store, OLD) as then:
            for n in range(3):
                for event in tick_events(old(n), settings.paths.results, 100 + n, OLD):
                    then.append(
                        f"tick-{old(n)}",
                        [event.model_copy(update={"occurred_at": noon}).to_record()],
                    )
        assert [d.ticks for d in Archiver(settings, store, [].append).archive()] == [3]
        added = settings.model_copy(
            update={"budgets": [BudgetEntry(name="day", scope="global", tokens=10**9)]}
        )
        budgets = Budgets(store, projector_for(store, PriceBook()), PriceBook(), added)
        spent = budgets.spent(budgets.rules, noon + timedelta(hours=1))["day"]
        assert (spent.tokens, spent.calls) == (100 + 101 + 102 + 3 * 7, 3)
    finally:
        store.close()


def test_a_damaged_archive_is_named_and_changes_nothing(store_url: str, tmp_path: Path) -> None:
    config = config_file(tmp_path, store_url)
    settings = load_settings(config)
    store = open_store(store_url)
    try:
        history(store, settings.paths.results)
        everything = hot_positions(store)
        dry = forked(tmp_path, "-c", str(config), "archive", "--dry-run")
        assert dry.returncode == 0 and "these days would be archived" in dry.stdout
        assert OLD.isoformat() in dry.stdout and hot_positions(store) == everything
        assert not day_folder(settings.retention.archive, OLD).exists()
        assert forked(tmp_path, "-c", str(config), "archive").returncode == 0
        before = read_models(store)
        data = day_folder(settings.retention.archive, OLD) / EVENTS_FILE
        where, story, listed = forked_each(
            tmp_path,
            [
                ["-c", str(config), "show", old(3)],
                ["-c", str(config), "show", old(3), "--archive"],
                ["-c", str(config), "events", "--stream", f"tick-{old(3)}"],
            ],
        )
        assert where.returncode == 0 and f"archived with {OLD}: {data}" in where.stdout
        assert story.returncode == 0, story.stderr
        assert "completed" in story.stdout and "103 + 7 tokens" in story.stdout
        assert listed.returncode == 0 and f"tick-{old(3)} was archived with {OLD}" in listed.stderr
        detail = Reads(settings, store).tick(old(3))
        assert detail is not None
        assert (detail.archive, detail.tick, detail.events) == (str(data), None, [])
        rebuilt = forked(tmp_path, "-c", str(config), "projections", "rebuild")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert read_models(store) == before, "the command's rebuild reads the archive too"
        whole = data.read_bytes()
        for damage, expected in (
            (whole[: len(whole) // 2], "does not match the manifest"),
            (gzip.compress(b"{}\n"), "does not match the manifest"),
            (None, "the data file is missing"),
        ):
            if damage is None:
                data.unlink()
            else:
                data.write_bytes(damage)
            rebuilt = forked(tmp_path, "-c", str(config), "projections", "rebuild")
            assert rebuilt.returncode == 2, rebuilt.stderr
            assert str(data) in rebuilt.stderr and expected in rebuilt.stderr
            assert read_models(store) == before
        data.write_bytes(whole)
        (data.parent / "manifest.json").unlink()
        rebuilt = forked(tmp_path, "-c", str(config), "projections", "rebuild")
        assert rebuilt.returncode == 2 and "manifest.json is missing" in rebuilt.stderr
        assert read_models(store) == before
    finally:
        store.close()


def test_transcripts_leave_after_transcript_days_and_are_read_back(
    store_url: str, tmp_path: Path
) -> None:
    config = config_file(tmp_path, store_url, transcript_days=7)
    settings = load_settings(config)
    store = open_store(store_url)
    try:
        archived = history(store, settings.paths.results, MID)
        entries = entry_positions(store, archived)
        everything = hot_positions(store)
        projector_for(store, PriceBook()).catch_up()
        before = read_models(store)
        assert forked(tmp_path, "-c", str(config), "archive").returncode == 0

        folder = day_folder(settings.retention.archive, MID)
        said = {e.global_position for e in archived_events(folder, TRANSCRIPTS_FILE)}
        assert said == entries and verify_transcripts(folder).ticks == 10
        assert not (folder / EVENTS_FILE).exists(), "the ticks themselves stay hot"
        assert hot_positions(store) == everything - entries
        assert read_models(store) == before
        where, story = forked_each(
            tmp_path,
            [
                ["-c", str(config), "show", old(3, MID)],
                ["-c", str(config), "show", old(3, MID), "--archive"],
            ],
        )
        assert where.returncode == 0 and f"{old(3, MID)} said" not in where.stdout
        assert f"transcript archived with {MID}: {folder / TRANSCRIPTS_FILE}" in where.stdout
        assert story.returncode == 0 and f"{old(3, MID)} said" in story.stdout, story.stderr
        detail = Reads(settings, store).tick(old(3, MID))
        assert detail is not None and detail.tick is not None and detail.events
        assert detail.transcript_archive == str(folder / TRANSCRIPTS_FILE)

        later = (MID + timedelta(days=1)).isoformat()
        assert forked(tmp_path, "-c", str(config), "archive", "--before", later).returncode == 0
        assert verify(folder).ticks == 10, "the ticks follow to the same day's folder"
        with store.read_transaction() as conn:
            kept = conn.execute(sa.select(tick_rows.c.tick_id)).scalars().all()
        assert kept == []
        story = forked(tmp_path, "-c", str(config), "show", old(3, MID), "--archive")
        assert story.returncode == 0 and f"{old(3, MID)} said" in story.stdout, story.stderr
        assert "completed" in story.stdout
    finally:
        store.close()


def _archived_days(store: SqlEventStore, clock: SimulatedClock, days: list[date]) -> None:
    """Days archived long ago as the store keeps them: a level's event a day, and a record.

    Their ticks left, so a run has nothing of theirs to read: the positions each record
    names are gone.
    """
    for day in days:
        clock.now = noon(day)
        store.append(level_stream("min"), [LevelPaused(level="min", reason="r").to_record()])
        clock.now = noon(day + timedelta(days=1), -11)
        record = ArchiveWritten(
            day=day,
            first_position=0,
            last_position=0,
            events=1,
            ticks=1,
            counts={"TickCompleted": 1},
            sha256="0" * 64,
            folder=f"/archive/{day}",
            files=0,
        )
        store.append(ARCHIVE_STREAM, [record.to_record()])


def _day_to_archive(store: SqlEventStore, clock: SimulatedClock, results: Path, day: date) -> None:
    """Two ticks of `day`, and a straggler of the day before that closed on it."""
    late = old(99, day - timedelta(days=1))
    opened, started, *closing = tick_events(late, results, 9, day - timedelta(days=1))
    clock.now = noon(day - timedelta(days=1), 11)
    store.append(f"tick-{late}", [opened.to_record(), started.to_record()])
    for n in range(2):
        clock.now = noon(day, n)
        for event in tick_events(old(n, day), results, 100 + n, day):
            store.append(f"tick-{old(n, day)}", [event.to_record()])
    store.append(f"tick-{late}", [event.to_record() for event in closing])


def test_a_periodic_run_costs_the_same_behind_ten_times_the_days_archived(
    store_url: str, tmp_path: Path
) -> None:
    """Invariant 14 for the archive run: its statements follow the days it archives.

    A run behind 3 archived days, then one behind 31, each taking a day of two ticks and
    a straggler: the same statements, though every archived day holds a record and an
    event that stays hot (a run used to walk each such day, a dozen statements apiece).
    """
    first = TODAY - timedelta(days=40)
    settings = load_settings(config_file(tmp_path, store_url))
    clock = SimulatedClock(noon(first))
    store = open_store(store_url, clock=clock)
    sent: list[str] = []

    def run(day: date) -> list[str]:
        """The statements of the run after `day`, which archives it."""
        clock.now = noon(day + timedelta(days=1), -12) + ARCHIVE_AFTER_MIDNIGHT
        sent.clear()
        sa.event.listen(store.engine, "before_cursor_execute", caught)
        try:
            done = Archiver(settings, store, lambda line: None).archive(day + timedelta(days=1))
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", caught)
        assert [(left.day, left.ticks) for left in done] == [(day, 3)], "its ticks, the straggler"
        return list(sent)

    def caught(*args: Any) -> None:
        sent.append(args[2])

    try:
        Archiver(settings, store, lambda line: None).archive(first)  # today's partitions made
        _archived_days(store, clock, [first + timedelta(days=n) for n in range(3)])
        _day_to_archive(store, clock, settings.paths.results, first + timedelta(days=3))
        few = run(first + timedelta(days=3))
        _archived_days(store, clock, [first + timedelta(days=n) for n in range(4, 31)])
        _day_to_archive(store, clock, settings.paths.results, first + timedelta(days=31))
        many = run(first + timedelta(days=31))
        assert len(many) == len(few), (Counter(many) - Counter(few), Counter(few) - Counter(many))
    finally:
        store.close()


def test_archive_refuses_a_day_not_over(tmp_path: Path) -> None:
    config = config_file(tmp_path, f"sqlite:///{tmp_path}/events.db")
    later = (TODAY + timedelta(days=1)).isoformat()
    refused = forked(tmp_path, "-c", str(config), "archive", "--before", later)
    assert refused.returncode == 2
    assert "not over yet" in refused.stderr


def test_a_sqlite_store_made_without_incremental_vacuum_is_converted_once(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    with sqlite3.connect(path) as made_before:  # as a store made by an older tickwork was
        made_before.execute("CREATE TABLE elder (x)")
    config = config_file(tmp_path, f"sqlite:///{path}")
    store = open_store(f"sqlite:///{path}")
    history(store, load_settings(config).paths.results)
    held = forked(tmp_path, "-c", str(config), "archive")
    assert held.returncode == 0, held.stderr
    assert "not converted to incremental vacuum: another process has the store open" in held.stdout
    store.close()

    converted = forked(tmp_path, "-c", str(config), "archive")
    assert converted.returncode == 0, converted.stderr
    assert "converted the SQLite store to incremental vacuum" in converted.stdout
    with sqlite3.connect(path) as conn:
        modes = [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in _VACUUM_STATE]
    assert modes == [2, 0, "wal"]


_VACUUM_STATE = ("auto_vacuum", "freelist_count", "journal_mode")


def test_the_service_archives_by_itself(tmp_path: Path, fake: FakeUpstream) -> None:
    retention = f'[retention]\nhot_days = 30\narchive = "{tmp_path / "archive"}"\n'
    # No level, no tick: a warm launcher's fork server would warm up for nothing.
    config = write_config(tmp_path, retention, runner=COLD)
    settings = load_settings(config)
    store = open_store(settings.store.url)
    try:
        archived = history(store, settings.paths.results)
        service = Output(start_service(config, fake))
        # Its start ends the old open tick as lost (its claimer is gone): it leaves with
        # its own day, then the ten of the next, transcripts along (60 events).
        service.wait_for(f"archive {OLD - timedelta(days=1)}: 1 ticks, 2 events, 0 files")
        service.wait_for(f"archive {OLD}: 10 ticks, 60 events, 20 files in ")
        assert service.stop() and service.process.returncode == 0
        assert not archived & hot_positions(store)
        assert [e.type for e in store.read_stream(ARCHIVE_STREAM)] == ["ArchiveWritten"] * 2
    finally:
        store.close()


def test_a_day_kept_hot_for_a_lagging_checkpoint_leaves_within_seconds(tmp_path: Path) -> None:
    """The service's first archive run races the alerter's first catch-up: it tries again soon.

    A day a checkpoint has not passed stays hot; waiting a day for the next run left a
    restarted service's backlog in the store for a day (and failed this module's service
    test now and then).
    """
    settings = load_settings(config_file(tmp_path, f"sqlite:///{tmp_path}/events.db"))
    store = open_store(settings.store.url)
    try:
        history(store, settings.paths.results)
        projector_for(store, PriceBook()).catch_up()
        with store.tracking("alerts") as tracking:
            store.save_checkpoint(tracking, 0)
        lines: list[str] = []

        def said(text: str) -> Callable[[], bool]:
            return lambda: any(line.startswith(text) for line in lines)

        stopping = threading.Event()
        archiver = Archiver(settings, store, lines.append)
        running = threading.Thread(target=archiver.run, args=(stopping,))
        running.start()
        try:
            wait_until(said(f"archive {OLD}: kept hot, checkpoints behind"), "a day kept hot")
            with store.tracking("alerts") as tracking:
                store.save_checkpoint(tracking, store.last_position())
            wait_until(said(f"archive {OLD}: 10 ticks"), "the day archived on the next try")
        finally:
            stopping.set()
            running.join()
    finally:
        store.close()


def test_postgres_days_leave_as_partitions_and_no_dead_tuple_stays(tmp_path: Path) -> None:
    """A day whose ticks are all archived leaves as its partitions, with no DELETE.

    Its events' partition and its packed rows' (`tick_rows`, migration 0027): a row
    deleted from `tick_rows` is logged by a trigger, and none of that day's is. One an
    open tick holds stays until that straggler leaves with a later day, then goes too.
    No dead tuple is left in any table after each run, nor after a rebuild, which equals
    no archive; the runs vacuum the store's tables, not the system catalogs.
    """
    following = OLD + timedelta(days=1)
    with fresh_pg_database() as url:
        migrate_store(url)
        settings = load_settings(config_file(tmp_path, url))
        store = open_store(url)
        try:
            with store.write_transaction() as conn:
                conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pgstattuple")
                _log_row_deletes(conn)
            with _store_on(store, OLD) as then:
                for n in range(2):
                    for event in tick_events(old(n), settings.paths.results, 10 + n, OLD):
                        then.append(f"tick-{old(n)}", [event.to_record()])
                then.append(level_stream("min"), [LevelPaused(level="min", reason="r").to_record()])
                late = TickScheduled(tick_id="late", level="min")
                then.append("tick-late", [late.to_record()])
            with _store_on(store, following) as then:
                for event in tick_events("next", settings.paths.results, 5, following):
                    then.append("tick-next", [event.to_record()])
            lines: list[str] = []
            archiver = Archiver(settings, store, lines.append)
            catalogs_vacuumed = _catalogs_vacuumed(store)

            assert [d.ticks for d in archiver.archive(before=following)] == [2]
            assert _partitions(store) >= {OLD}, "the open tick holds its day's partition"
            assert any("leave by DELETE" in line for line in lines)
            assert _dead_tuples(store) == {}

            store.append("tick-late", [TickCompleted(tick_id="late", level="min").to_record()])
            projector = projector_for(store, PriceBook())
            projector.catch_up()
            before = read_models(store)

            compact(store)
            assert _packed_days(store) == {following: 1}, "the next day's tick is packed"
            assert {OLD, following} <= _partitions(store, TICK_ROWS)

            assert [(d.day, d.ticks) for d in archiver.archive()] == [(following, 2)]
            assert not _partitions(store) & {OLD, following}, "both days left as partitions"
            assert not _partitions(store, TICK_ROWS) & {OLD, following}, "their rows' too"
            assert _packed_days(store) == {}
            assert _row_deletes(store) == {OLD}, "only the held day's rows were deleted"
            assert f"archive: the partition of {OLD} held no event any more: dropped" in lines
            hot = {e.stream_id for e in store.read_all()}
            assert hot == {level_stream("min"), ARCHIVE_STREAM}
            with store.read_transaction() as conn:
                counts = conn.exec_driver_sql(
                    "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM event_ids), "
                    "(SELECT count(*) FROM tick_streams), (SELECT count(*) FROM events_default)"
                ).one()
            assert tuple(counts) == (3, 3, 0, 0), "ids and tick days left with their events"
            assert _dead_tuples(store) == {}
            assert _catalogs_vacuumed(store) == catalogs_vacuumed

            for name in projector.projections:
                projector.rebuild(name, archives=_archives(store, settings))
            assert read_models(store) == before
            assert _dead_tuples(store) == {}
        finally:
            store.close()


def test_postgres_a_day_s_rows_stay_a_partition_while_it_holds_another_or_is_busy(
    tmp_path: Path,
) -> None:
    """The rows' partition leaves only holding just the archived rows, and never waits long.

    Holding a row the archive does not (a tick packed after it was written), or locked by
    a reader past `ROWS_LOCK_WAIT` (which may wait on `events`, held by the archive run:
    a deadlock), it stays as it was, and the archive run's transaction goes on: its
    archived rows are then deleted instead.
    """
    with fresh_pg_database() as url:
        migrate_store(url)
        store = open_store(url)
        try:
            with _store_on(store, OLD) as then:
                for n in range(2):
                    for event in tick_events(old(n), tmp_path, 10, OLD):
                        then.append(f"tick-{old(n)}", [event.to_record()])
            store.append(level_stream("min"), [LevelPaused(level="min", reason="r").to_record()])
            assert compact(store) == 2
            with store.write_transaction() as conn:
                assert not drop_rows_day(conn, OLD, 1), "it holds a row more"
                assert conn.execute(sa.select(sa.func.count()).select_from(tick_rows)).scalar()
            with store.engine.connect() as reader, reader.begin():
                reader.execute(sa.select(sa.func.count()).select_from(tick_rows))
                with store.write_transaction() as conn:
                    started = monotonic()
                    assert not drop_rows_day(conn, OLD, 2), "a reader holds `tick_rows`"
                    assert monotonic() - started < 1
            assert _packed_days(store) == {OLD: 2}
            with store.write_transaction() as conn:
                assert drop_rows_day(conn, OLD, 2)
            assert _packed_days(store) == {}
            assert OLD not in _partitions(store, TICK_ROWS)
        finally:
            store.close()


def _partitions(store: SqlEventStore, table: Partitioned = EVENTS) -> set[date]:
    with store.read_transaction() as conn:
        return set(partition_days(conn, table))


def _packed_days(store: SqlEventStore) -> dict[date, int]:
    """Rows in `tick_rows`, by day."""
    query = sa.select(tick_rows.c.day, sa.func.count()).group_by(tick_rows.c.day)
    with store.read_transaction() as conn:
        return {day: int(count) for day, count in conn.execute(query)}


def _log_row_deletes(conn: sa.Connection) -> None:
    """Log the day of every row deleted from `tick_rows` (its partitions, made later too)."""
    conn.exec_driver_sql("CREATE TABLE row_deletes (day date NOT NULL)")
    conn.exec_driver_sql(
        "CREATE FUNCTION log_row_delete() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN INSERT INTO row_deletes VALUES (OLD.day); RETURN OLD; END$$"
    )
    conn.exec_driver_sql(
        "CREATE TRIGGER row_deleted AFTER DELETE ON tick_rows "
        "FOR EACH ROW EXECUTE FUNCTION log_row_delete()"
    )


def _row_deletes(store: SqlEventStore) -> set[date]:
    """The days of the rows deleted from `tick_rows` (`_log_row_deletes`)."""
    with store.read_transaction() as conn:
        return set(conn.exec_driver_sql("SELECT DISTINCT day FROM row_deletes").scalars())


def _catalogs_vacuumed(store: SqlEventStore) -> int:
    """VACUUMs of the system catalogs so far (a VACUUM counts itself at once)."""
    with store.read_transaction() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT sum(vacuum_count) FROM pg_stat_sys_tables WHERE schemaname = 'pg_catalog'"
            ).scalar_one()
        )


def _dead_tuples(store: SqlEventStore) -> dict[str, int]:
    """Tables holding dead tuples, as pgstattuple reads their pages (no statistics' delay)."""
    with store.read_transaction() as conn:
        found = conn.exec_driver_sql(
            "SELECT c.relname, (pgstattuple(c.oid)).dead_tuple_count FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).all()
    return {name: dead for name, dead in found if dead}
