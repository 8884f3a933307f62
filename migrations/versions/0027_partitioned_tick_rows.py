"""PostgreSQL: `tick_rows` partitioned by day, so a day's packed ticks leave as a partition.

A closed tick's packed row (0020) holds most of its bytes, and until now left the store by
DELETE when its day was archived: the table did not shrink, only its space was reused
after a VACUUM. `tick_rows` becomes a table partitioned by RANGE on its `day` (the UTC
day its stream began, the day of its partition of `events`, 0010), one partition a day
(`tick_rows_YYYYMMDD`) and `tick_rows_default` for a day that has none yet; the store
makes a day's two partitions together (`harness.store.partitions`), and an archived day's
rows leave as theirs.

A unique key of a partitioned table holds its partition key: the primary key becomes
(first_position, day) and the tick id's unique index (tick_id, day). A tick has one day,
so either is as strict as before. A partition is made for every day that has rows or a
partition of `events`; existing rows are copied across in one statement, the keys and
indexes built after, and the old table dropped.

SQLite is unchanged.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-03
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

COLUMNS = (
    "first_position, tick_id, last_position, version, events, day, last_recorded, transcript, "
    "archived_on, data"
)
DEFINITION = """
    first_position bigint NOT NULL,
    tick_id varchar(255) NOT NULL,
    last_position bigint NOT NULL,
    version integer NOT NULL,
    events integer NOT NULL,
    day date NOT NULL,
    last_recorded timestamptz NOT NULL,
    transcript integer NOT NULL,
    archived_on date,
    data bytea NOT NULL
"""
INDEXES = (
    "CREATE INDEX ix_tick_rows_span ON tick_rows ((last_position - first_position))",
    "CREATE INDEX ix_tick_rows_last_recorded ON tick_rows (last_recorded)",
    "CREATE INDEX ix_tick_rows_day ON tick_rows (day)",
)
AHEAD_DAYS = 2
"""As `harness.store.partitions` makes them: today and the next two."""


def _days_of_events() -> set[date]:
    names = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'events'::regclass AND c.relname ~ '^events_[0-9]{8}$'"
        )
        .scalars()
    )
    return {datetime.strptime(name.removeprefix("events_"), "%Y%m%d").date() for name in names}


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE tick_rows RENAME TO tick_rows_unpartitioned")
    op.execute(f"CREATE TABLE tick_rows ({DEFINITION}) PARTITION BY RANGE (day)")
    op.execute("CREATE TABLE tick_rows_default PARTITION OF tick_rows DEFAULT")
    today = datetime.now(UTC).date()
    stored = conn.exec_driver_sql("SELECT DISTINCT day FROM tick_rows_unpartitioned").scalars()
    ahead = {today + timedelta(days=n) for n in range(AHEAD_DAYS + 1)}
    for day in sorted({*stored, *_days_of_events(), *ahead}):
        op.execute(
            f"CREATE TABLE tick_rows_{day:%Y%m%d} PARTITION OF tick_rows "
            f"FOR VALUES FROM ('{day}') TO ('{day + timedelta(days=1)}')"
        )
    op.execute(f"INSERT INTO tick_rows ({COLUMNS}) SELECT {COLUMNS} FROM tick_rows_unpartitioned")
    op.execute("DROP TABLE tick_rows_unpartitioned")
    op.execute(
        "ALTER TABLE tick_rows ADD CONSTRAINT tick_rows_pkey PRIMARY KEY (first_position, day)"
    )
    op.execute("CREATE UNIQUE INDEX ix_tick_rows_tick_id ON tick_rows (tick_id, day)")
    for index in INDEXES:
        op.execute(index)
    op.execute("ANALYZE tick_rows")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    op.execute(f"CREATE TABLE tick_rows_unpartitioned ({DEFINITION})")
    op.execute(f"INSERT INTO tick_rows_unpartitioned ({COLUMNS}) SELECT {COLUMNS} FROM tick_rows")
    op.execute("DROP TABLE tick_rows")
    op.execute("ALTER TABLE tick_rows_unpartitioned RENAME TO tick_rows")
    op.execute("ALTER TABLE tick_rows ADD CONSTRAINT tick_rows_pkey PRIMARY KEY (first_position)")
    op.execute("CREATE UNIQUE INDEX ix_tick_rows_tick_id ON tick_rows (tick_id)")
    for index in INDEXES:
        op.execute(index)
    op.execute("ANALYZE tick_rows")
