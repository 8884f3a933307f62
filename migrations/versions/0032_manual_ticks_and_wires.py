"""Whether a tick was started by hand; where a scheduler's ticks send their calls.

`ticks.manual`: the service log marked a tick run by hand (`tickwork tick`, the dashboard's buttons)
`by hand`; `tickwork ticks`, `GET /ticks` and the dashboard's tick list showed it as any
slot's tick. The row now keeps `TickScheduled.manual`.

Rows folded before this revision say neither (NULL) until `tickwork projections rebuild
ticks`.

`heartbeats.wires`: a scheduler's banner said where the ticks of each wire protocol go
(tickwork's fake, a host, or refused for want of a key); the dashboard, served by
another process, could not. Each scheduler now beats that description (JSON, protocol
-> text: hosts and variable names only, never a URL's credentials or a key).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ticks", sa.Column("manual", sa.Boolean()))
    op.add_column("heartbeats", sa.Column("wires", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("heartbeats") as batch:
        batch.drop_column("wires")
    with op.batch_alter_table("ticks") as batch:
        batch.drop_column("manual")
