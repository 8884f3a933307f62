"""Fixtures: real SQLite files and real PostgreSQL databases, one per test session.

PostgreSQL tests skip locally when no server answers; with CI=true a missing server fails.
Each test gets an empty store without paying for its migrations: a SQLite test copies a
store migrated once per process (tests/store_support.py), a PostgreSQL test empties the
session's database with DELETE and restarts its sequences: TRUNCATE swaps every table's and
index's files and syncs them at commit, about half a second of a worker's time per test on
this machine, DELETE a few milliseconds. A test whose measure dead rows would change (the
buffers tests/test_read_costs.py counts, the dead tuples a rebuild must not leave) asks for
`truncated_pg_url`.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from sqlalchemy.engine import URL, make_url

from harness.devtools.fake_llm import FakeUpstream
from harness.execution.launchers import WarmLauncher
from harness.store import SqlEventStore, migrate_store, open_store
from harness.store.engine import create_store_engine
from harness.store.partitions import AHEAD_DAYS
from tests.receiver import Received, apprise_receiver
from tests.store_support import migrated_sqlite

# Hypothesis times each example (a 200 ms deadline) and its input generation by the wall
# clock: on a machine whose cores other suites share, both failed tests that were right.
settings.register_profile(
    "shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared-machine")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `long` tests first, dealt one by one to the heads of the workers' shares.

    xdist's worksteal hands each worker a contiguous share of the collection and lets an
    idle worker steal the back half of the longest queue, so a long test near the back of a
    share ran last: in December 2026 the OpenCode deadline case (25 s) began 238 s into a
    266 s run and ran alone for its last 25 s. At the head of a share it overlaps the
    rest. Every worker collects alike, so each computes the same order.
    """
    long = [item for item in items if item.get_closest_marker("long")]
    if not long:
        return
    rest = iter([item for item in items if not item.get_closest_marker("long")])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    ordered: list[pytest.Item] = []
    for share in range(workers):
        size = (share + 1) * len(items) // workers - share * len(items) // workers
        heads = long[share::workers]
        ordered += heads + list(islice(rest, max(size - len(heads), 0)))
    items[:] = ordered + list(rest)


@pytest.hookimpl(wrapper=True)
def pytest_collection() -> Iterator[None]:
    """Collect with the cycle collector off, then freeze what collection made.

    Importing the test modules and their libraries makes some 420,000 tracked objects and
    almost no cyclic garbage (a full collection after it found 35 objects, 151 with the
    collector on): its passes over the growing heap cost each xdist worker's collection
    about a tenth of its CPU (5.85 s against 6.46 s, four alternated runs). Frozen, that
    heap is also left out of every later pass, in the worker and in each child it forks.
    """
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()
        gc.freeze()


def pytest_unconfigure() -> None:
    """The process exits without the cycle collector's passes over all that the tests left.

    CPython collects while it tears its modules down: in an xdist worker that is the whole
    heap of a few hundred tests, 1.6 s of CPU after its last test (test_api and test_tick
    alone: 1.63-1.68 s from the last exit handler to the end, 0.07 s frozen). The four
    workers end together, so on two cores the suite's last seconds went to it. What is
    frozen is never collected, and the process is ending.
    """
    gc.freeze()


PG_ADMIN_URL = os.environ.get("TICKWORK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def libpq_dsn(url: str | URL) -> str:
    """A SQLAlchemy URL of a PostgreSQL database as libpq (psycopg, psql) takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _admin_dsn() -> str:
    return libpq_dsn(PG_ADMIN_URL)


def _pg_reachable() -> str | None:
    """None when the server answers, else why not.

    A refused connection says so at once; a server busy with other suites' checkpoints
    gets half a minute, not the three seconds that failed 62 tests of a suite on a loaded
    machine.
    """
    try:
        with psycopg.connect(_admin_dsn(), connect_timeout=30):
            return None
    except psycopg.Error as exc:
        return str(exc).strip()


_SPARE_DATABASES: list[str] = []
"""Databases an earlier test of this process emptied, ready for the next one."""


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """An empty PostgreSQL database for the block: new, or one an earlier block emptied.

    Emptied, not dropped: PostgreSQL 15 ends every DROP DATABASE with an immediate
    checkpoint, which on this machine held the dropping test for one to seven seconds and
    stalled every other test's commits meanwhile. Emptying drops every schema the block
    made (procrastinate's objects and extensions included) and ends its sessions.
    """
    problem = _pg_reachable()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and PostgreSQL is unreachable at {PG_ADMIN_URL}: {problem}")
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL}: {problem}")
    if _SPARE_DATABASES:
        name = _SPARE_DATABASES.pop()
    else:
        name = f"tickwork_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(_admin_dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(PG_ADMIN_URL).set(drivername="postgresql+psycopg", database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        _empty_database(libpq_dsn(url))
        _SPARE_DATABASES.append(name)


def _empty_database(dsn: str) -> None:
    """End the database's other sessions, drop its schemas and give it an empty `public`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname <> 'information_schema' "
            "AND nspname NOT LIKE 'pg\\_%'"
        ).fetchall()
        for (schema,) in schemas:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.execute("CREATE SCHEMA public")


@pytest.fixture(autouse=True)
def _no_forked_command_outlives_its_test() -> Iterator[None]:
    from tests.commands import ForkedCommand

    yield
    ForkedCommand.end_leftovers()


@pytest.fixture(scope="session", autouse=True)
def _spare_databases_dropped() -> Iterator[None]:
    """The emptied databases leave with the session."""
    yield
    if _SPARE_DATABASES:
        with psycopg.connect(_admin_dsn(), autocommit=True) as conn:
            while _SPARE_DATABASES:
                conn.execute(f'DROP DATABASE IF EXISTS "{_SPARE_DATABASES.pop()}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_session_url() -> Iterator[str]:
    with fresh_pg_database() as url:
        migrate_store(url)
        yield url


def store_relations(conn: sa.Connection) -> tuple[list[str], list[str]]:
    """The store's tables and sequences in a PostgreSQL database, read from its catalog.

    Read, not listed: a table a migration adds is among them (day partitions are not).
    """
    rows = conn.execute(
        sa.text(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND NOT c.relispartition "
            "AND c.relkind IN ('r', 'p', 'S') AND c.relname <> 'alembic_version'"
        )
    ).all()
    tables = sorted(name for name, kind in rows if kind != "S")
    return tables, sorted(name for name, kind in rows if kind == "S")


def _emptied(url: str, truncate: bool = False) -> str:
    """`url`'s database with every table of the store empty and its sequences restarted.

    The tables are read from the catalog, so a table a migration adds is emptied too. The
    day partitions earlier tests made leave, but for those a migration makes (today's and
    the next days'): a test that archives, or counts what a run drops, finds only its own.
    """
    engine = create_store_engine(url)
    today = datetime.now(UTC).date()
    migrated = {f"{today + timedelta(days=n):%Y%m%d}" for n in range(AHEAD_DAYS + 1)}
    with engine.begin() as conn:
        days = conn.exec_driver_sql(
            "SELECT relname FROM pg_class WHERE relispartition AND relkind = 'r' "
            "AND relname ~ '_[0-9]{8}$'"
        ).scalars()
        for partition in [name for name in days if name[-8:] not in migrated]:
            conn.exec_driver_sql(f'DROP TABLE "{partition}"')
        tables, sequences = store_relations(conn)
        if truncate:
            conn.execute(sa.text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY"))
        else:
            for table in tables:
                conn.execute(sa.text(f"DELETE FROM {table}"))
            for sequence in sequences:
                conn.execute(sa.text(f"ALTER SEQUENCE {sequence} RESTART"))
    engine.dispose()
    return url


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
    return _emptied(request.getfixturevalue("pg_session_url"))


@pytest.fixture
def pg_store(pg_session_url: str) -> Iterator[SqlEventStore]:
    """A migrated, empty PostgreSQL store, for what only PostgreSQL can show."""
    opened = open_store(_emptied(pg_session_url))
    yield opened
    opened.close()


@pytest.fixture
def truncated_pg_url(pg_session_url: str) -> str:
    """The session's PostgreSQL database emptied without a dead row left in it."""
    return _emptied(pg_session_url, truncate=True)


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
