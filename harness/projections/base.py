"""The projection contract: a read model folded from events, in the store's own database.

A projection sees events as `(global_position, type, data)` tuples: the fold needs nothing
else, and skipping the rest of the record keeps a million-event rebuild within seconds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

EventData = tuple[int, str, dict[str, Any]]
"""(global_position, type, data): a plain tuple, as a NamedTuple costs ~0.8 s per million."""


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


def upsert(conn: sa.Connection, table: sa.Table) -> Any:
    """INSERT … ON CONFLICT for the connection's dialect (both have the same API)."""
    module = postgresql if conn.dialect.name == "postgresql" else sqlite
    return module.insert(table)
