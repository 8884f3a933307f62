"""Read paths that do not grow with history: an index for `--since`, keyed lists of ticks.

- `events (recorded_at)`, with the position in each entry (SQLite's rowid; PostgreSQL's
  INCLUDE): the first position of a period (`--since`, digests) is a range of this index
  read without the table, instead of a walk of the log from position 1.
- `ticks.sort_at`, the time a list of ticks orders by (scheduled, else started, else
  ended, else the tick's first event), stored so that indexes can hold it:
  `(sort_at, tick_id)` and `(level, sort_at, tick_id)` give each page of ticks, newest
  first, keyset-paginated, as one walk of `limit` entries. Existing rows get it from
  their times; a row with none (a tick known only from its spend) from its stream's first
  event the projection folds, which is what a rebuild gives it.
- `(level, status, finished_at)` replaces `(level, status)`: a level's last completed
  tick (the previous result a prompt may quote) is one lookup, not a sort of them all.
- `(level, slot)`: each level's last slot, read at start-up, is one lookup per level.
- A partial index of open ticks (scheduled, running, unknown): reconciliation, the
  in-flight list and budgets read only the ticks not yet ended.
- PostgreSQL: `ticks.tick_id` in the "C" collation, so a prefix (`tickwork show`) is a
  range of the primary key and ids order by code point, as on SQLite.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

OPEN = "status IN ('scheduled', 'running', 'unknown')"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The list time of a row with no time and no event left to date it (none is made so)."""

ticks = sa.table(
    "ticks", sa.column("tick_id", sa.String()), sa.column("sort_at", sa.DateTime(timezone=True))
)


def _date_timeless_rows(conn: sa.Connection) -> None:
    """Rows without a lifecycle time: when the first of their folded events happened."""
    timeless = conn.execute(sa.select(ticks.c.tick_id).where(ticks.c.sort_at.is_(None)))
    first_event = sa.text(
        "SELECT data FROM events WHERE stream_id = :stream "
        "AND type IN ('BudgetSpent', 'ToolCalled') ORDER BY stream_position LIMIT 1"
    )
    for (tick_id,) in list(timeless):
        data = conn.execute(first_event, {"stream": f"tick-{tick_id}"}).scalar()
        if isinstance(data, str):  # SQLite's text; psycopg parses PostgreSQL's json
            data = json.loads(data)
        when = EPOCH if data is None else datetime.fromisoformat(data["occurred_at"])
        conn.execute(ticks.update().where(ticks.c.tick_id == tick_id).values(sort_at=when))


def upgrade() -> None:
    op.create_index(
        "ix_events_recorded_at",
        "events",
        ["recorded_at"],
        postgresql_include=["global_position"],
    )
    op.add_column("ticks", sa.Column("sort_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE ticks SET sort_at = COALESCE(scheduled_at, started_at, finished_at)")
    _date_timeless_rows(op.get_bind())
    with op.batch_alter_table("ticks") as batch:
        batch.alter_column("sort_at", existing_type=sa.DateTime(timezone=True), nullable=False)
        batch.drop_index("ix_ticks_level_status")
        batch.create_index("ix_ticks_level_status", ["level", "status", "finished_at"])
        batch.create_index("ix_ticks_sort_at", ["sort_at", "tick_id"])
        batch.create_index("ix_ticks_level_sort_at", ["level", "sort_at", "tick_id"])
        batch.create_index("ix_ticks_level_slot", ["level", "slot"])
        batch.create_index(
            "ix_ticks_open",
            ["level"],
            sqlite_where=sa.text(OPEN),
            postgresql_where=sa.text(OPEN),
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute('ALTER TABLE ticks ALTER COLUMN tick_id TYPE varchar(200) COLLATE "C"')


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute('ALTER TABLE ticks ALTER COLUMN tick_id TYPE varchar(200) COLLATE "default"')
    with op.batch_alter_table("ticks") as batch:
        for name in ("open", "level_slot", "level_sort_at", "sort_at", "level_status"):
            batch.drop_index(f"ix_ticks_{name}")
        batch.create_index("ix_ticks_level_status", ["level", "status"])
        batch.drop_column("sort_at")
    op.drop_index("ix_events_recorded_at", "events")
