"""The projection contract: a read model folded out of the event log, in the store's database.

A projection sees events as `(global_position, type, data)` tuples: the fold needs nothing
else, and skipping the rest of the record keeps a million-event rebuild within seconds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import ClassVar

import sqlalchemy as sa

from harness.store import EventData, upsert

__all__ = ["EventData", "Projection", "upsert"]


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
