"""The tick spend read model: a digest sums its period's ticks' spend instead of its events.

Folded from the log by the projector like every read model: an existing store's
`tick_spend` starts empty at checkpoint 0 and catches up on the next fold.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

SUMS = (
    "prompt_tokens",
    "completion_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "model_calls",
    "estimated_calls",
    "governor_fired",
    "hedges",
    "twin",
)


def upgrade() -> None:
    # PostgreSQL: in the collation of `ticks.tick_id` (migration 0006), so the join of a
    # period's ticks to their spend looks each up in this primary key.
    postgresql = op.get_bind().dialect.name == "postgresql"
    tick_id = sa.String(200, collation="C") if postgresql else sa.String(200)
    op.create_table(
        "tick_spend",
        sa.Column("tick_id", tick_id, primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("price_tier", sa.BigInteger(), primary_key=True),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in SUMS),
    )


def downgrade() -> None:
    op.drop_table("tick_spend")
    op.execute("DELETE FROM projection_checkpoints WHERE name = 'tick_spend'")
