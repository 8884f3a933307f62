"""An index of the tick rows that still hold a transcript, by day and tick.

The transcripts pass (`transcript_days` shorter than `hot_days`) looked for a day's hot
transcripts by walking every row of the hot store in tick order, and for the days that
have any by reading every row older than its cutoff: each daily pass cost the hot
store (30 days of 1,000 levels a minute: 43M rows), not the day. Rows leave this partial
index as their transcripts leave them, so it holds the newest `transcript_days` only.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

HOLDS_TRANSCRIPT = sa.text("transcript > 0")


def upgrade() -> None:
    op.create_index(
        "ix_tick_rows_transcripts",
        "tick_rows",
        ["day", "tick_id"],
        sqlite_where=HOLDS_TRANSCRIPT,
        postgresql_where=HOLDS_TRANSCRIPT,
    )


def downgrade() -> None:
    op.drop_index("ix_tick_rows_transcripts", table_name="tick_rows")
