"""Billing: how spend is paid for (`api`, `subscription`) joins both spend read models' keys.

Each `BudgetSpent` now says how its call is paid for: on `api` it is billed its list
value, on a `subscription` (an agent CLI on a plan) it is worth its list value and billed
nothing. Reports show the two side by side, and a budget limits either, so both read
models keep the billing apart:

- `spend_daily.billing` joins the key; every row folded before this revision is spend
  booked before tickwork recorded billing, which is `api`, as a rebuild gives them too.
  A downgrade adds up each key's rows across billings (`migrations.spend_key`).
- `budget_window_spend.billing` joins the key. The read model is folded for the budgets
  configured and refolds itself from the log when a budget it was not folded for appears
  (`harness.projections.budget_windows.ensure_folded`): the table is made anew and its
  folds forgotten, so the next budget check refolds the current windows with billing.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.spend_key import FIRST_KEY, add_to_key, drop_from_key

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

KEY = [*FIRST_KEY, "template_hash", "target", "price_source"]
BEFORE = ["template_hash", "target", "price_source"]
BOOKED = ["cache_write_1h_tokens", "web_search_requests", "booked_nusd"]
WINDOW_KEY = ["budget", "fingerprint", "bucket", "model", "price_tier"]


def upgrade() -> None:
    add_to_key("billing", [*KEY, "billing"], BEFORE, length=16, value="api", sums=BOOKED)
    _budget_windows([*WINDOW_KEY, "billing"])


def downgrade() -> None:
    drop_from_key("billing", KEY, [*BEFORE, "billing"], sums=BOOKED)
    _budget_windows(WINDOW_KEY)


def _budget_windows(key: list[str]) -> None:
    """`budget_window_spend` made anew with `key`, refolded on the next budget check."""
    op.drop_table("budget_window_spend")
    strings = {"budget": 100, "fingerprint": 16, "bucket": 32, "model": 200, "billing": 16}
    op.create_table(
        "budget_window_spend",
        *(
            sa.Column(
                name,
                sa.String(strings[name]) if name in strings else sa.BigInteger(),
                primary_key=True,
            )
            for name in key
        ),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("model_calls", sa.BigInteger(), nullable=False),
    )
    op.execute("DELETE FROM budget_folds")
