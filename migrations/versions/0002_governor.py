"""The governor's calibration read model.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "governor_calibration",
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("window", Json, nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("ignored", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("governor_calibration")
