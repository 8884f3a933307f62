"""PostgreSQL: `events` partitioned by the UTC day each tick stream began, so a day leaves whole.

`events` becomes a table partitioned by LIST on a new column, `tick_day`: the UTC day of
the first event of the event's tick stream (`tick-…`), NULL for every other stream. The
archive's unit is that same day (a tick belongs to the day its stream began), so once a
day's ticks are archived, its partition holds nothing else and leaves by DETACH and DROP,
no DELETE, no dead tuple. The partitions:

- `events_hot` (`tick_day` NULL): the streams that never leave (levels, control,
  throttle, digest, archive, …): a home of their own, never dropped;
- `events_YYYYMMDD`, one per day of tick streams, made ahead of their day by the store
  (`harness.store.partitions`); this migration makes one for each day the log holds,
  today and tomorrow;
- `events_default`: a safety net for a tick stream whose day has no partition yet; kept
  empty (the writer makes a day's partition before its first append), and a partition
  made later takes its rows out of it.

Every event of a stream shares its `tick_day`, so a unique key that holds it is as strict
as one without it: (stream_id, stream_position, tick_day) is still one row per stream
position, and (global_position, tick_day) one per position, NULLS NOT DISTINCT making the
hot partition's NULLs collide as equal values (PostgreSQL 15).

Two small tables, written by the same statement as the events, hold what the partitions
cannot:

- `event_ids` (id → position): the event id is not a function of the stream, so its
  uniqueness lives here, a narrow row and the primary-key entry of the unique index it
  replaces; a refused append's diagnosis reads it too;
- `tick_streams` (stream → day), one row per tick stream, written with its first event:
  an append finds its stream's partition in one lookup (the version check then reads
  that partition alone), and two processes starting one stream on either side of
  midnight collide on its primary key instead of starting it twice, in two days.

Existing events are copied into the partitioned table in one transaction, each tick
stream under the day of its first stored event; the old table is dropped.

SQLite is unchanged: a day leaves by batched deletes and incremental vacuum.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COLUMNS = (
    "global_position, event_id, stream_id, stream_position, type, version, data, metadata, "
    "recorded_at"
)
DEFINITION = """
    global_position bigint NOT NULL,
    event_id uuid NOT NULL,
    stream_id varchar(255) NOT NULL,
    stream_position integer NOT NULL,
    type varchar(100) NOT NULL,
    version smallint NOT NULL,
    data json NOT NULL,
    metadata json NOT NULL,
    recorded_at timestamptz NOT NULL
"""
RECORDED_AT_INDEX = (
    "CREATE INDEX ix_events_recorded_at ON events (recorded_at) INCLUDE (global_position)"
)


def _partition(day: date) -> str:
    return f"CREATE TABLE events_{day:%Y%m%d} PARTITION OF events FOR VALUES IN ('{day}')"


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    if int(conn.exec_driver_sql("SHOW server_version_num").scalar_one()) < 150000:
        raise RuntimeError("tickwork's partitioned events need PostgreSQL 15 or later")
    op.execute(
        "CREATE TEMPORARY TABLE stream_days ON COMMIT DROP AS "
        "SELECT DISTINCT ON (stream_id) stream_id, "
        "(recorded_at AT TIME ZONE 'UTC')::date AS tick_day FROM events "
        "WHERE left(stream_id, 5) = 'tick-' ORDER BY stream_id, stream_position"
    )
    op.execute("ALTER TABLE events RENAME TO events_unpartitioned")
    op.execute("ALTER TABLE events_unpartitioned DROP CONSTRAINT uq_events_event_id")
    op.execute("ALTER TABLE events_unpartitioned DROP CONSTRAINT uq_events_stream_position")
    op.execute("ALTER INDEX events_pkey RENAME TO events_unpartitioned_pkey")
    op.execute("DROP INDEX ix_events_recorded_at")
    op.execute(
        f"CREATE TABLE events ({DEFINITION}, tick_day date, "
        "CONSTRAINT events_pkey UNIQUE NULLS NOT DISTINCT (global_position, tick_day), "
        "CONSTRAINT uq_events_stream_position "
        "UNIQUE NULLS NOT DISTINCT (stream_id, stream_position, tick_day)"
        ") PARTITION BY LIST (tick_day)"
    )
    op.execute(RECORDED_AT_INDEX)
    op.execute("CREATE TABLE events_hot PARTITION OF events FOR VALUES IN (NULL)")
    op.execute("CREATE TABLE events_default PARTITION OF events DEFAULT")
    today = datetime.now(UTC).date()
    stored = conn.exec_driver_sql("SELECT DISTINCT tick_day FROM stream_days").scalars()
    for day in sorted({*stored, today, today + timedelta(days=1)}):
        op.execute(_partition(day))
    op.execute(
        f"INSERT INTO events ({COLUMNS}, tick_day) SELECT {COLUMNS}, tick_day "
        "FROM events_unpartitioned LEFT JOIN stream_days USING (stream_id)"
    )
    op.execute(
        "CREATE TABLE event_ids (event_id uuid PRIMARY KEY, global_position bigint NOT NULL)"
    )
    op.execute(
        "INSERT INTO event_ids (event_id, global_position) "
        "SELECT event_id, global_position FROM events_unpartitioned"
    )
    op.execute(
        "CREATE TABLE tick_streams (stream_id varchar(255) PRIMARY KEY, tick_day date NOT NULL)"
    )
    op.execute("INSERT INTO tick_streams (stream_id, tick_day) SELECT * FROM stream_days")
    op.execute("DROP TABLE events_unpartitioned")
    op.execute("ANALYZE events")
    op.execute("ANALYZE event_ids")
    op.execute("ANALYZE tick_streams")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    op.execute(f"CREATE TABLE events_unpartitioned ({DEFINITION})")
    op.execute(
        f"INSERT INTO events_unpartitioned ({COLUMNS}) SELECT {COLUMNS} FROM events "
        "ORDER BY global_position"
    )
    op.execute("DROP TABLE events")
    op.execute("DROP TABLE event_ids")
    op.execute("DROP TABLE tick_streams")
    op.execute("ALTER TABLE events_unpartitioned RENAME TO events")
    op.execute(
        "ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (global_position), "
        "ADD CONSTRAINT uq_events_event_id UNIQUE (event_id), "
        "ADD CONSTRAINT uq_events_stream_position UNIQUE (stream_id, stream_position)"
    )
    op.execute(RECORDED_AT_INDEX)
