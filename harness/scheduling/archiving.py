"""Retention: closed ticks older than `hot_days` leave the hot store for one archive per day.

A day's transcripts leave with its ticks, in its archive, or before them (older than
`transcript_days`, after the days: `harness.scheduling.transcript_archiving`, which
first finishes any day's transcripts a killed run began). A day's run goes through
phases, each safe to be killed after (`tickwork archive`, and `tickwork run` once a day,
`Archiver.run`):

1. its closed ticks' events are written to the day's archive, data file then manifest,
   each through a temp file, fsync and rename (`harness.store.archives`);
2. the archive is read back whole against its manifest (sha256, counts, positions);
3. the result and log files its events name are packed into `files.tar.gz` (atomically);
4. `ArchiveWritten` is recorded: from now on the archive is part of the history, and a
   rebuild reads it;
5. the packed files leave the results folder;
6. the events leave the hot store in batches, in global order, each batch deleting its
   ticks' read-model rows (`Projection.archived`) and the packed rows
   (`harness.store.tick_rows`) of the ticks whose last record it holds, in the same
   transaction (`harness.projections.leaving`); on PostgreSQL, in one transaction, as the
   day's partitions of `events` and `tick_rows` (`harness.store.retention.leave_day`)
   where they hold nothing else.

Nothing leaves before its archive is verified and recorded, so a kill at any point leaves
every event in the store or in a verified archive. A rerun reuses an archive it finds
whole (a manifest that verifies), writes again one without a manifest, and deletes what
is still there: a recorded day is done once its last archived position is gone, which,
deleting in order, means every one is. A tick still open when its day is archived stays
hot until it closes, and then leaves with the first day archived after that (a straggler:
that day's archive holds it). Aggregates (counts, spend, run times, streaks) stay as they
were; rows per tick leave with their ticks, so the store stops growing after `hot_days`
(`find_archived` finds an archived tick by the day its id names), and the hour counts of
archived days become day counts.

Memory does not grow with the day: every phase reads it a page or a batch at a time (the
day's ticks are found again by a rule on each page, `harness.store.retention`; the
archive counts ticks at their first records; the named files and the tar's members go
by as a stream), so a day of 1.44M ticks holds no set of its ids, paths or members.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tarfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from harness.config import Settings
from harness.contracts import ARCHIVE_STREAM, ArchiveSummary, ArchiveWritten
from harness.files import atomic_file, make_private_folder
from harness.prices import PriceBook
from harness.projections import delete_archived, drop_archived_day, projector_for
from harness.scheduling.transcript_archiving import (
    TRANSCRIPT_PHASES,
    TranscriptsArchived,
    archive_transcripts,
    begun_days,
    midway,
)
from harness.store import (
    EVENTS_FILE,
    FILES_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    ArchiveError,
    Manifest,
    PartitionHeld,
    SqlEventStore,
    StoreError,
    closed_ticks,
    compact,
    day_folder,
    day_lines,
    day_range,
    drop_emptied_days,
    first_tick_day_after,
    holds,
    hot_days,
    lagging_checkpoints,
    oldest_tick_record,
    partitioned,
    prepare_partitions,
    read_fields,
    read_lines,
    reclaim_space,
    recorded_after,
    verify,
    verify_as_recorded,
    write_archive,
)

KILL_AT_ENV = "TICKWORK_ARCHIVE_KILL_AT"
"""Tests only: the archiving process kills itself (SIGKILL) on reaching the phase named."""
PHASES = (
    *TRANSCRIPT_PHASES,
    "writing",
    "written",
    "verified",
    "packed",
    "recorded",
    "removed",
    "deleting",
    "deleted",
)
DELETE_BATCH = 5000
"""Events deleted in one transaction: short enough not to hold the writers back long."""
RECENT_PATHS = 100_000
"""Files named lately that naming them again skips (`Archiver._named_files`)."""
DAILY_SECONDS = 86400.0
HELD_BACK_SECONDS = 5.0
"""How soon the service tries again when a day stayed hot because a checkpoint lagged (a
read model's or the alerter's): at start, the alerter's first catch-up runs beside the
first archive run."""
ARCHIVE_NAMESPACE = uuid.UUID("5f0f4d4e-7c1a-4d4b-9a3e-1f2b3c4d5e6f")
"""`ArchiveWritten` ids are derived from the day and the sha256: recorded once."""

Report = Callable[[str], None]


@dataclass(frozen=True)
class DayArchived:
    """What one day's run did (or, dry, would do)."""

    day: date
    folder: Path
    ticks: int
    events: int
    files: int
    deleted: int
    reused: bool
    """The archive was found written already (a run cut short before)."""


class ArchiveStopped(Exception):
    """The service is stopping: the run ends where a kill could have ended it.

    Every phase is safe to be killed after, and so is every batch: the next start goes on.
    """


def _killed_at(name: str) -> None:
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _tar_names(path: Path) -> Iterator[str]:
    """The names of a tar's members, in order, read as a stream."""
    with tarfile.open(path, "r|gz") as tar:
        while (member := tar.next()) is not None:
            yield member.name
            tar.members.clear()  # type: ignore[attr-defined]  # it keeps every member read


def _batches(folder: Path) -> Iterator[tuple[list[dict[str, Any]], set[str]]]:
    """The archive's records in batches of `DELETE_BATCH`, each with the ticks it names."""
    archived = read_fields(folder)
    while batch := list(islice(archived, DELETE_BATCH)):
        yield batch, {record["stream_id"].removeprefix("tick-") for record in batch}


class Archiver:
    """Archives every closed tick of the days before a cutoff, day by day, crash-safely."""

    def __init__(self, settings: Settings, store: SqlEventStore, report: Report) -> None:
        self.settings = settings
        self.store = store
        self.report = report
        self.root = settings.retention.archive
        self.projector = projector_for(store, PriceBook(settings.prices))
        self.transcripts: list[TranscriptsArchived] = []
        """What the last run did with transcripts (`archive` returns what it did with ticks)."""
        self.held_back = False
        """Whether the last run kept a day hot for a checkpoint behind it (`run` retries soon)."""
        self.stopping = threading.Event()
        """Set (by `run`'s caller) when the service stops: a run ends at its next phase."""

    def cutoff(self, now: datetime | None = None) -> date:
        """Days before this one are archived: `hot_days` before today (UTC)."""
        today = (now or datetime.now(UTC)).date()
        return today - timedelta(days=self.settings.retention.hot_days)

    def archive(self, before: date | None = None, dry_run: bool = False) -> list[DayArchived]:
        """Archive the days before `before` (default: `cutoff()`), oldest first.

        Raises ValueError for a `before` later than today (a day still going on), and
        ArchiveError for a recorded archive that no longer verifies.
        """
        today = datetime.now(UTC).date()
        before = self.cutoff() if before is None else before
        if before > today:
            raise ValueError(f"--before {before}: a day not over yet cannot be archived")
        self.held_back = False
        make_private_folder(self.root)
        with (self.root / ".lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.report(f"archive: another run holds {self.root / '.lock'}; not now")
                return []
            if not dry_run:
                moved = prepare_partitions(self.store.engine, today)
                if moved:
                    self.report(
                        f"archive: {moved} rows left the default partitions for their day's"
                    )
                self.projector.catch_up()
                compact(self.store)
            begun = self._transcripts(begun_days(self.store, self.root, before), dry_run)
            days = self._days(before, dry_run)
            later = hot_days(self.store, max(before, self.transcript_cutoff()))
            if dry_run:  # the days above would have taken theirs along
                later = [day for day in later if day >= before]
            self.transcripts = begun + self._transcripts(later, dry_run)
            if not dry_run and (days or any(done.dropped for done in self.transcripts)):
                said = reclaim_space(self.store)
                if said:
                    self.report(f"archive: {said}")
            return days

    def _transcripts(self, days: list[date], dry_run: bool) -> list[TranscriptsArchived]:
        return archive_transcripts(self.store, self.root, days, dry_run, self._phase, self.report)

    def _phase(self, name: str) -> None:
        """A point a kill test may kill the run at (`KILL_AT_ENV`), and a stopping service."""
        _killed_at(name)
        self._go_on()

    def _go_on(self) -> None:
        """Raises ArchiveStopped once the service stops: a day's run is minutes long."""
        if self.stopping.is_set():
            raise ArchiveStopped

    def transcript_cutoff(self, now: datetime | None = None) -> date:
        """Transcripts of days before this one are archived: `transcript_days` before today."""
        retention = self.settings.retention
        today = (now or datetime.now(UTC)).date()
        return today - timedelta(days=retention.transcript_days or retention.hot_days)

    def _days(self, before: date, dry_run: bool) -> list[DayArchived]:
        """Finish the recorded days still hot, then archive the days not recorded, oldest first.

        A run costs the days still holding hot ticks, however many were archived before:
        it starts at the oldest tick record still hot, reads the archive stream back to
        there, and walks only the days a tick still hot began on (a day holding only
        streams that stay hot has nothing to archive; a straggler that closed leaves
        with the next day that has).
        """
        oldest = oldest_tick_record(self.store)
        done = [] if oldest is None else self._walk(oldest, before, dry_run)
        if not dry_run:
            for emptied in drop_emptied_days(self.store, before):
                self.report(f"archive: the partition of {emptied} held no event any more: dropped")
        return done

    def _walk(self, oldest: int, before: date, dry_run: bool) -> list[DayArchived]:
        """`_days` from the oldest tick record still hot (`oldest`) on.

        A recorded day is finished before any day after it is archived: its events still
        hot would be taken again as stragglers. Only a record reaching `oldest` can be
        unfinished (it is done once its last position is gone), and every record of a
        day from there on was appended after it.
        """
        recorded = {record.day: record for record in recorded_after(self.store, oldest)}
        done = []
        unfinished = (
            []
            if dry_run
            else [
                record
                for record in recorded.values()
                if record.day < before and record.last_position >= oldest
            ]
        )
        for record in sorted(unfinished, key=lambda record: record.day):
            finished = self._finish(record)
            if finished is not None:
                done.append(finished)
        stragglers_upto = 0  # ticks still hot that start up to here: archived days' stragglers
        day = first_tick_day_after(self.store, oldest - 1)
        while day is not None and day < before:
            _, upto = day_range(self.store, day)
            if day in recorded:
                stragglers_upto = upto
            else:
                result = self._archive_day(day, dry_run, stragglers_upto, oldest - 1)
                if result is not None:
                    done.append(result)
            following = first_tick_day_after(self.store, upto)
            day = None if following is None else max(following, day + timedelta(days=1))
        return sorted(done, key=lambda result: result.day)

    def _archive_day(
        self, day: date, dry_run: bool, stragglers_upto: int, earliest: int
    ) -> DayArchived | None:
        """Write (or reuse), verify, pack and record the day's archive, then finish it.

        It takes the day's closed ticks and the stragglers of days archived before
        (started up to `stragglers_upto`, closed since; none is hot up to `earliest`).
        """
        folder = day_folder(self.root, day)
        manifest = self._whole(folder)
        reused = manifest is not None
        if manifest is None:
            ticks = closed_ticks(self.store, day, stragglers_upto, earliest)
            if not ticks.count:
                return None
            if dry_run:
                return DayArchived(day, folder, ticks.count, 0, 0, 0, False)
            lagging = lagging_checkpoints(self.store, ticks.last)
            if lagging:
                behind = ", ".join(f"{name} at {at}" for name, at in sorted(lagging.items()))
                self.report(
                    f"archive {day}: kept hot, checkpoints behind position {ticks.last}: {behind}"
                )
                self.held_back = True
                return None
            write_archive(folder, day, midway(day_lines(self.store, ticks), self._phase, "writing"))
            self._phase("written")
            manifest = verify(folder)
            self._phase("verified")
        elif dry_run:
            return DayArchived(day, folder, manifest.ticks, manifest.events, 0, 0, True)
        files = self._pack(folder)
        self._phase("packed")
        record = ArchiveWritten(
            event_id=uuid.uuid5(ARCHIVE_NAMESPACE, f"{day}/{manifest.sha256}"),
            folder=str(folder.absolute()),
            files=files,
            **manifest.model_dump(include=set(ArchiveSummary.model_fields)),
        )
        self.store.append(ARCHIVE_STREAM, [record.to_record()])
        self._phase("recorded")
        finished = self._finish(record, manifest)
        return None if finished is None else replace(finished, reused=reused)

    def _whole(self, folder: Path) -> Manifest | None:
        """The folder's archive if a run wrote it whole; a half-written one is cleared."""
        if not (folder / MANIFEST_FILE).exists():
            for name in (EVENTS_FILE, INDEX_FILE, FILES_FILE):
                (folder / name).unlink(missing_ok=True)
            return None
        try:
            return verify(folder)
        except ArchiveError as exc:
            # Not recorded yet, so nothing of it left the store: write it again.
            self.report(f"archive: rewriting an unrecorded archive that does not verify: {exc}")
            for name in (MANIFEST_FILE, EVENTS_FILE, INDEX_FILE, FILES_FILE):
                (folder / name).unlink(missing_ok=True)
            return None

    def _finish(
        self, record: ArchiveWritten, verified: Manifest | None = None
    ) -> DayArchived | None:
        """Remove the packed files and delete the archived events still hot (None: done).

        An archive recorded by an earlier run is verified again first (`verified`: this
        run just did).
        """
        if not holds(self.store, record.last_position):
            return None
        folder = day_folder(self.root, record.day)
        manifest = verified or verify_as_recorded(folder, record.sha256)
        self._remove_packed(folder)
        self._phase("removed")
        started = time.perf_counter()
        deleted, how = self._drop_partition(record.day, folder), "as the day's partition"
        if deleted is None:
            deleted, how = self._delete(record.day, folder), "by DELETE"
        self._phase("deleted")
        self.report(
            f"archive {record.day}: {manifest.ticks} ticks, {manifest.events} events, "
            f"{record.files} files in {folder}; {deleted} events left the store {how} "
            f"in {time.perf_counter() - started:.2f} s"
        )
        return DayArchived(
            record.day, folder, manifest.ticks, manifest.events, record.files, deleted, True
        )

    def _drop_partition(self, day: date, folder: Path) -> int | None:
        """PostgreSQL: the day leaves as its partitions, in one transaction (None: it cannot).

        Its stragglers of earlier days and its ticks' read-model rows go in the same
        transaction (`drop_archived_day`), so a kill leaves the day either whole in the
        store or gone.
        """
        if not partitioned(self.store.engine):
            return None
        try:
            left, rows_left = drop_archived_day(
                self.projector, day, lambda: _batches(folder), self._go_on
            )
        except PartitionHeld as held:
            self.report(f"archive {day}: {held}; its archived events leave by DELETE")
            return None
        if not rows_left:
            self.report(f"archive {day}: its tick rows stay a partition; deleted instead")
        self._phase("deleting")
        return left

    def _delete(self, day: date, folder: Path) -> int:
        """Delete the archived events in batches, in global order, marking their ticks."""
        deleted = 0
        for batch, tick_ids in _batches(folder):
            deleted += delete_archived(self.projector, day, batch, tick_ids)
            self._phase("deleting")
        return deleted

    def _pack(self, folder: Path) -> int:
        """Pack the archived ticks' result and log files into the day's tar; returns how many.

        A tar a cut-short run renamed into place is whole and is kept.
        """
        target = folder / FILES_FILE
        if not target.exists():
            with atomic_file(target) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
                for path in self._named_files(folder):
                    self._go_on()
                    if path.exists():
                        tar.add(path, arcname=self._member(path))
                        # A TarFile keeps every member it wrote: a day's are millions.
                        tar.members.clear()  # type: ignore[attr-defined]  # untyped, public
        return sum(1 for _ in _tar_names(target))

    def _remove_packed(self, folder: Path) -> None:
        """Remove the files the day's tar holds from the results folder.

        The tar holds the named files that existed, in the order named: the two are
        walked side by side, and a file is removed only when it is the tar's next member.
        """
        packed = _tar_names(folder / FILES_FILE)
        held = next(packed, None)
        for path in self._named_files(folder):
            if held is None:
                return
            self._go_on()
            if self._member(path) == held:
                path.unlink(missing_ok=True)
                self._drop_if_empty(path.parent)
                held = next(packed, None)

    def _drop_if_empty(self, folder: Path) -> None:
        """Remove a day's folder of results once its last file left: a year leaves no husks."""
        results = self.settings.paths.results.absolute()
        if folder.absolute().is_relative_to(results) and folder.absolute() != results:
            with contextlib.suppress(OSError):  # not empty: the day's ticks still hot
                folder.rmdir()

    def _named_files(self, folder: Path) -> Iterator[Path]:
        """Result and log files the archive's events name, in order, each once.

        Once as far as the last `RECENT_PATHS` named go: a tick names its files within
        its own run, and a repeat from further back would only be packed twice.
        """
        recent: OrderedDict[str, None] = OrderedDict()
        for line in read_lines(folder):
            if b'_path"' not in line:  # most records name no file: not parsed
                continue
            data = orjson.loads(line)["data"]
            for key in ("result_path", "log_path"):
                value = data.get(key)
                if value and value not in recent:
                    recent[value] = None
                    if len(recent) > RECENT_PATHS:
                        recent.popitem(last=False)
                    yield Path(value)

    def _member(self, path: Path) -> str:
        """The file's name in the tar: relative to the results folder where it lies in it."""
        results = self.settings.paths.results.absolute()
        try:
            return str(path.absolute().relative_to(results))
        except ValueError:
            return str(path.absolute()).lstrip("/")

    def run(self, stopping: threading.Event) -> None:
        """Archive now and then once a day until `stopping` is set (a `tickwork run` companion).

        A run that fails is reported and tried again the next day; the service goes on. A
        run that kept a day hot only because a checkpoint was behind tries again within
        seconds (`HELD_BACK_SECONDS`), not a day later, and twice as late each time it is
        held back again: a checkpoint that never moves (a read model no longer kept) costs
        a run a day, not one every few seconds.
        """
        self.stopping = stopping
        soon = HELD_BACK_SECONDS
        while not stopping.is_set():
            try:
                self.archive()
            except ArchiveStopped:
                self.report("archive: stopped with the service; the next start goes on")
                return
            except (StoreError, OSError, ValueError) as exc:
                self.report(f"archive failed, trying again in a day: {exc}")
            if self.held_back:
                stopping.wait(soon)
                soon = min(DAILY_SECONDS, soon * 2)
            else:
                stopping.wait(DAILY_SECONDS)
                soon = HELD_BACK_SECONDS
