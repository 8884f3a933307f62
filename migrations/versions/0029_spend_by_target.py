"""Spend by catalog target: `spend_daily.target` joins the key.

A target's `prices` in the catalog price the calls booked on it (before `[prices]` and
genai-prices), so the spend read model keeps which target each call went to (recorded on
`BudgetSpent`). Existing rows get "", as spend of no target, priced by model as before;
`tickwork projections rebuild spend` gives them their targets. A downgrade adds up each
key's rows across targets (`migrations.spend_key`).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-05
"""

from __future__ import annotations

from migrations.spend_key import FIRST_KEY, add_to_key, drop_from_key

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

KEY = [*FIRST_KEY, "template_hash"]


def upgrade() -> None:
    add_to_key("target", [*KEY, "target"], before=["template_hash"])


def downgrade() -> None:
    drop_from_key("target", KEY, before=["template_hash", "target"])
