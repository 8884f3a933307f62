"""Schema migrations through Alembic, safe when several processes start at once.

Each upgrade runs in one transaction that first takes the store's write lock (SQLite:
`BEGIN IMMEDIATE`; PostgreSQL: a transaction-scoped advisory lock), so a second process
waits and then finds nothing left to do instead of failing on "table already exists".
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from harness.store.engine import BEGIN_MODE
from harness.store.schema import HEAD_REVISION

_PG_MIGRATION_LOCK = 0x7469636B  # "tick"
SCRIPT_LOCATION = "migrations:"
"""Alembic's `script_location`: the installed `migrations` package, as a package resource.

The store reaches its migrations through this setting alone and never imports them, so
no arrow runs from the application back to the schema's history.
"""


def script_folder() -> Path:
    """The folder `SCRIPT_LOCATION` names, resolved as Alembic resolves it."""
    package, _, below = SCRIPT_LOCATION.partition(":")
    return Path(str(resources.files(package).joinpath(below)))


def current_revision(engine: Engine) -> str | None:
    """The schema revision stored in `alembic_version`, or None for an empty database."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def needs_upgrade(engine: Engine) -> bool:
    """Whether the schema lags this code, so opening a store knows to migrate (or refuse)."""
    return current_revision(engine) != HEAD_REVISION


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply pending migrations (a no-op when the schema is already there)."""
    _run(engine, "upgrade", revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Revert to `revision` (the migration tests use it; operators rarely need to)."""
    _run(engine, "downgrade", revision)


def _run(engine: Engine, direction: str, revision: str) -> None:
    # Alembic is imported here, not at module level: opening an up-to-date store never needs it.
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    with engine.connect() as conn:
        conn = conn.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_MIGRATION_LOCK)))
            config.attributes["connection"] = conn
            getattr(command, direction)(config, revision)
