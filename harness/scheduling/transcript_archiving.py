"""Transcripts older than `[retention] transcript_days` leave the hot store for the day's archive.

They are most of a tick's bytes and the least read once the tick is old, so they may leave
before the tick does (`transcript_days` < `hot_days`). A day whose ticks leave in the same
run takes its transcripts along in its own archive instead (`harness.scheduling.archiving`
runs this after the days): taking them out of their rows first rewrote every row the run
then deleted, most of an archive run's time. A day's run goes through phases, each safe to
be killed after (`TRANSCRIPT_PHASES`, for `TICKWORK_ARCHIVE_KILL_AT`):

1. the packed transcripts of the ticks started that day (`harness.store.tick_rows`),
   and those of earlier days packed after their day's file was written (stragglers),
   are written to `transcripts.jsonl.gz`, then its manifest, each atomically;
2. the file is read back whole against its manifest;
3. the entries are taken out of their tick rows in batches, each row keeping the day
   whose archive holds them (`archived_on`), until the tick itself is archived.

Nothing is dropped before its file is verified, so a kill leaves every entry in the hot
store or in a verified archive. A rerun reuses a file whose manifest verifies and drops
what of it is still hot; a file without a manifest is written again. A file that no
longer verifies is written again only while no row relies on it; otherwise the run stops
with an ArchiveError naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from itertools import groupby, islice
from pathlib import Path
from typing import TypeVar

from harness.contracts import StoredEvent
from harness.store import (
    PAGE,
    TRANSCRIPTS_FILE,
    TRANSCRIPTS_INDEX,
    TRANSCRIPTS_MANIFEST,
    ArchiveError,
    SqlEventStore,
    day_folder,
    drop_archived,
    hot_days,
    hot_transcripts,
    read_events,
    relied_on,
    verify_transcripts,
    write_transcripts,
)

TRANSCRIPT_PHASES = (
    "transcripts-writing",
    "transcripts-written",
    "transcripts-verified",
    "transcripts-dropping",
    "transcripts-dropped",
)

Phase = Callable[[str], None]
"""Called at each point a run may end (a kill test's, or a stopping service's: it raises)."""
T = TypeVar("T")
MIDWAY_EVERY = 10_000
"""Items written to a file between two phase calls: a day's file takes minutes to write."""
Report = Callable[[str], None]


@dataclass(frozen=True)
class TranscriptsArchived:
    """What one day's transcript run did (dry: the day it would do)."""

    day: date
    folder: Path
    ticks: int
    entries: int
    dropped: int


def archive_transcripts(
    store: SqlEventStore,
    root: Path,
    days: Iterable[date],
    dry_run: bool,
    phase: Phase,
    report: Report,
) -> list[TranscriptsArchived]:
    """Archive the hot transcripts of `days` (from `hot_days` or `begun_days`), oldest first."""
    done = []
    for day in days:
        folder = day_folder(root, day)
        if dry_run:
            done.append(TranscriptsArchived(day, folder, 0, 0, 0))
            continue
        if not _whole(store, folder, day, report):
            write_transcripts(
                folder, day, midway(hot_transcripts(store, day), phase, TRANSCRIPT_PHASES[0])
            )
            phase("transcripts-written")
        manifest = verify_transcripts(folder)
        phase("transcripts-verified")
        dropped = 0
        held = _held(read_events(folder, TRANSCRIPTS_FILE))
        while batch := list(islice(held, PAGE)):
            dropped += drop_archived(store, day, batch)
            phase("transcripts-dropping")
        phase("transcripts-dropped")
        if dropped:
            report(
                f"archive {day}: transcripts of {dropped} ticks left the store for "
                f"{folder / TRANSCRIPTS_FILE}"
            )
        done.append(TranscriptsArchived(day, folder, manifest.ticks, manifest.entries, dropped))
    return done


def begun_days(store: SqlEventStore, root: Path, before: date) -> list[date]:
    """The days before `before` whose transcripts a run began to archive and did not finish.

    Their rows may already be rid of some entries their file holds: the run must finish
    before the day's own archive is written, or the rest would be in both.
    """
    return [
        day
        for day in hot_days(store, before)
        if any((day_folder(root, day) / name).exists() for name in _WRITTEN)
    ]


_WRITTEN = (TRANSCRIPTS_FILE, TRANSCRIPTS_MANIFEST)


def _whole(store: SqlEventStore, folder: Path, day: date, report: Report) -> bool:
    """Whether the day's transcripts file is written whole; a half-written one is cleared."""
    if not (folder / TRANSCRIPTS_MANIFEST).exists():
        for name in (TRANSCRIPTS_FILE, TRANSCRIPTS_INDEX):
            (folder / name).unlink(missing_ok=True)
        return False
    try:
        verify_transcripts(folder)
    except ArchiveError as exc:
        if relied_on(store, day):
            raise
        report(f"archive: rewriting a transcripts file nothing relies on yet: {exc}")
        for name in (TRANSCRIPTS_MANIFEST, TRANSCRIPTS_FILE, TRANSCRIPTS_INDEX):
            (folder / name).unlink(missing_ok=True)
        return False
    return True


def midway(items: Iterable[T], phase: Phase, name: str) -> Iterator[T]:
    """The items, with phase `name` after the first and every `MIDWAY_EVERY` after.

    After the first: a kill test's point, a file half written. Every `MIDWAY_EVERY`: where
    a stopping service stops.
    """
    for count, item in enumerate(items):
        if count % MIDWAY_EVERY == 1:
            phase(name)
        yield item


def _held(entries: Iterable[StoredEvent]) -> Iterator[tuple[str, int]]:
    """(tick id, last position) of each tick of a transcripts file, which lists tick by tick."""
    for stream_id, tick in groupby(entries, key=lambda event: event.stream_id):
        yield stream_id.removeprefix("tick-"), max(event.global_position for event in tick)
