"""Failure streaks per level, folded by the alerter under its own checkpoint.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "failure_streaks",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_tick_id", sa.String(200)),
    )


def downgrade() -> None:
    op.drop_table("failure_streaks")
