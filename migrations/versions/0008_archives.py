"""Archived ticks: their row in the ticks read model says which day's archive holds them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ticks", sa.Column("archived_on", sa.Date()))


def downgrade() -> None:
    op.drop_column("ticks", "archived_on")
