"""Each level's newest and newest ended tick, and an index of the hour counts by hour.

`tick_level_latest` (a row per level, kept by the ticks projection) replaces the walk
back from the end of each level's index that the dashboard made at every refresh for
both; it is filled here from `ticks` as the fold would have left it. The hour index lets
the last day's counts be read as a range of hours instead of every hour ever counted
(PostgreSQL planned a 1,000-level IN list on the primary key as a scan of the table),
and a partial index of the counts at zero, which every batch of the fold deletes.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

NEWEST = """
SELECT level, tick_id, sort_at, status, finished_at,
    ROW_NUMBER() OVER (PARTITION BY level ORDER BY sort_at DESC, tick_id DESC) AS place
FROM ticks
"""
LATEST = f"""
INSERT INTO tick_level_latest (level, tick_id, sort_at, status,
    ended_tick_id, ended_sort_at, ended_status, ended_at)
SELECT n.level, n.tick_id, n.sort_at, n.status, e.tick_id, e.sort_at, e.status, e.finished_at
FROM ({NEWEST}) n
LEFT JOIN ({NEWEST} WHERE status IN ('completed', 'failed', 'timed_out', 'cancelled', 'lost')) e
    ON e.level = n.level AND e.place = 1
WHERE n.place = 1
"""


def upgrade() -> None:
    op.create_table(
        "tick_level_latest",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("tick_id", sa.String(200), nullable=False),
        sa.Column("sort_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("ended_tick_id", sa.String(200)),
        sa.Column("ended_sort_at", sa.DateTime(timezone=True)),
        sa.Column("ended_status", sa.String(20)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
    )
    op.execute(LATEST)
    op.create_index(
        "ix_tick_hour_counts_hour", "tick_hour_counts", ["hour", "level", "status", "ticks"]
    )
    zero = sa.text("ticks = 0")
    op.create_index(
        "ix_tick_hour_counts_zero",
        "tick_hour_counts",
        ["level"],
        sqlite_where=zero,
        postgresql_where=zero,
    )


def downgrade() -> None:
    op.drop_index("ix_tick_hour_counts_zero", "tick_hour_counts")
    op.drop_index("ix_tick_hour_counts_hour", "tick_hour_counts")
    op.drop_table("tick_level_latest")
