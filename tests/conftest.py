"""Fixtures: real SQLite files and real PostgreSQL databases, one per test session.

PostgreSQL tests skip locally when no server answers; with CI=true a missing server fails.
Each test gets an empty store without paying for its migrations: a SQLite test copies a
store migrated once per process (tests/store_support.py), a PostgreSQL test truncates the
session's database (DELETE would be cheaper, but the dead rows it leaves may change the plans
tests/test_read_costs.py counts).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from sqlalchemy.engine import make_url

from harness.devtools.fake_llm import FakeUpstream
from harness.execution.launchers import WarmLauncher
from harness.store import SqlEventStore, migrate_store, open_store
from harness.store.engine import create_store_engine
from tests.receiver import Received, apprise_receiver
from tests.store_support import migrated_sqlite

# Hypothesis times each example (a 200 ms deadline) and its input generation by the wall
# clock: on a machine whose cores other suites share, both failed tests that were right.
settings.register_profile(
    "shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared-machine")

PG_ADMIN_URL = os.environ.get("TICKWORK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
TABLES = (
    "events",
    "event_ids",
    "tick_streams",
    "tick_rows",
    "projection_checkpoints",
    "spend_daily",
    "ticks",
    "tick_level_history",
    "tick_level_latest",
    "governor_calibration",
    "failure_streaks",
    "tick_status_counts",
    "tick_level_totals",
    "tick_duration_buckets",
    "tick_hour_counts",
    "cancel_scopes",
    "digests_published",
    "tick_spend",
    "budget_window_spend",
    "budget_folds",
    "rate_buckets",
    "rate_grants",
    "rate_leases",
)


def _admin_dsn() -> str:
    url = make_url(PG_ADMIN_URL)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _pg_reachable() -> str | None:
    try:
        with psycopg.connect(_admin_dsn(), connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return str(exc).strip()


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database for the block; dropped afterwards."""
    problem = _pg_reachable()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and PostgreSQL is unreachable at {PG_ADMIN_URL}: {problem}")
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL}: {problem}")
    name = f"tickwork_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_admin_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(PG_ADMIN_URL).set(drivername="postgresql+psycopg", database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_admin_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_session_url() -> Iterator[str]:
    with fresh_pg_database() as url:
        migrate_store(url)
        yield url


def _truncate(url: str) -> None:
    engine = create_store_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY"))
    engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated, empty SQLite store in the test's own folder."""
    return migrated_sqlite(tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty store of each backend."""
    if request.param == "sqlite":
        url: str = request.getfixturevalue("sqlite_url")
        return url
    url = request.getfixturevalue("pg_session_url")
    _truncate(url)
    return url


@pytest.fixture
def pg_store(pg_session_url: str) -> Iterator[SqlEventStore]:
    """A migrated, empty PostgreSQL store, for what only PostgreSQL can show."""
    _truncate(pg_session_url)
    opened = open_store(pg_session_url)
    yield opened
    opened.close()


@pytest.fixture
def store(store_url: str) -> Iterator[SqlEventStore]:
    opened = open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    """The fake upstream on a real socket, one per test module."""
    server = FakeUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def standin_launcher() -> Iterator[WarmLauncher]:
    """A warm launcher whose ticks run the stand-in worker (tests/standin_worker.py)."""
    launcher = WarmLauncher("tests.standin_worker")
    assert launcher.wait_ready(60)
    yield launcher
    launcher.close()


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    """A local HTTP endpoint for apprise's `json://` notifications: (URL, bodies received)."""
    with apprise_receiver() as endpoint:
        yield endpoint
