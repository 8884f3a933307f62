"""Events, projection checkpoints, and the spend and ticks read models.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("global_position", Position, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("stream_id", sa.String(255), nullable=False),
        sa.Column("stream_position", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("version", sa.SmallInteger(), nullable=False),
        sa.Column("data", Json, nullable=False),
        sa.Column("metadata", Json, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
        sa.UniqueConstraint("stream_id", "stream_position", name="uq_events_stream_position"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "projection_checkpoints",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "spend_daily",
        sa.Column("level", sa.String(100), primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("price_tier", sa.BigInteger(), primary_key=True),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("model_calls", sa.BigInteger(), nullable=False),
        sa.Column("estimated_calls", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_spend_daily_day", "spend_daily", ["day"])
    op.create_table(
        "ticks",
        sa.Column("tick_id", sa.String(200), primary_key=True),
        sa.Column("level", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("slot", sa.DateTime(timezone=True), nullable=True),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("model_calls", sa.Integer(), nullable=False),
        sa.Column("estimated_calls", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("tool_calls_cancelled", sa.Integer(), nullable=False),
        sa.Column("result_path", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
    )
    op.create_index("ix_ticks_level_status", "ticks", ["level", "status"])


def downgrade() -> None:
    op.drop_table("ticks")
    op.drop_table("spend_daily")
    op.drop_table("projection_checkpoints")
    op.drop_table("events")
