"""procrastinate's schema in the store's database: installed, upgraded, versioned.

Its SQL is procrastinate's own, for psycopg: it runs on psycopg's connection in the
store's transactions (`driver_transaction`), as procrastinate's connectors would run it.
procrastinate's `SchemaManager.apply_schema` runs `schema.sql` in a transaction of its
own: the version check, the script and the mark share one here, under a lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from procrastinate.schema import SchemaManager
from psycopg import Connection, sql

from harness.store.base import EventStore
from harness.store.procrastinate_jobs import DEFER_LOCK

SCHEMA_LOCK = DEFER_LOCK + 1
"""Advisory lock of `tickwork migrate` applying procrastinate's schema (two at once)."""

PROCRASTINATE_MIGRATIONS = sorted(Path(SchemaManager.get_migrations_path()).glob("*.sql"))
"""procrastinate's migrations, oldest first (their names sort by version)."""
MARK = "procrastinate schema "
"""How the comment on `procrastinate_jobs` starts: the rest names the last migration in."""
UNMARKED = "03.04.00_50_post_add_retry_failed_job_procedure"
"""The schema of a database tickwork set up before it marked versions: procrastinate
3.10's `schema.sql`, which holds every migration up to this one."""


def _present(conn: Connection[Any]) -> bool:
    """Whether procrastinate's tables exist in the store's database."""
    row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
    return row is not None and row[0] is not None


def _version(conn: Connection[Any]) -> str | None:
    """The last procrastinate migration the store's schema holds; None without its tables."""
    if not _present(conn):
        return None
    row = conn.execute(
        "SELECT obj_description('procrastinate_jobs'::regclass, 'pg_class')"
    ).fetchone()
    comment = None if row is None else row[0]
    return comment.removeprefix(MARK) if comment and comment.startswith(MARK) else UNMARKED


def apply_procrastinate_schema(store: EventStore) -> tuple[str | None, str]:
    """Install procrastinate's schema, or upgrade it with the migrations it lacks.

    procrastinate's `schema.sql` only creates (it fails on a schema that exists), and its
    migrations upgrade; the version a database holds is kept in a comment on its job
    table, which lives and dies with the schema. Each migration is applied in a
    transaction of its own, holding SCHEMA_LOCK (two `tickwork migrate` at once apply
    each once), and the comment moves on with it. Returns the version before and after.
    A script is sent without parameters, so psycopg passes its `%` through untouched.
    """
    with store.driver_transaction() as conn:
        before = _version(conn)
    while True:
        with store.driver_transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": SCHEMA_LOCK})
            version = _version(conn)
            if version is None:
                conn.execute(SchemaManager.get_schema().encode())
                _mark(conn, PROCRASTINATE_MIGRATIONS[-1].stem)
                continue
            pending = [m for m in PROCRASTINATE_MIGRATIONS if m.stem > version]
            if not pending:
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS tickwork_procrastinate_tick "
                    "ON procrastinate_jobs ((args->>'tick_id'))"
                )
                _mark(conn, version)
                return before, version
            conn.execute(pending[0].read_bytes())
            _mark(conn, pending[0].stem)


def _mark(conn: Connection[Any], version: str) -> None:
    conn.execute(
        sql.SQL("COMMENT ON TABLE procrastinate_jobs IS {}").format(sql.Literal(MARK + version))
    )
