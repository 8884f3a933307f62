"""Opening a store: an embedded SQLite store is made or migrated, a shared one must be at head.

Kept apart from the package front so that `harness.store` only names things; the spool
is ingested here because a store that opens is the first chance to hand it its events.
"""

from __future__ import annotations

import contextlib
import typing
from datetime import UTC, datetime

from harness.contracts import Durability
from harness.store import partitions
from harness.store.engine import (
    DEFAULT_CONNECTIONS,
    create_store_engine,
    normalize_url,
    safe_url,
    sqlite_path,
)
from harness.store.migrate import current_revision, needs_upgrade, upgrade
from harness.store.records import SchemaError
from harness.store.schema import HEAD_REVISION
from harness.store.scratch import new_sqlite
from harness.store.spool import Spool
from harness.store.sql import SqlEventStore, translate_errors
from harness.store.writer import Clock, utc_now

if typing.TYPE_CHECKING:
    from harness.config import Settings


def open_store(
    url: str,
    *,
    durability: Durability = "process",
    spool: Spool | None = None,
    clock: Clock = utc_now,
    connections: int = DEFAULT_CONNECTIONS,
    checked: bool = False,
) -> SqlEventStore:
    """Open the store, making or migrating an embedded SQLite store, then ingest the spool.

    A new embedded store is a copy of one migrated once per schema (`harness.store.scratch`).

    `clock` stamps what it appends (a soak run's simulated month); `connections` sizes a
    PostgreSQL pool (`harness.store.sizing`).

    A PostgreSQL store is shared by several hosts and is migrated only on purpose
    (`tickwork migrate`): opening one whose schema lags raises SchemaError, unless
    `checked` says the process that handed over the URL opened it (a tick's launcher):
    the check cost each tick four round trips, for the revision its launcher had read.
    """
    path = sqlite_path(normalize_url(url))
    if path is not None and not path.exists():
        with contextlib.suppress(OSError):  # the engine says why the file cannot be made
            new_sqlite(path)
    engine = create_store_engine(url, durability=durability, connections=connections)
    shared = engine.dialect.name != "sqlite"
    with translate_errors():
        revision = HEAD_REVISION if checked and shared else current_revision(engine)
        if revision != HEAD_REVISION:
            if shared:
                engine.dispose()
                raise SchemaError(
                    f"store {safe_url(url)} is at schema revision {revision or 'none'}, "
                    f"this tickwork needs {HEAD_REVISION}: run `tickwork migrate`"
                )
            upgrade(engine)
    store = SqlEventStore(engine, clock)
    if spool is not None and spool.files():
        spool.ingest(store)
    return store


def configured_store(settings: Settings, connections: int | None = None) -> SqlEventStore:
    """The store `[store]` names, with the spool `[paths]` names: what every owner opens.

    `connections`: the pool the process needs (`harness.store.sizing`); by default
    `[store] connections`, or what a process doing one thing at a time needs.
    """
    return open_store(
        settings.store.url,
        durability=settings.store.durability,
        spool=Spool(settings.paths.spool),
        connections=connections or settings.store.connections or DEFAULT_CONNECTIONS,
    )


def store_revision(url: str) -> str | None:
    """The schema revision a store is at (None: no tickwork schema), changing nothing.

    A SQLite file that does not exist is not created: it has no schema.

    Raises:
        StoreError: the store cannot be reached.
    """
    path = sqlite_path(normalize_url(url))
    if path is not None and not path.exists():
        return None
    engine = create_store_engine(url)
    try:
        with translate_errors():
            return current_revision(engine)
    finally:
        engine.dispose()


def migrate_store(url: str) -> str | None:
    """Apply pending migrations to any store; returns the revision it was at before."""
    engine = create_store_engine(url)
    try:
        with translate_errors():
            before = current_revision(engine)
            if needs_upgrade(engine):
                upgrade(engine)
            partitions.prepare_partitions(engine, datetime.now(UTC).date())
            return before
    finally:
        engine.dispose()
