"""The projection contract: a read model folded out of the event log, in the store's database.

A projection sees events as `(global_position, type, data)` tuples: the fold needs nothing
else, and skipping the rest of the record keeps a million-event rebuild within seconds.
A projection whose read model is integer sums (`SumProjection`) can also fold a large
backlog in parts, one process per core, since sums of parts add up to the whole.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import date
from operator import itemgetter
from typing import ClassVar

import sqlalchemy as sa

from harness.folds import Kernel, Sums
from harness.store import EventData, add_sums, upsert

__all__ = ["EventData", "Kernel", "Projection", "SumProjection", "Sums", "add_sums", "upsert"]


class Projection(ABC):
    """A read model: which events it folds, which tables hold it, and how it folds a batch."""

    name: ClassVar[str]
    types: ClassVar[frozenset[str]]
    tables: ClassVar[tuple[sa.Table, ...]]

    @abstractmethod
    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """Fold a batch (in global order) into the read model, inside the caller's transaction.

        The projector commits the checkpoint in the same transaction, so a batch is folded
        exactly once, even if the process dies half way.
        """

    def archived(  # noqa: B027  # a hook with nothing to do for most read models
        self, conn: sa.Connection, day: date, tick_ids: Iterable[str]
    ) -> None:
        """Note that these ticks' events left for `day`'s archive (a rebuild read them there).

        Most read models keep nothing of where events are: aggregates stay as they were.
        """


class SumProjection(Projection):
    """A read model of integer sums per key, whose partial folds merge.

    Its fold is a `Kernel`: a plain function in `harness.folds` that a worker process can
    import without the rest of tickwork, giving a batch's sums per key; `write` adds sums
    to the read model. Sums commute, so the projector may fold a large backlog in parts,
    each in a process of its own, and write the merged sums once: the read model is the
    same as a fold in one process, to the token.
    """

    @abstractmethod
    def kernel(self) -> Kernel:
        """The fold, picklable (a module-level function and plain arguments)."""

    @abstractmethod
    def write(self, conn: sa.Connection, sums: Sums) -> None:
        """Add sums the kernel gave (for any number of batches, merged) to the read model."""

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """The kernel's sums of the batch's data, written."""
        self.write(conn, self.kernel()(map(_DATA, batch)))


_DATA = itemgetter(2)
