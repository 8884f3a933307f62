"""Archived ticks' read-model rows leave with their events.

`tick_level_history` keeps what outlives them: each level's last claimed slot and how
many of its slots ran.

Before, `ticks` kept a row per archived tick forever (`archived_on`), so the store grew by
~440 bytes (SQLite) to ~770 bytes (PostgreSQL) a tick after `hot_days`. The rows already
marked archived are folded into the new table and deleted, with their `tick_spend` rows;
`archived_on` goes (an archived tick is found by the day its id names:
`harness.store.archives.find_archived`).

Revision ID: 0022
Revises: 0020
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0020"
branch_labels = None
depends_on = None

ARCHIVED_RUNS = """
INSERT INTO tick_level_history (level, last_slot, slots_run)
SELECT t.level, MAX(t.slot), COUNT(DISTINCT CASE WHEN t.status <> 'skipped' AND NOT EXISTS (
    SELECT 1 FROM ticks h WHERE h.level = t.level AND h.slot = t.slot
    AND h.archived_on IS NULL AND h.status <> 'skipped') THEN t.slot END)
FROM ticks t WHERE t.archived_on IS NOT NULL AND t.slot IS NOT NULL GROUP BY t.level
"""
"""A slot still run by a hot tick (a twin) is counted when that one leaves."""


def upgrade() -> None:
    op.create_table(
        "tick_level_history",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("last_slot", sa.DateTime(timezone=True)),
        sa.Column("slots_run", sa.BigInteger(), nullable=False),
    )
    op.execute(ARCHIVED_RUNS)
    op.execute(
        "DELETE FROM tick_spend WHERE tick_id IN "
        "(SELECT tick_id FROM ticks WHERE archived_on IS NOT NULL)"
    )
    op.execute("DELETE FROM ticks WHERE archived_on IS NOT NULL")
    op.execute("ALTER TABLE ticks DROP COLUMN archived_on")


def downgrade() -> None:
    op.add_column("ticks", sa.Column("archived_on", sa.Date()))
    op.drop_table("tick_level_history")
