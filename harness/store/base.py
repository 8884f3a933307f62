"""The event store contract: what every backend promises, in one abstract class.

One SQLAlchemy implementation serves SQLite and PostgreSQL (`harness.store.sql`); the
conformance suite in `tests/test_store_contract.py` runs against both. Projections keep
their position through the contract too, as eventsourcing's TrackingRecorder does: a
checkpoint locked in a write transaction, the window of events to fold, and the new
checkpoint saved in that same transaction as the read model's writes. Windows are
counted in events: positions need not be dense.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from harness.contracts import NewEvent, StoredEvent
from harness.folds import Folded, Kernel
from harness.store.records import ANY, AppendResult, EventData, ExpectedVersion, Window

SETTLE_POLL_SECONDS = 0.002
"""How often `wait_settled` asks again: an append in flight ends within milliseconds."""


@dataclass(frozen=True)
class Tracking:
    """A projection's checkpoint, locked for one write transaction of the store.

    `EventStore.reading` gives one over a read transaction, locking nothing, for a fold
    that writes later.

    Read models live in the store's own database: their writes go through `conn`, so they
    commit together with the checkpoint or not at all.
    """

    conn: sa.Connection
    name: str
    position: int
    """Where the projection's checkpoint stood when the lock was taken (0 the first time)."""
    horizon: int
    """The highest position a reader could pass when the lock was taken (`last_position`)."""


class EventStore(ABC):
    """An append-only log of events, ordered globally and per stream."""

    @abstractmethod
    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent],
        expected_version: ExpectedVersion = ANY,
    ) -> AppendResult:
        """Append events to a stream atomically.

        Raises ConcurrencyError (writing nothing) when the stream is not at
        `expected_version`. A batch whose event ids are all stored already is a no-op that
        reports the stored positions, so a retry never counts twice.
        """

    @abstractmethod
    def create_streams(self, streams: Mapping[str, Sequence[NewEvent]]) -> set[str]:
        """Start every stream of the mapping that does not exist yet, in one transaction.

        Returns the ids of the streams this call created; a stream that exists already is
        left as it is. A scheduler claims a whole wave of slots this way: one commit, not
        one per slot, and of two replicas claiming together each stream goes to one.
        """

    @abstractmethod
    def read_stream(
        self, stream_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with stream_position > `after`, in stream order."""

    @abstractmethod
    def read_streams(
        self, stream_ids: Iterable[str], types: Iterable[str] | None = None
    ) -> dict[str, list[StoredEvent]]:
        """The events of several streams at once (of `types` only, if given), each in order.

        Every stream asked for is a key; one with no events maps to an empty list.
        """

    @abstractmethod
    def read_all(
        self,
        after_position: int = 0,
        limit: int = 1000,
        types: Iterable[str] | None = None,
    ) -> list[StoredEvent]:
        """Events with global_position > `after_position`, in global order.

        Positions are increasing, not dense on PostgreSQL. Never skips an event committed
        by a concurrent writer: a reader that resumes from the last position it saw gets
        every later commit.
        """

    @abstractmethod
    def read_last(self, limit: int, types: Iterable[str] | None = None) -> list[StoredEvent]:
        """The last `limit` events (of `types` only, if given), newest first."""

    @abstractmethod
    def checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        """The position each named projection has folded up to (0 for one never folded)."""

    @abstractmethod
    def tracking(self, name: str) -> AbstractContextManager[Tracking]:
        """A write transaction holding the checkpoint of projection `name` locked.

        Of two processes tracking one name at once, the second waits for the first to
        commit and then sees its checkpoint, so no event is folded twice. Every event at or
        below the horizon is visible to the transaction, and no writer can still commit
        one there, so a window that ends there never skips an event that commits late.
        The transaction commits when the block ends; when it raises, the read model's
        writes and the checkpoint are both rolled back.
        """

    @abstractmethod
    def window(self, after: int, upper: int, size: int | None = None) -> Window:
        """The first `size` events in (after, upper], or all of them: how many, where it ends.

        It ends at the `size`-th event's position, or at `upper` when fewer lie there, so
        a fold that moves its checkpoint to the end never stops short of `upper` for lack
        of events. One scan of the primary key, as long as the window. A window to fold
        ends at or below a tracking horizon: an append in flight could land below any
        higher position later.
        """

    @abstractmethod
    def reach(self, after: int, upper: int, size: int) -> int:
        """The end of a window after `after` (at most `upper`) whose read holds about `size` events.

        Not counted exactly, as `window` counts: no packed tick is decoded to find it. The
        window holds at most `size` events of `events`, and the packed records of rows
        starting in it (about `size`) and of the rows running at `after`. For a fold that
        needs its windows bounded, not counted, over a long history (the alerter's first
        start): `window` decodes every packed tick of the windows it counts. Past `after`
        whenever `upper` is; `size` is at least 1.
        """

    @abstractmethod
    def reading(self, name: str, position: int, horizon: int) -> AbstractContextManager[Tracking]:
        """A read transaction standing in for a tracking one, to read a window without the lock.

        For a fold that reads ahead of its checkpoint and writes what it folded later, in a
        tracking transaction, if the checkpoint has not moved meanwhile; `horizon` is a
        tracking horizon seen before (every event at or below it had committed then). On
        SQLite the tracking transaction's lock keeps every writer waiting: a long history
        is read without it.
        """

    @abstractmethod
    def read_window(
        self, tracking: Tracking, types: Iterable[str], upper: int
    ) -> Iterator[EventData]:
        """Events of `types` in the window (tracking.position, upper], in global order.

        Read in the tracking transaction and streamed in slices, so a fold of a large
        window never holds all of it at once. The projector sizes `upper` with `window`;
        a range of positions, not a LIMIT, keeps the query's plan a scan of the key.
        """

    @abstractmethod
    def fold_range(
        self, after: int, upper: int, types: Iterable[str], kernel: Kernel, parts: int
    ) -> Folded:
        """Fold the events of `types` in (after, upper] with a sum kernel, in `parts` processes.

        The range is counted and split into `parts` ranges of about equal event count: this
        process folds the first, a worker process of its own each other one (reading on a
        connection of its own), and their sums are merged, which equals folding the range
        whole since sums commute. The workers are started first, so they start up while
        the range is counted. Nothing is written: the caller adds the sums to its read
        model in a tracking transaction, checking that its checkpoint still stands at
        `after`. `upper` must be at or below a tracking horizon.
        """

    @abstractmethod
    def save_checkpoint(self, tracking: Tracking, position: int) -> None:
        """Move the locked checkpoint to `position`; it commits with the transaction."""

    @abstractmethod
    def read_transaction(self) -> AbstractContextManager[sa.Connection]:
        """A transaction on the store's database for the read models' queries.

        Read models live in the store's own database, beside the events they are folded
        from, so reading them is part of what a store offers. Only the store and
        `harness.projections` open it (tests/test_layering.py): every other part asks a
        read model's query, which takes the store it was given, whatever the backend.
        """

    @abstractmethod
    def write_transaction(self) -> AbstractContextManager[sa.Connection]:
        """A read-then-write transaction on the store's database, for tables beside the log.

        procrastinate's jobs and the archive's bookkeeping live in the store's database;
        their writes take this handle (on SQLite, the write lock at BEGIN), never the
        read models' `read_transaction`.
        """

    @abstractmethod
    def driver_transaction(self) -> AbstractContextManager[Any]:
        """`write_transaction` as the driver's own connection (psycopg's, on PostgreSQL).

        For a library that brings its SQL written for its driver, procrastinate: its
        queries run on the connection its own connectors would use, in the store's
        transaction, and the driver's errors become the store's (`StoreError`). Only the
        store's own operations on procrastinate's tables take it (`procrastinate_jobs`,
        `procrastinate_schema`); the executor asks those (tests/test_layering.py).
        """

    @abstractmethod
    def first_position_since(self, when: datetime) -> int:
        """The first global position recorded at or after `when` (last + 1 if none).

        A reader of a period (a digest, an export) starts there instead of at zero.
        """

    @abstractmethod
    def last_position(self) -> int:
        """The highest global position a reader may pass (0 for an empty store).

        Positions increase with every append but are not dense on PostgreSQL: a reader
        counts events by reading them, never by subtracting positions.
        """

    @abstractmethod
    def newest_position(self) -> int:
        """The highest global position committed (0 for an empty store), settled or not.

        On PostgreSQL it may lie above `last_position` while an append that took a lower
        position is still writing: `wait_settled(newest_position())` waits for every
        append committed before the call to become readable.
        """

    @abstractmethod
    def lookback(self, count: int) -> int:
        """The position after which the last `count` events lie (0 if there are no more).

        `read_all(lookback(n), n)` reads the newest n events at a bounded cost, however
        long the log.
        """

    def wait_settled(self, position: int, timeout: float = 10.0) -> bool:
        """Wait until a reader may pass `position`: no writer can still commit below it.

        On PostgreSQL a transaction that took a lower position may commit after it; such
        appends take milliseconds. Returns False when `timeout` passes first (a
        transaction the horizon cannot tell from a writer stays open), True otherwise.
        """
        deadline = time.monotonic() + timeout
        while self.last_position() < position:
            if time.monotonic() >= deadline:
                return False
            time.sleep(SETTLE_POLL_SECONDS)
        return True

    @abstractmethod
    def vacuum(self, tables: Sequence[str] = ()) -> None:
        """Make the space of deleted or rewritten rows reusable: in `tables`, or every table.

        PostgreSQL keeps them as dead tuples until a VACUUM: a rebuild or an archive run
        asks for one when it ends, instead of leaving them for autovacuum. SQLite reuses
        freed pages by itself (its file shrinks by incremental vacuum, see retention).
        """

    @abstractmethod
    def stream_version(self, stream_id: str) -> int:
        """The stream's last position (0 when the stream does not exist)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
