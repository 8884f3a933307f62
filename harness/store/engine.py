"""Engines for the two backends, with the connection settings the store's guarantees need.

SQLite: WAL so readers never block the writer, a busy timeout so concurrent processes wait
instead of failing with "database is locked", and an explicit `BEGIN IMMEDIATE` for write
transactions so a read-then-write never deadlocks on a lock upgrade. PostgreSQL: psycopg 3.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random

from harness.contracts import Durability
from harness.files import make_private_folder
from harness.store.records import StoreUnavailableError

BEGIN_MODE = "tickwork_sqlite_begin"
"""Execution option naming how a SQLite transaction begins (DEFERRED or IMMEDIATE)."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_CACHE_KIB = 65_536
"""The writer's page cache (see `writer.Writer._open`); set on its own connection only."""
SQLITE_PAGE_BYTES = 16_384
"""A new store's page size. A packed tick's row is about 2.2 KB, and SQLite keeps a row
whole in one page: at the default 4,096 bytes two such rows never share a page, so each
took a page of its own and `tick_rows` held 4.1 KB a tick for 2.2 KB of rows (a 10M-event
store, `dbstat`). At 16,384 seven share one. A store made before keeps its page size
(only a VACUUM changes it)."""
SQLITE_READ_CACHE_KIB = 2_048
"""Every other connection's page cache: about SQLite's default. A pooled connection's
cache fills as it reads and stays filled while the pool keeps it, and the pool keeps
several: at 64 MiB each, `tickwork run` on a 1M-event store held 75 MiB of SQLite pages
at its peak, and glibc 93 MiB more that closed connections' caches had freed (274 MiB
RSS); at 8 MiB each, 48 MiB (193 MiB RSS); at 2 MiB, 16 MiB (139 MiB RSS), measured with
`ops/bench/run_memory.py`. Reads miss into the operating system's file cache instead."""
SQLITE_WAL_AUTOCHECKPOINT_PAGES = {"process": 10_000, "power": 1_000}
SQLITE_SYNCHRONOUS = {"process": "NORMAL", "power": "FULL"}
DURABILITY = "tickwork_durability"
"""Engine-wide execution option read by the writer (PostgreSQL's synchronous_commit)."""
DEFAULT_CONNECTIONS = 6
"""A PostgreSQL pool's size for a process that does one thing at a time (a command, a tick)."""
OVERFLOW = 2
"""Connections a PostgreSQL pool opens beyond its size, and closes once given back: for a
thread that reads beside its own open write transaction (archiving), the one case where a
thread holds two."""
POOL_WAIT_SECONDS = 10.0
"""How long a thread waits for a pooled PostgreSQL connection before the store counts as
out for it. The pool is sized so that none waits (`harness.store.sizing`): a wait this
long means the server or the sizing is wrong, and the caller rides it out as an outage."""


DRIVER_PRELOAD = "postgresql"
"""The preload (`harness.execution.launchers.preloads_of`) of a service on PostgreSQL."""


def is_postgresql(url: str) -> bool:
    """Whether a store URL names PostgreSQL, whatever driver it spells."""
    return normalize_url(url).get_backend_name() == "postgresql"


def load_postgresql_driver() -> None:
    """Import psycopg and SQLAlchemy's dialect of it, connecting nowhere.

    A fork server does it before it forks: every tick on a PostgreSQL store opens one,
    and each tick process imported them anew, 70 ms of CPU of the 90 its store's opening
    and first read took (`ops/bench/load_soak.py`).
    """
    sa.create_engine(URL.create("postgresql+psycopg")).dispose()


def process_name(host: str, pid: int) -> str:
    """The `application_name` of a tickwork process's PostgreSQL connections.

    `pg_stat_activity` then tells which process a connection serves, and whether a process
    of another host (a scheduler whose claims another may take on) still has one.
    PostgreSQL keeps 63 bytes of it.
    """
    return f"tickwork {pid}@{host}".encode()[:63].decode(errors="ignore")


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def normalize_url(url: str) -> URL:
    """Parse a store URL; a bare `postgresql://` means psycopg 3, the driver we ship."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"store url {safe_url(url)!r}: only sqlite and postgresql are supported")
    return parsed


def conninfo(url: str) -> str:
    """The store's URL as a libpq connection string, for procrastinate's own connections."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def safe_url(url: str | URL) -> str:
    """The URL with any password masked, for logs and status output."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable store url>"


def split_password(url: str) -> tuple[str, str | None]:
    """The URL without its password, and the password (None when the URL holds none).

    A tick's payload carries the URL without it, and its worker gets the password as
    `PGPASSWORD` in its environment, which libpq reads: the payload is handed to
    launchers, logs and tests, and no copy of it should hold the password.
    """
    parsed = make_url(url)
    if parsed.password is None:
        return url, None
    bare = parsed._replace(password=None)  # `set` reads None as "keep it"
    return bare.render_as_string(hide_password=False), str(parsed.password)


def sqlite_path(url: URL) -> Path | None:
    """The database file of a SQLite URL, or None for an in-memory database."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def create_store_engine(
    url: str, *, durability: Durability = "process", connections: int = DEFAULT_CONNECTIONS
) -> Engine:
    """An engine configured for the event store's concurrency model.

    `connections`: the PostgreSQL pool's size, what the process does at once
    (`harness.store.sizing`); a checkout waits POOL_WAIT_SECONDS at most, then the store
    reports itself unavailable (`translate_errors`), as it does when the server is out.
    """
    parsed = normalize_url(url)
    common: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads}
    if parsed.get_backend_name() == "postgresql":
        name = process_name(socket.gethostname(), os.getpid())
        engine = sa.create_engine(
            parsed,
            pool_size=connections,
            max_overflow=OVERFLOW,
            pool_timeout=POOL_WAIT_SECONDS,
            connect_args={"application_name": name},
            # No column is an hstore: its type lookup cost each engine's first connection
            # three round trips (a savepoint, the lookup, its release), each tick's its own.
            use_native_hstore=False,
            **common,
        )
        return engine.execution_options(**{DURABILITY: durability})

    path = sqlite_path(parsed)
    created = False
    if path is not None:
        try:
            make_private_folder(path.parent)
            # SQLite gives its WAL and SHM files the mode of the database file. Only a
            # file that does not exist yet is opened here: closing a descriptor of a file
            # drops every POSIX lock the process holds on it, the locks of SQLite
            # connections already open in this process included, and another process then
            # checkpoints and resets the WAL under them (stale reads, a malformed file).
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            created = True
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreUnavailableError(
                f"cannot create the folder of SQLite store {path}: {exc.strerror}"
            ) from exc
    engine = sa.create_engine(
        parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **common
    )

    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite's own transaction handling would BEGIN deferred behind our back.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        nonlocal created
        if created:
            created = False  # later connections find tables: setting it again would lock
            # Archiving deletes old events: with incremental vacuum their pages can go back
            # to the file system. Both take effect only before the first table is made (a
            # store made earlier is converted once by `retention.reclaim_space`).
            cursor.execute(f"PRAGMA page_size = {SQLITE_PAGE_BYTES}")
            cursor.execute("PRAGMA auto_vacuum = INCREMENTAL")
        _set_wal(cursor)
        cursor.execute(f"PRAGMA synchronous = {SQLITE_SYNCHRONOUS[durability]}")
        # Reads go through the operating system's file cache; the writer's connection
        # takes a larger cache of its own (`SQLITE_CACHE_KIB`, `writer.Writer._open`).
        cursor.execute(f"PRAGMA cache_size = -{SQLITE_READ_CACHE_KIB}")
        # A batch of 100 writes about 23 pages to the WAL (127 with random ids, a leaf of
        # the id index per event), and at the default checkpoint every 1,000 pages the
        # appending connection copies them into the database every few dozen batches. At
        # `process` a longer WAL copies each hot page once per checkpoint instead: batches
        # of 100 append 10-15% faster (measured again with time-ordered ids), for a WAL
        # file of up to 40 MiB. At `power` every commit fsyncs the WAL, and while a longer
        # WAL grows each fsync also writes the file's new size: single appends were 20%
        # slower, and batches no faster, so it keeps the default.
        pages = SQLITE_WAL_AUTOCHECKPOINT_PAGES[durability]
        cursor.execute(f"PRAGMA wal_autocheckpoint = {pages}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        mode = connection.get_execution_options().get(BEGIN_MODE, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def stored_utc(at: datetime) -> datetime:
    """A time read back through SQLAlchemy, made aware: SQLite drops the zone (stored UTC)."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _locked(exc: BaseException) -> bool:
    return "database is locked" in str(exc)


def _set_wal(cursor: Any) -> None:
    """Put the file in WAL mode, waiting out a process that is opening or closing it.

    A connection that finds the WAL's index being rebuilt or taken down by another
    process's first or last connection gets "database is locked" at once, without the
    busy handler: four processes opening one store together failed that way on a
    loaded machine. So the pragma is retried, for as long as the busy timeout.
    """
    for attempt in Retrying(
        retry=retry_if_exception(_locked),
        stop=stop_after_delay(SQLITE_BUSY_TIMEOUT_MS / 1000),
        wait=wait_random(0.01, 0.1),
        reraise=True,
    ):
        with attempt:
            cursor.execute("PRAGMA journal_mode = WAL")
