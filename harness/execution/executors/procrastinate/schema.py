"""procrastinate's schema in the store's database: installed, upgraded, versioned."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from procrastinate.schema import SchemaManager

from harness.execution.executors.procrastinate.jobs import DEFER_LOCK
from harness.store import (
    EventStore,
)

SCHEMA_LOCK = DEFER_LOCK + 1
"""Advisory lock of `tickwork migrate` applying procrastinate's schema (two at once)."""


def schema_present(conn: sa.Connection) -> bool:
    """Whether procrastinate's tables exist in the store's database."""
    return conn.exec_driver_sql("SELECT to_regclass('procrastinate_jobs')").scalar() is not None


MIGRATIONS = sorted(Path(SchemaManager.get_migrations_path()).glob("*.sql"))
"""procrastinate's migrations, oldest first (their names sort by version)."""
MARK = "procrastinate schema "
"""How the comment on `procrastinate_jobs` starts: the rest names the last migration in."""
UNMARKED = "03.04.00_50_post_add_retry_failed_job_procedure"
"""The schema of a database tickwork set up before it marked versions: procrastinate
3.10's `schema.sql`, which holds every migration up to this one."""


def schema_version(conn: sa.Connection) -> str | None:
    """The last procrastinate migration the store's schema holds; None without its tables."""
    if not schema_present(conn):
        return None
    comment = conn.exec_driver_sql(
        "SELECT obj_description('procrastinate_jobs'::regclass, 'pg_class')"
    ).scalar()
    return comment.removeprefix(MARK) if comment and comment.startswith(MARK) else UNMARKED


def apply_schema(store: EventStore) -> tuple[str | None, str]:
    """Install procrastinate's schema, or upgrade it with the migrations it lacks.

    procrastinate's `schema.sql` only creates (it fails on a schema that exists), and its
    migrations upgrade; the version a database holds is kept in a comment on its job
    table, which lives and dies with the schema. Each migration is applied in a
    transaction of its own, holding SCHEMA_LOCK (two `tickwork migrate` at once apply
    each once), and the comment moves on with it. Returns the version before and after.
    """
    with store.write_transaction() as conn:
        before = schema_version(conn)
    while True:
        with store.write_transaction() as conn:
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": SCHEMA_LOCK})
            version = schema_version(conn)
            if version is None:
                conn.exec_driver_sql(SchemaManager.get_schema().replace("%", "%%"))
                _mark(conn, MIGRATIONS[-1].stem)
                continue
            pending = [m for m in MIGRATIONS if m.stem > version]
            if not pending:
                conn.exec_driver_sql(
                    "CREATE INDEX IF NOT EXISTS tickwork_procrastinate_tick "
                    "ON procrastinate_jobs ((args->>'tick_id'))"
                )
                _mark(conn, version)
                return before, version
            conn.exec_driver_sql(pending[0].read_text().replace("%", "%%"))
            _mark(conn, pending[0].stem)


def _mark(conn: sa.Connection, version: str) -> None:
    conn.exec_driver_sql(f"COMMENT ON TABLE procrastinate_jobs IS '{MARK}{version}'")
