"""Spend as booked: `spend_daily.price_source` joins the key, beside the USD booked.

Each `BudgetSpent` records the USD it was booked at and who priced it, so the spend read
model keeps them: the booked USD summed in nano-dollars (`booked_nusd`, integers like the
token sums, so a rebuild equals the incremental model exactly) per price source, and the
usage parts priced apart (`cache_write_1h_tokens`, `web_search_requests`). Existing rows
get source "", spend booked without a price, which reports price when they read it, as
before; `tickwork projections rebuild spend` gives them the sources their events
recorded. A downgrade drops the new sums and adds up each key's rows across sources
(`migrations.spend_key`).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.spend_key import FIRST_KEY, add_to_key, drop_from_key

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

KEY = [*FIRST_KEY, "template_hash", "target"]
BOOKED = ("cache_write_1h_tokens", "web_search_requests", "booked_nusd")


def upgrade() -> None:
    add_to_key(
        "price_source", [*KEY, "price_source"], before=["template_hash", "target"], length=100
    )
    with op.batch_alter_table("spend_daily") as batch:
        for name in BOOKED:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("spend_daily") as batch:
        for name in BOOKED:
            batch.alter_column(name, existing_type=sa.BigInteger(), server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("spend_daily") as batch:
        for name in BOOKED:
            batch.drop_column(name)
    drop_from_key("price_source", KEY, before=["template_hash", "target", "price_source"])
