"""Table definitions the code queries with. The schema itself is made only by Alembic.

`HEAD_REVISION` lets a process check the schema without importing Alembic (a tick worker
starts cold and should not pay for it); a test holds it equal to Alembic's head.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

HEAD_REVISION = "0034"

metadata = sa.MetaData()

Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""SQLite needs exactly INTEGER for a rowid alias (AUTOINCREMENT positions); PostgreSQL a
64-bit integer the writer computes from the transaction id (migration 0005)."""


class Json(sa.TypeDecorator[Any]):
    """Read models' JSON: `jsonb` on PostgreSQL.

    Events keep theirs as text (`json` on PostgreSQL): the store never queries inside it,
    and `jsonb` would be turned back into text on every read.

    The PostgreSQL type is chosen when a dialect asks, not at import (as `with_variant`
    would): its module costs a SQLite store's every command, `status` too, 0.03 s.
    """

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        """The dialect's JSON type, `jsonb` for PostgreSQL."""
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(sa.JSON())


events = sa.Table(
    "events",
    metadata,
    sa.Column("global_position", Position, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.Uuid(), nullable=False),
    sa.Column("stream_id", sa.String(255), nullable=False),
    sa.Column("stream_position", sa.Integer(), nullable=False),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("version", sa.SmallInteger(), nullable=False),
    sa.Column("data", sa.JSON(), nullable=False),
    sa.Column("metadata", sa.JSON(), nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("event_id", name="uq_events_event_id"),
    sa.UniqueConstraint("stream_id", "stream_position", name="uq_events_stream_position"),
    # Migration 0006 makes PostgreSQL's entries carry the position too (INCLUDE), as SQLite's
    # hold the rowid: not said here, where a PostgreSQL option would import its dialect for
    # every SQLite command.
    sa.Index("ix_events_recorded_at", "recorded_at"),
    sqlite_autoincrement=True,
)

postgres_only = sa.MetaData()
"""Tables PostgreSQL's partitioned events need beside them (migration 0010); SQLite's
`events` keeps its own unique keys."""

event_ids = sa.Table(
    "event_ids",
    postgres_only,
    sa.Column("event_id", sa.Uuid(), primary_key=True),
    sa.Column("global_position", sa.BigInteger(), nullable=False),
)
"""The id of every event in `events`, unique: no partition of `events` can say so for all
of them. Packed ids leave it after their pass; their rows answer for them
(`harness.store.tick_rows.release_ids`)."""

tick_streams = sa.Table(
    "tick_streams",
    postgres_only,
    sa.Column("stream_id", sa.String(255), primary_key=True),
    sa.Column("tick_day", sa.Date(), nullable=False),
)
"""Each tick stream's day, which names its partition; its key starts a stream once."""

projection_checkpoints = sa.Table(
    "projection_checkpoints",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("position", sa.BigInteger(), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

tick_rows = sa.Table(
    "tick_rows",
    metadata,
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
    sa.Index("ix_tick_rows_tick_id", "tick_id", unique=True),
    sa.Index("ix_tick_rows_span", sa.text("(last_position - first_position)")),
    sa.Index("ix_tick_rows_last_recorded", "last_recorded"),
    sa.Index("ix_tick_rows_day", "day"),
    sa.Index("ix_tick_rows_transcripts", "day", "tick_id", sqlite_where=sa.text("transcript > 0")),
)
"""Closed ticks' records, each tick's packed in one row (migration 0020,
`harness.store.tick_rows`). On PostgreSQL partitioned by `day` (migration 0027), its
unique keys holding the day: (first_position, day) and (tick_id, day). The rows still
holding a transcript are indexed by day (migration 0028; PostgreSQL's index has the same
predicate, set by the migration alone: a `postgresql_` option here would import that
dialect for every SQLite command)."""
