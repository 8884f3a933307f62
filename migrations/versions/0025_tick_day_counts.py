"""Hour counts of archived days as day counts: `tick_day_counts`.

`tick_hour_counts` kept a row per level, UTC hour, status and reason forever (1,000
levels make 8.8M hours a year). The hours of a day move into its row here when its
archive is recorded (`harness.projections.tick_counts.roll_up`); hours already kept of
days archived before move at the next archive run, so nothing is moved here.

A downgrade puts each day's counts back as its first hour's: its hours are gone, and a
digest of whole days counts the same.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tick_day_counts",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("status", sa.String(20), primary_key=True),
        sa.Column("reason", sa.Text(), primary_key=True),
        sa.Column("ticks", sa.BigInteger(), nullable=False),
    )
    op.create_index(
        "ix_tick_day_counts_day", "tick_day_counts", ["day", "level", "status", "ticks"]
    )


def downgrade() -> None:
    op.execute(
        "INSERT INTO tick_hour_counts (level, hour, status, reason, ticks) "
        "SELECT level, day || 'T00', status, reason, ticks FROM tick_day_counts WHERE true "
        "ON CONFLICT (level, hour, status, reason) "
        "DO UPDATE SET ticks = tick_hour_counts.ticks + excluded.ticks"
    )
    op.drop_index("ix_tick_day_counts_day", "tick_day_counts")
    op.drop_table("tick_day_counts")
