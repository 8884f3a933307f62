"""Budget windows: spend per `[[budgets]]` entry and window (or rolling hour), per model.

The read model `harness.projections.budget_windows`: a row per budget, window start,
model and price tier, so a check of any budget sums a handful of rows whatever the history; the
fingerprints it was folded for sit in `budget_folds`, so a changed budget is refolded.

Revision ID: 0018
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budget_window_spend",
        sa.Column("budget", sa.String(100), primary_key=True),
        sa.Column("fingerprint", sa.String(16), primary_key=True),
        sa.Column("bucket", sa.String(32), primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("price_tier", sa.BigInteger(), primary_key=True),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("model_calls", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "budget_folds",
        sa.Column("fingerprint", sa.String(16), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("budget_folds")
    op.drop_table("budget_window_spend")
