"""Heartbeats: each `tickwork run` and `tickwork worker` says in the store that it lives.

One row per process, updated in place every few seconds and deleted when the process
stops; a process that dies leaves its row, which the next beat of any process deletes
once it is a day old. The table holds the processes alive or dead within the last day,
however long the service runs.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "heartbeats",
        sa.Column("process_id", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("upstream", sa.Text()),
    )
    op.create_index("ix_heartbeats_beat_at", "heartbeats", ["beat_at"])


def downgrade() -> None:
    op.drop_table("heartbeats")
