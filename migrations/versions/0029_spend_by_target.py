"""Spend by catalog target: `spend_daily.target` joins the key.

A target's `prices` in the catalog price the calls booked on it (before `[prices]` and
genai-prices), so the spend read model keeps which target each call went to (recorded on
`BudgetSpent`). Existing rows get "", as spend of no target, priced by model as before;
`tickwork projections rebuild spend` gives them their targets. A downgrade adds up each
key's rows across targets.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

KEY = ["level", "model", "day", "price_tier", "template_hash"]
SUMS = [
    "prompt_tokens",
    "completion_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "model_calls",
    "estimated_calls",
]
PRIMARY_KEY = "spend_daily_pkey"
"""PostgreSQL's name for the table's primary key (SQLite's has none: the table is copied)."""


def upgrade() -> None:
    target = sa.Column("target", sa.String(64), nullable=False, server_default="")
    _set_key(lambda batch: batch.add_column(target), [*KEY, "target"], had=False)
    with op.batch_alter_table("spend_daily") as batch:
        batch.alter_column("target", existing_type=sa.String(64), server_default=None)


def downgrade() -> None:
    keys, sums = ", ".join(KEY), ", ".join(f"sum({name}) AS {name}" for name in SUMS)
    op.execute(
        f"CREATE TABLE spend_daily_merged AS SELECT {keys}, {sums} FROM spend_daily GROUP BY {keys}"
    )
    op.execute("DELETE FROM spend_daily")
    _set_key(lambda batch: batch.drop_column("target"), KEY, had=True)
    columns = ", ".join([*KEY, *SUMS])
    op.execute(f"INSERT INTO spend_daily ({columns}) SELECT {columns} FROM spend_daily_merged")
    op.drop_table("spend_daily_merged")


def _set_key(change: Callable[[BatchOperations], object], key: list[str], *, had: bool) -> None:
    """Change spend_daily's columns (`change`, given the batch) and make `key` its primary key.

    SQLite copies the table, from its definition (`had`: with `target`) given without a
    primary key, so that the copy's is `key` alone.
    """
    if op.get_bind().dialect.name == "postgresql":
        with op.batch_alter_table("spend_daily") as batch:
            batch.drop_constraint(PRIMARY_KEY, type_="primary")
            change(batch)
            batch.create_primary_key(PRIMARY_KEY, key)
        return
    columns = [
        sa.Column("level", sa.String(100), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("price_tier", sa.BigInteger(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in SUMS),
        sa.Column("template_hash", sa.String(64), nullable=False),
        *([sa.Column("target", sa.String(64), nullable=False)] if had else []),
    ]
    stored = sa.Table("spend_daily", sa.MetaData(), *columns, sa.Index("ix_spend_daily_day", "day"))
    with op.batch_alter_table("spend_daily", copy_from=stored) as batch:
        change(batch)
        batch.create_primary_key(PRIMARY_KEY, key)
