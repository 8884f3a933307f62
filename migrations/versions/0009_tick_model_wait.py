"""Each tick's model and queue wait in the ticks read model; spend by prompt template.

`ticks.model` (the model of the tick's last spend, else the one it was scheduled for) and
`ticks.queue_wait_seconds` (from its claim to its first start) are folded from events the
rows do not keep: a row holds only its latest attempt's start, and no model. Existing rows
keep both NULL, as unknown; `tickwork projections rebuild ticks` fills them from the log.
Ticks folded after the upgrade have them.

`spend_daily.template_hash` joins the key: spend per prompt template (its hash before
substitution, recorded on `BudgetSpent` from now on). Existing rows get "", which is
what a rebuild gives them too: the events they were folded from carry no hash. A
downgrade adds up each key's rows across templates (`migrations.spend_key`).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.spend_key import FIRST_KEY, add_to_key, drop_from_key

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ticks", sa.Column("model", sa.String(200)))
    op.add_column("ticks", sa.Column("queue_wait_seconds", sa.Float()))
    add_to_key("template_hash", [*FIRST_KEY, "template_hash"], before=[])


def downgrade() -> None:
    op.drop_column("ticks", "queue_wait_seconds")
    op.drop_column("ticks", "model")
    drop_from_key("template_hash", FIRST_KEY, before=["template_hash"])
