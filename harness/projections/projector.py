"""Folds the event log into read models, each batch and its checkpoint in one transaction.

The store's `tracking` transaction locks the projection's checkpoint, so two processes
catching up at once fold each event once, and reports the horizon (the highest committed
position): everything at or below it is visible. Each batch folds a window of
`batch_size` events up to the horizon, counted, since positions need not be dense (on
PostgreSQL they may jump by a million between two transactions), and moves the
checkpoint to the window's end, past events of types the projection ignores, without
ever skipping one it needs.

A backlog of more than `partition_above` events for a read model of sums (spend) is
folded in parts instead, one process per core (`EventStore.fold_range`): a rebuild, or
a service back after a long stop. One core folds about 400,000 spend events a second,
so a rebuild of a million would take 2.5 s. The backlog is folded a chunk of at most
FOLD_CHUNK events at a time: each chunk's merged sums are written with the checkpoint
at its end in a tracking transaction of its own, and only if the checkpoint still
stands where the chunk began. Memory follows the chunk, not the history: the sums of a
whole 10M-event history, keyed per tick, held ~706 MB before the first was written.
The small catch-ups a service runs every few seconds stay in-process.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import date
from itertools import islice

import sqlalchemy as sa

from harness.folds import counted
from harness.projections.base import Projection, SumProjection
from harness.store import (
    Archive,
    EventStore,
    Tracking,
    clear_tables,
    merged,
    projection_checkpoints,
)

FOLD_CHUNK = 500_000
"""Events (of every type) a fold in parts holds the sums of before it writes them.

Measured on a 3M-event PostgreSQL store (`ops/bench/fold_chunk_bench.py`, rebuilding
`tick_spend` and `spend`): the whole backlog at once peaked at 360 MiB, chunks of 1M,
500k and 250k at 205, 177 and 165 MiB in about the same time (31, 30, 27 s); at 100k
the fold workers' starts (one per chunk and extra part) took it to 42 s.
"""


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch is folded.

    A batch allocates tens of thousands of short-lived dicts; the cyclic collector would
    scan every long-lived object of the process (price tables included) again and again
    for garbage that reference counting frees anyway. Pausing it cuts a rebuild by ~25 %.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


Progress = Callable[[int, int], None]
"""Called with (events done, events to do) after each batch, of every type."""


class Projector:
    """Keeps read models current: folds new events into each projection, batch by batch.

    `processes` caps the processes a large backlog of a sum projection is folded in (by
    default the cores available); `spawned` counts the worker processes started so far.
    """

    def __init__(
        self,
        store: EventStore,
        projections: Sequence[Projection],
        batch_size: int = 100_000,
        partition_above: int = 200_000,
        processes: int | None = None,
    ) -> None:
        self.store = store
        self.projections = {projection.name: projection for projection in projections}
        self.batch_size = batch_size
        self.partition_above = partition_above
        self.processes = available_cores() if processes is None else processes
        self.spawned = 0

    def get(self, name: str) -> Projection:
        """The named projection; an unknown name lists the known ones, for the operator's CLI."""
        try:
            return self.projections[name]
        except KeyError:
            known = ", ".join(sorted(self.projections))
            raise KeyError(f"no projection named {name!r} (known: {known})") from None

    def checkpoints(self) -> dict[str, int]:
        """Where each projection stands, to report how far it lags the log."""
        return self.store.checkpoints(self.projections)

    def catch_up(self, names: Iterable[str] | None = None, progress: Progress | None = None) -> int:
        """Fold every new event into the named projections (all by default).

        Returns how many events of their types were folded. A projection whose checkpoint
        is already at the log's last position is left alone, from two reads: its write
        transaction would find nothing to fold, and taking it costs every
        `tickwork status` a write lock and a commit per projection. Checkpoints are read
        first, so an event appended in between is never missed: it makes the projection
        look behind and fold.
        """
        selected = (
            [self.get(name) for name in names]
            if names is not None
            else list(self.projections.values())
        )
        checkpoints = self.store.checkpoints(projection.name for projection in selected)
        last = self.store.last_position()
        folded = 0
        for projection in selected:
            checkpoint = checkpoints[projection.name]
            if checkpoint >= last:
                if progress is not None:
                    progress(0, 0)
                continue
            folded += self._fold(projection, checkpoint, last, progress)
        return folded

    def rebuild(
        self, name: str, progress: Progress | None = None, archives: Sequence[Archive] = ()
    ) -> int:
        """Clear the read model (`clear_tables`) and fold it again from position 0, archives first.

        Archived events interleave with hot ones (a tick's events with its level's pauses,
        one day's last ticks with the next day's first), so up to the last archived
        position the archives and the hot store are folded merged in global order, in
        the transaction that cleared the read model: cut short, it leaves the read model
        as it was, never one a catch-up from the hot store alone would finish wrong.
        """
        projection = self.get(name)
        folded = 0
        with self.store.tracking(name) as locked:
            clear_tables(locked.conn, projection.tables)
            # Folded again from zero: the hot events below the archives' end too (a tick
            # still open from a day before them), not only those after the old checkpoint.
            tracking = replace(locked, position=0)
            upper = max((archive.manifest.last_position for archive in archives), default=0)
            if archives:
                folded = self.fold_archived(projection, tracking, archives, upper, progress)
            self.store.save_checkpoint(tracking, upper)
        folded += self.catch_up([name], progress)
        # Batches that add to a row already folded rewrite it: no dead tuple stays behind.
        self.store.vacuum(
            [*(table.name for table in projection.tables), projection_checkpoints.name]
        )
        return folded

    def archived(self, conn: sa.Connection, day: date, tick_ids: Iterable[str]) -> None:
        """Every read model hears that these ticks left for `day`'s archive.

        Called in the transaction that deletes their events (the archive run), as a
        rebuild from the archive calls each projection's hook after folding it.
        """
        left = list(tick_ids)
        for projection in self.projections.values():
            projection.archived(conn, day, left)

    def fold_archived(
        self,
        projection: Projection,
        tracking: Tracking,
        archives: Sequence[Archive],
        upper: int,
        progress: Progress | None = None,
    ) -> int:
        """Fold archives and the hot store merged up to `upper`; returns the events folded.

        From the hot store, the events after `tracking.position`; all in the caller's
        tracking transaction, which moves no checkpoint here: a rebuild and a budget refold
        clear the read model and save their checkpoint in it, so either all is folded or
        nothing changed. Then the read model hears which ticks each archive holds.
        """
        hot = self.store.read_window(tracking, projection.types, min(upper, tracking.horizon))
        events = merged([*(archive.event_data(projection.types) for archive in archives), hot])
        folded = 0
        with _collector_paused():
            while batch := list(islice(events, self.batch_size)):
                projection.apply(tracking.conn, batch)
                folded += len(batch)
                if progress is not None:
                    progress(folded, folded)
        for archive in archives:  # a page at a time: a month of archives holds ~43M ticks
            for tick_ids in archive.tick_pages():
                projection.archived(tracking.conn, archive.day, tick_ids)
        return folded

    def _fold(
        self, projection: Projection, checkpoint: int, last: int, progress: Progress | None
    ) -> int:
        """Fold up to `last`, in parts when the backlog asks for it, then by windows.

        The backlog is counted once, and only as far as the decision needs: a fold in
        parts counts it while its workers start. Events appended meanwhile are folded by
        windows after it, as far as the horizon a window reaches once `last` is passed:
        events appended later are the next catch-up's. A fold that chased the horizon
        while appends went on never ended: sixteen ticks preparing under load each folded
        the calibrations for seconds, seven windows a call, one thread at a time.
        Returns how many events of the projection's types were folded.
        """
        ahead = self.store.window(checkpoint, last, self._enough + 1).events
        folded = done = 0
        if isinstance(projection, SumProjection) and self._parts(ahead) > 1:
            if progress is not None:  # counted whole only for a watcher of the chunks
                ahead = self.store.window(checkpoint, last).events
            done, folded = self._fold_in_parts(projection, self._parts(ahead), ahead, progress)
            ahead = done
        elif ahead > self._enough:
            ahead = self.store.window(checkpoint, last).events
        while True:
            with _collector_paused(), self.store.tracking(projection.name) as tracking:
                if tracking.position >= min(last, tracking.horizon):
                    return folded
                events, count = self._step(projection, tracking)
            folded += count
            done += events
            if progress is not None:
                progress(done, max(ahead, done))

    @property
    def _enough(self) -> int:
        """Events counted to decide how to fold: more means all the processes fold it."""
        return max(self.partition_above, self.processes * self.batch_size)

    def _parts(self, backlog: int) -> int:
        """Processes to fold a backlog in: one per batch of it, up to `processes`, or one."""
        if backlog <= self.partition_above:
            return 1
        return min(self.processes, -(-backlog // self.batch_size))

    def _step(self, projection: Projection, tracking: Tracking) -> tuple[int, int]:
        """Fold one window in the tracking transaction: (events in it, events folded)."""
        window = self.store.window(tracking.position, tracking.horizon, self.batch_size)
        events, counter = counted(self.store.read_window(tracking, projection.types, window.end))
        projection.apply(tracking.conn, events)
        self.store.save_checkpoint(tracking, window.end)
        return window.events, next(counter)

    def _fold_in_parts(
        self, projection: SumProjection, parts: int, ahead: int, progress: Progress | None
    ) -> tuple[int, int]:
        """Fold up to the horizon in `parts` processes, a chunk at a time: (events, events folded).

        `progress` hears of each chunk written, against the `ahead` counted (a rebuild at
        10M folds for minutes: its operator sees the chunks go by).

        Each chunk (FOLD_CHUNK events, bounded by `reach`, nothing decoded to find its end)
        is folded outside any tracking transaction, so appends and other read models go
        on meanwhile, and written with its checkpoint only if the checkpoint has not moved
        since: when another process folded first, the chunks stop there (what they wrote
        stays, counted) and the windows go on from where it got to.
        """
        with self.store.tracking(projection.name) as tracking:
            after, upper = tracking.position, tracking.horizon
        events = folded = 0
        while after < upper:
            end = self.store.reach(after, upper, FOLD_CHUNK)
            with _collector_paused():
                fold = self.store.fold_range(
                    after, end, projection.types, projection.kernel(), parts
                )
            self.spawned += parts - 1
            with self.store.tracking(projection.name) as tracking:
                if tracking.position != after:
                    break
                projection.write(tracking.conn, fold.sums)
                self.store.save_checkpoint(tracking, end)
            events, folded, after = events + fold.events, folded + fold.folded, end
            if progress is not None:
                progress(events, max(ahead, events))
            del fold  # its sums are written: freed before the next chunk's are folded
        return events, folded
