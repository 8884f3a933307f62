"""Events keep their JSON as text on PostgreSQL (`json`, not `jsonb`).

The store never queries inside an event's JSON; it reads whole events back, and `jsonb`
has to be written out as text again on every read (most of the server's time in a read of
whole events or a rebuild). `json` keeps the text as appended, checked for validity.
The type change rewrites the table once. SQLite keeps JSON as text already.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _retype(type_: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"ALTER TABLE events ALTER COLUMN data TYPE {type_} USING data::{type_}, "
            f"ALTER COLUMN metadata TYPE {type_} USING metadata::{type_}"
        )


def upgrade() -> None:
    _retype("json")


def downgrade() -> None:
    _retype("jsonb")
