"""Each tick's attempts in its row of `ticks`, so the lists say a tick was retried.

`tickwork ticks`, `GET /ticks` and the dashboard's tick list showed a retried tick as
one run, timed from its last attempt's start: a failure that took 14.8 s over four
attempts read `0.1 s`. The row now counts the attempts (the highest `TickStarted.attempt`)
and keeps its first start, so "took" covers them all.

Rows folded before this revision count no attempts (and keep the last start) until
`tickwork projections rebuild ticks`.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ticks", sa.Column("attempts", sa.Integer()))


def downgrade() -> None:
    with op.batch_alter_table("ticks") as batch:
        batch.drop_column("attempts")
