"""Whether a tick was started by hand, in its row of `ticks`, so the lists can say so.

The service log marked a tick run by hand (`tickwork tick`, the dashboard's buttons)
`by hand`; `tickwork ticks`, `GET /ticks` and the dashboard's tick list showed it as any
slot's tick. The row now keeps `TickScheduled.manual`.

Rows folded before this revision say neither (NULL) until `tickwork projections rebuild
ticks`.

Revision ID: 0035
Revises: 0030
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0035"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ticks", sa.Column("manual", sa.Boolean()))


def downgrade() -> None:
    with op.batch_alter_table("ticks") as batch:
        batch.drop_column("manual")
