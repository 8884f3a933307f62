"""Each tick's fire lag in its row of `ticks`, so `/metrics` reads the last claims by index.

The fire-lag family reported the last 100 `TickScheduled` of the log. Once closed ticks
are packed, those records live in tick rows, and finding the newest 100 meant unpacking
every row that could reach past them (on PostgreSQL, whose positions follow transaction
ids, most of the history: 0.97 s CPU a scrape at 300k events). The ticks projection now
keeps the lag (claim minus fire time) with the tick, and the scrape reads the newest
rows of the list-time index.

Rows folded before this revision have no lag: the window fills with the ticks claimed
after it (a minute at 1,000 levels), or at once with `tickwork projections rebuild`.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ticks", sa.Column("fire_lag_seconds", sa.Float()))


def downgrade() -> None:
    with op.batch_alter_table("ticks") as batch:
        batch.drop_column("fire_lag_seconds")
