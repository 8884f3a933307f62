"""Small read models for the operator's read paths: tick counters, cancel scopes, digests.

The tick counters belong to the `ticks` projection, whose checkpoint already stands past
every stored event: they are filled here from its rows (ticks per level and status, and
per UTC hour of scheduling, run times, refused tool calls), so an upgraded store's
`/metrics` and digests go on counting from where they stood. Run times come from the
rows' final times (the fold counts a tick's first known run time; the two differ only
for a tick whose start or end was corrected after it ended); `tickwork projections
rebuild ticks` makes them the fold's exactly. The other tables belong to new
projections, which start at position 0 and catch up.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

DURATION_BOUNDS_MS = (
    1_000,
    5_000,
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
"""`harness.projections.tick_counts.DURATION_BUCKETS` when this revision was written, in ms."""


def upgrade() -> None:
    op.create_table(
        "tick_status_counts",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("status", sa.String(20), primary_key=True),
        sa.Column("ticks", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tick_level_totals",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("ended", sa.BigInteger(), nullable=False),
        sa.Column("duration_us", sa.BigInteger(), nullable=False),
        sa.Column("cap_hits", sa.BigInteger(), nullable=False),
        sa.Column("calls_refused", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tick_duration_buckets",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("le_ms", sa.BigInteger(), primary_key=True),
        sa.Column("ticks", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tick_hour_counts",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("hour", sa.String(13), primary_key=True),
        sa.Column("status", sa.String(20), primary_key=True),
        sa.Column("reason", sa.Text(), primary_key=True),
        sa.Column("ticks", sa.BigInteger(), nullable=False),
    )
    _fill_tick_counters()
    op.create_table(
        "cancel_scopes",
        sa.Column("scope", sa.String(200), primary_key=True),
        sa.Column("stream_position", sa.Integer(), nullable=False),
        sa.Column("in_force", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "digests_published",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("global_position", sa.BigInteger(), nullable=False),
    )


def _fill_tick_counters() -> None:
    """The counters of the ticks already folded, from their rows."""
    if op.get_bind().dialect.name == "postgresql":
        micros = "(extract(epoch from finished_at - started_at) * 1000000)::bigint"
        hour = "to_char(scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24')"
    else:
        # SQLAlchemy keeps `YYYY-MM-DD HH:MM:SS.ffffff`: whole seconds, then microseconds,
        # exact where julianday's floating point is not.
        seconds = "(strftime('%s', finished_at) - strftime('%s', started_at))"
        fraction = (
            "(CAST(substr(finished_at, 21) AS INTEGER) - CAST(substr(started_at, 21) AS INTEGER))"
        )
        micros = f"({seconds} * 1000000 + {fraction})"
        hour = "substr(scheduled_at, 1, 10) || 'T' || substr(scheduled_at, 12, 2)"
    reason = "CASE WHEN status = 'skipped' THEN coalesce(reason, '') ELSE '' END"
    op.execute(
        "INSERT INTO tick_hour_counts (level, hour, status, reason, ticks) "
        f"SELECT level, {hour}, status, {reason}, count(*) FROM ticks "
        f"WHERE scheduled_at IS NOT NULL GROUP BY level, {hour}, status, {reason}"
    )
    op.execute(
        "INSERT INTO tick_status_counts (level, status, ticks) "
        "SELECT level, status, count(*) FROM ticks GROUP BY level, status"
    )
    op.execute(
        "INSERT INTO tick_level_totals (level, ended, duration_us, cap_hits, calls_refused) "
        "SELECT level, "
        f"sum(CASE WHEN {_ENDED} THEN 1 ELSE 0 END), "
        f"coalesce(sum(CASE WHEN {_ENDED} THEN {micros} ELSE 0 END), 0), "
        "sum(CASE WHEN tool_calls_cancelled > 0 THEN 1 ELSE 0 END), "
        "sum(tool_calls_cancelled) "
        "FROM ticks GROUP BY level"
    )
    above = ""
    for bound in DURATION_BOUNDS_MS:
        op.execute(
            "INSERT INTO tick_duration_buckets (level, le_ms, ticks) "
            f"SELECT level, {bound}, count(*) FROM ticks "
            f"WHERE {_ENDED}{above} AND {micros} <= {bound * 1000} GROUP BY level"
        )
        above = f" AND {micros} > {bound * 1000}"


_ENDED = "started_at IS NOT NULL AND finished_at IS NOT NULL"


def downgrade() -> None:
    op.drop_table("tick_hour_counts")
    op.drop_table("digests_published")
    op.drop_table("cancel_scopes")
    op.drop_table("tick_duration_buckets")
    op.drop_table("tick_level_totals")
    op.drop_table("tick_status_counts")
