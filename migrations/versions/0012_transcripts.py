"""Transcripts in their own compact form: one compressed row per closed tick.

A closed tick's `TranscriptEntry` events leave `events` for one row of `transcripts`
(`harness.store.transcripts`): the stored records, positions and ids kept, as one
zlib-compressed JSON array, and the UTC day the tick's stream started, which the
transcript archive (`[retention] transcript_days`) selects by. Once archived, a row keeps
no data, only the day whose archive holds it (`archived_on`), until the tick itself is
archived. `events` is not changed.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
import uuid
import zlib
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "transcripts",
        sa.Column("tick_id", sa.String(255), primary_key=True),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary()),
        sa.Column("archived_on", sa.Date()),
    )
    op.create_index("ix_transcripts_day", "transcripts", ["day"])


def downgrade() -> None:
    """Put the compacted transcripts back into `events`; archived ones stay in their archives."""
    events = sa.table(
        "events",
        sa.column("global_position", sa.BigInteger()),
        sa.column("event_id", sa.Uuid()),
        sa.column("stream_id", sa.String()),
        sa.column("stream_position", sa.Integer()),
        sa.column("type", sa.String()),
        sa.column("version", sa.SmallInteger()),
        sa.column("data", sa.JSON()),
        sa.column("metadata", sa.JSON()),
        sa.column("recorded_at", sa.DateTime(timezone=True)),
    )
    bind = op.get_bind()
    partitioned = bind.dialect.name == "postgresql"
    if partitioned:  # 0010: each row names its tick's day, and its id is kept unique apart
        events.append_column(sa.column("tick_day", sa.Date()))
    event_ids = sa.table(
        "event_ids", sa.column("event_id", sa.Uuid()), sa.column("global_position", sa.BigInteger())
    )
    compacted = bind.execute(
        sa.text("SELECT tick_id, day, data FROM transcripts WHERE data IS NOT NULL")
    )
    for tick_id, day, data in compacted:
        rows = [
            {
                "global_position": position,
                "event_id": uuid.UUID(event_id),
                "stream_id": f"tick-{tick_id}",
                "stream_position": stream_position,
                "type": "TranscriptEntry",
                "version": version,
                "data": body,
                "metadata": metadata,
                "recorded_at": datetime.fromisoformat(recorded_at),
                **({"tick_day": day} if partitioned else {}),
            }
            for position, event_id, stream_position, version, body, metadata, recorded_at in (
                json.loads(zlib.decompress(data))
            )
        ]
        bind.execute(events.insert(), rows)
        if partitioned:
            ids = [
                {"event_id": r["event_id"], "global_position": r["global_position"]} for r in rows
            ]
            bind.execute(event_ids.insert(), ids)
    op.drop_index("ix_transcripts_day", "transcripts")
    op.drop_table("transcripts")
