"""The schema exists only through Alembic, and the code's tables match it exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import harness.projections  # noqa: F401  (registers the read-model tables on `metadata`)
import migrations
from harness.store import HEAD_REVISION, SchemaError, migrate_store, open_store
from harness.store.engine import create_store_engine
from harness.store.migrate import current_revision, downgrade, upgrade
from harness.store.schema import metadata
from tests.conftest import fresh_pg_database
from tests.procs import open_fresh, racing


def test_head_revision_constant_matches_alembic() -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION


def _check_schema(url: str) -> None:
    engine = create_store_engine(url)
    upgrade(engine)
    assert current_revision(engine) == HEAD_REVISION
    with engine.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), metadata)
    assert differences == []
    downgrade(engine, "base")
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == HEAD_REVISION
    engine.dispose()


def test_sqlite_schema_matches_the_code_and_round_trips(sqlite_url: str) -> None:
    _check_schema(sqlite_url)


def test_postgres_schema_matches_the_code_and_round_trips() -> None:
    with fresh_pg_database() as url:
        _check_schema(url)


def test_postgres_is_migrated_only_on_purpose() -> None:
    with fresh_pg_database() as url:
        with pytest.raises(SchemaError, match="tickwork migrate"):
            open_store(url)
        assert migrate_store(url) is None
        open_store(url).close()


def test_processes_opening_a_new_sqlite_store_at_once_all_succeed(sqlite_url: str) -> None:
    with racing(open_fresh, *[(sqlite_url,)] * 4):
        pass
    store = open_store(sqlite_url)
    assert len(store.read_stream("opened")) == 4
    store.close()
