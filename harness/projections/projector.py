"""Folds the event log into read models, each batch and its checkpoint in one transaction.

The store's `tracking` transaction locks the projection's checkpoint, so two processes
catching up at once fold each event once, and reports the horizon (the highest committed
position): everything at or below it is visible. Each batch folds a window of positions
up to the horizon and moves the checkpoint to the window's end, past events of types the
projection ignores, without ever skipping one it needs.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import count
from operator import itemgetter

from harness.projections.base import Projection
from harness.store import EventStore


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


Progress = Callable[[int, int], None]
"""Called with (positions done, positions to do) after each batch."""


class Projector:
    """Keeps read models current: folds new events into each projection, batch by batch."""

    def __init__(
        self,
        store: EventStore,
        projections: Sequence[Projection],
        batch_size: int = 100_000,
    ) -> None:
        self.store = store
        self.projections = {projection.name: projection for projection in projections}
        self.batch_size = batch_size

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

        A projection whose checkpoint is already at the log's last position is left alone,
        from two reads: its write transaction would find nothing to fold, and taking it
        costs every `tickwork status` a write lock and a commit per projection.
        Checkpoints are read first, so an event appended in between is never missed: it
        makes the projection look behind and fold.
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
            if checkpoints[projection.name] >= last:
                if progress is not None:
                    progress(0, 0)
                continue
            start = None
            while True:
                with _collector_paused():
                    done, position, horizon = self._step(projection)
                start = position if start is None else start
                folded += done
                if progress is not None:
                    progress(position - start, max(horizon - start, 0))
                if position >= horizon:
                    break
        return folded

    def rebuild(self, name: str, progress: Progress | None = None) -> int:
        """Clear the read model and fold it again from position 0."""
        projection = self.get(name)
        with self.store.tracking(name) as tracking:
            for table in projection.tables:
                tracking.conn.execute(table.delete())
            self.store.save_checkpoint(tracking, 0)
        return self.catch_up([name], progress)

    def _step(self, projection: Projection) -> tuple[int, int, int]:
        """Fold one batch; returns (events folded, new checkpoint, horizon)."""
        with self.store.tracking(projection.name) as tracking:
            position, horizon = tracking.position, tracking.horizon
            if horizon <= position:
                return 0, position, horizon
            upper = min(horizon, position + self.batch_size)
            window = self.store.read_window(tracking, projection.types, upper)
            # zip draws from the counter only after the window yields: what is left in it
            # counts the events folded, at C speed (a counting generator costs per event).
            counter = count()
            projection.apply(tracking.conn, map(itemgetter(0), zip(window, counter, strict=False)))
            self.store.save_checkpoint(tracking, upper)
            return next(counter), upper, horizon
