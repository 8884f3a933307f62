"""Each tick's model and queue wait in the ticks read model; spend by prompt template.

`ticks.model` (the model of the tick's last spend, else the one it was scheduled for) and
`ticks.queue_wait_seconds` (from its claim to its first start) are folded from events the
rows do not keep: a row holds only its latest attempt's start, and no model. Existing rows
keep both NULL, as unknown; `tickwork projections rebuild ticks` fills them from the log.
Ticks folded after the upgrade have them.

`spend_daily.template_hash` joins the key: spend per prompt template (its hash before
substitution, recorded on `BudgetSpent` from now on). Existing rows get "", which is
what a rebuild gives them too: the events they were folded from carry no hash. A
downgrade adds up each key's rows across templates.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

KEY = ["level", "model", "day", "price_tier"]
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
    op.add_column("ticks", sa.Column("model", sa.String(200)))
    op.add_column("ticks", sa.Column("queue_wait_seconds", sa.Float()))
    template = sa.Column("template_hash", sa.String(64), nullable=False, server_default="")
    _set_key(lambda batch: batch.add_column(template), [*KEY, "template_hash"], had=False)
    with op.batch_alter_table("spend_daily") as batch:
        batch.alter_column("template_hash", existing_type=sa.String(64), server_default=None)


def downgrade() -> None:
    op.drop_column("ticks", "queue_wait_seconds")
    op.drop_column("ticks", "model")
    keys, sums = ", ".join(KEY), ", ".join(f"sum({name}) AS {name}" for name in SUMS)
    op.execute(
        f"CREATE TABLE spend_daily_merged AS SELECT {keys}, {sums} FROM spend_daily GROUP BY {keys}"
    )
    op.execute("DELETE FROM spend_daily")
    _set_key(lambda batch: batch.drop_column("template_hash"), KEY, had=True)
    columns = ", ".join([*KEY, *SUMS])
    op.execute(f"INSERT INTO spend_daily ({columns}) SELECT {columns} FROM spend_daily_merged")
    op.drop_table("spend_daily_merged")


def _set_key(change: Callable[[BatchOperations], object], key: list[str], *, had: bool) -> None:
    """Change spend_daily's columns (`change`, given the batch) and make `key` its primary key.

    SQLite copies the table, from its definition (`had`: with `template_hash`) given
    without a primary key, so that the copy's is `key` alone.
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
        *([sa.Column("template_hash", sa.String(64), nullable=False)] if had else []),
    ]
    stored = sa.Table("spend_daily", sa.MetaData(), *columns, sa.Index("ix_spend_daily_day", "day"))
    with op.batch_alter_table("spend_daily", copy_from=stored) as batch:
        change(batch)
        batch.create_primary_key(PRIMARY_KEY, key)
