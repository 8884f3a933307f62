"""Rate buckets: shared `rpm`, `tpm` and `max_parallel` limits, held in the store.

One row per bucket (locked by a call taking its turn, and blocked until a provider's
`retry-after`), the last minute's grants of each, and the leases of calls in flight
(`harness.store.rate_buckets`). Grants older than a minute are deleted by the next
caller of their bucket, leases when their call ends or their holder is found dead: the
tables hold a minute's worth, however long the service runs.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("blocked_until", sa.Float(), nullable=False),
    )
    op.create_table(
        "rate_grants",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("bucket", sa.String(300), nullable=False),
        sa.Column("kind", sa.String(3), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_rate_grants_bucket_at", "rate_grants", ["bucket", "at"])
    op.create_index("ix_rate_grants_call_id", "rate_grants", ["call_id"])
    op.create_table(
        "rate_leases",
        sa.Column("call_id", sa.String(255), primary_key=True),
        sa.Column("bucket", sa.String(300), primary_key=True),
        sa.Column("tick_id", sa.String(255)),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_rate_leases_bucket", "rate_leases", ["bucket"])
    op.create_index("ix_rate_leases_tick_id", "rate_leases", ["tick_id"])


def downgrade() -> None:
    op.drop_table("rate_leases")
    op.drop_table("rate_grants")
    op.drop_table("rate_buckets")
