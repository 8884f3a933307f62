"""Tick rows: a closed tick's whole stream as one packed row, in place of its transcript's.

`tick_rows` holds, per closed tick, its stored records packed (`migrations.packing`),
keyed by the first global position they hold (a read of a range of positions looks rows
up by it; the span index bounds how far back a row can start and still reach into a
range) and by tick id (a stream's reads). It takes over from `transcripts` (0012): each
compacted transcript becomes a tick row holding just its entries, which the compaction
(its checkpoint starts again from zero) merges with the rest of its tick; an archived
one becomes an empty row that keeps the day whose archive holds it. The downgrade puts
every packed record back into `events` and `transcripts` comes back empty.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
import uuid
import zlib
from datetime import UTC, date, datetime, time

import sqlalchemy as sa
from alembic import op

from migrations.packing import Record, pack, unpack

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _tick_rows() -> sa.TableClause:
    return sa.table(
        "tick_rows",
        sa.column("first_position", sa.BigInteger()),
        sa.column("tick_id", sa.String()),
        sa.column("last_position", sa.BigInteger()),
        sa.column("version", sa.Integer()),
        sa.column("events", sa.Integer()),
        sa.column("day", sa.Date()),
        sa.column("last_recorded", sa.DateTime(timezone=True)),
        sa.column("transcript", sa.Integer()),
        sa.column("archived_on", sa.Date()),
        sa.column("data", sa.LargeBinary()),
    )


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def upgrade() -> None:
    op.create_table(
        "tick_rows",
        sa.Column("first_position", Position, primary_key=True, autoincrement=False),
        sa.Column("tick_id", sa.String(255), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("last_recorded", sa.DateTime(timezone=True), nullable=False),
        sa.Column("transcript", sa.Integer(), nullable=False),
        sa.Column("archived_on", sa.Date()),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_tick_rows_tick_id", "tick_rows", ["tick_id"], unique=True)
    op.create_index("ix_tick_rows_span", "tick_rows", [sa.text("(last_position - first_position)")])
    op.create_index("ix_tick_rows_last_recorded", "tick_rows", ["last_recorded"])
    op.create_index("ix_tick_rows_day", "tick_rows", ["day"])
    bind = op.get_bind()
    rows = []
    for tick_id, day, last, data, archived_on in bind.execute(
        sa.text("SELECT tick_id, day, last_position, data, archived_on FROM transcripts")
    ):
        records = [] if data is None else json.loads(zlib.decompress(data))
        entries = [
            Record(
                position,
                uuid.UUID(event_id),
                f"tick-{tick_id}",
                stream_position,
                "TranscriptEntry",
                version,
                body,
                metadata,
                datetime.fromisoformat(recorded_at),
            )
            for position, event_id, stream_position, version, body, metadata, recorded_at in (
                records
            )
        ]
        blob, count = pack(tick_id, entries)
        rows.append(
            {
                "first_position": min((e.global_position for e in entries), default=last),
                "tick_id": tick_id,
                "last_position": last,
                "version": max((e.stream_position for e in entries), default=0),
                "events": count,
                "day": day,
                "last_recorded": max((e.recorded_at for e in entries), default=_midnight(day)),
                "transcript": count,
                "archived_on": archived_on,
                "data": blob,
            }
        )
    if rows:
        bind.execute(_tick_rows().insert(), rows)
    if bind.dialect.name == "postgresql":  # compacted ids stay unique there (0010)
        for row in rows:
            for record in unpack(row["tick_id"], row["data"]):
                bind.execute(
                    sa.text(
                        "INSERT INTO event_ids (event_id, global_position) VALUES (:i, :p) "
                        "ON CONFLICT DO NOTHING"
                    ),
                    {"i": record.event_id, "p": record.global_position},
                )
    bind.execute(sa.text("DELETE FROM projection_checkpoints WHERE name = 'transcripts'"))
    op.drop_index("ix_transcripts_day", "transcripts")
    op.drop_table("transcripts")


def downgrade() -> None:
    """Put every packed record back into `events`; `transcripts` comes back empty."""
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
    if partitioned:  # 0010: each row names its tick's day; the ids stayed in `event_ids`
        events.append_column(sa.column("tick_day", sa.Date()))
    for tick_id, day, blob in bind.execute(sa.text("SELECT tick_id, day, data FROM tick_rows")):
        rows = [
            {**record.as_row(), **({"tick_day": day} if partitioned else {})}
            for record in unpack(tick_id, bytes(blob))
        ]
        if rows:
            bind.execute(events.insert(), rows)
    for name in ("ix_tick_rows_day", "ix_tick_rows_last_recorded", "ix_tick_rows_span"):
        op.drop_index(name, "tick_rows")
    op.drop_index("ix_tick_rows_tick_id", "tick_rows")
    op.drop_table("tick_rows")
