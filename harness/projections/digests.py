"""The digests read model: where in the log each digest was last published.

The dashboard and `GET /digests/latest` show the newest publication of any configured
digest; reading every `DigestPublished` to find it grew with each period published.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from harness.contracts import DigestPublished
from harness.projections.base import EventData, Projection, upsert
from harness.store import EventStore, StoredEvent, metadata

digests_published = sa.Table(
    "digests_published",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("global_position", sa.BigInteger(), nullable=False),
)


class DigestsProjection(Projection):
    """Each digest's last `DigestPublished`, by its global position."""

    name = "digests"
    types = frozenset({DigestPublished.type})
    tables = (digests_published,)

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """The batch's last publication of each digest; events come in global order."""
        last = {data["name"]: position for position, _, data in batch}
        if not last:
            return
        insert = upsert(conn, digests_published)
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=["name"],
                set_={"global_position": insert.excluded.global_position},
            ),
            [{"name": name, "global_position": position} for name, position in last.items()],
        )


def latest_published(store: EventStore, names: Iterable[str]) -> StoredEvent | None:
    """The newest `DigestPublished` of the named digests, as the read model has folded it."""
    query = (
        sa.select(digests_published.c.global_position)
        .where(digests_published.c.name.in_(list(names)))
        .order_by(digests_published.c.global_position.desc())
        .limit(1)
    )
    with store.read_transaction() as conn:
        position = conn.execute(query).scalar()
    if position is None:
        return None
    found = store.read_all(position - 1, 1, types=[DigestPublished.type])
    return found[0] if found else None
