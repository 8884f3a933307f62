"""PostgreSQL: the ids of packed records leave `event_ids`; their tick rows answer for them.

`event_ids` held every stored id, packed ones too (0020), 1.1 KB of the 4.5 KB a tick
took on disk. From here it holds the ids of events still in `events`: compaction takes a
pass's ids out once no append can have missed the pass's rows
(`harness.store.tick_rows.release_ids`), and the writer refuses an append to a packed
stream until the store has looked for its ids in the row, as it has on SQLite since 0020.
The upgrade takes out the ids of the rows packed before; the downgrade puts back those
the rows hold (an id whose transcript entry has left its row for the day's archive
stays out). A schema change in all but columns: code of 0022 relies on `event_ids` to
refuse a packed record's replay, so a store must be downgraded before it runs there.

SQLite: nothing changes.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

from migrations.packing import PAGE, unpack

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def _packed_pages(bind: sa.Connection) -> Iterator[list[dict[str, Any]]]:
    """The ids and positions the rows hold, a page of rows at a time (keyed on tick id)."""
    last = ""
    while True:
        page = bind.execute(
            sa.text(
                "SELECT tick_id, data FROM tick_rows WHERE tick_id > :last "
                "ORDER BY tick_id LIMIT :page"
            ),
            {"last": last, "page": PAGE},
        ).all()
        yield [
            {"i": record.event_id, "p": record.global_position}
            for tick_id, blob in page
            for record in unpack(tick_id, bytes(blob))
        ]
        if len(page) < PAGE:
            return
        last = page[-1][0]


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for ids in _packed_pages(bind):
        bind.execute(
            sa.text("DELETE FROM event_ids WHERE event_id = ANY(:ids)"),
            {"ids": [row["i"] for row in ids]},
        )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for ids in _packed_pages(bind):
        if ids:
            bind.execute(
                sa.text(
                    "INSERT INTO event_ids (event_id, global_position) VALUES (:i, :p) "
                    "ON CONFLICT DO NOTHING"
                ),
                ids,
            )
