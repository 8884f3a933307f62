"""The event store: an append-only log in SQLite (embedded default) or PostgreSQL.

It owns the contract every backend keeps (`EventStore`, with the projections' tracking),
its one SQL implementation, the schema and its migrations, and the spool that holds
events while the store is out of reach. It is the only place with SQL on `events`; read
models keep their own tables in the same database, defined on `harness.store.schema`'s
metadata and written with `upsert`.
"""

from __future__ import annotations

from harness.config import Durability
from harness.contracts.records import NewEvent, StoredEvent
from harness.store.base import EventStore, Tracking
from harness.store.engine import conninfo, process_name, safe_url, split_password
from harness.store.heartbeats import Beat, Heartbeat, beats
from harness.store.migrate import current_revision
from harness.store.opening import migrate_store, open_store
from harness.store.rate_buckets import Call, Turn, block, release_tick, settle, take
from harness.store.records import (
    ANY,
    NO_STREAM,
    AppendResult,
    ConcurrencyError,
    EventData,
    EventIdConflictError,
    ExpectedVersion,
    SchemaError,
    StoreError,
    StoreUnavailableError,
    Window,
)
from harness.store.schema import HEAD_REVISION
from harness.store.scratch import scratch_sqlite
from harness.store.spool import Spool, append_or_spool
from harness.store.sql import SqlEventStore, add_sums, clear_tables, upsert
from harness.store.tick_rows import positions_kept

__all__ = [
    "ANY",
    "HEAD_REVISION",
    "NO_STREAM",
    "AppendResult",
    "Beat",
    "Call",
    "ConcurrencyError",
    "Durability",
    "EventData",
    "EventIdConflictError",
    "EventStore",
    "ExpectedVersion",
    "Heartbeat",
    "NewEvent",
    "SchemaError",
    "Spool",
    "SqlEventStore",
    "StoreError",
    "StoreUnavailableError",
    "StoredEvent",
    "Tracking",
    "Turn",
    "Window",
    "add_sums",
    "append_or_spool",
    "beats",
    "block",
    "clear_tables",
    "conninfo",
    "current_revision",
    "migrate_store",
    "open_store",
    "positions_kept",
    "process_name",
    "release_tick",
    "safe_url",
    "scratch_sqlite",
    "settle",
    "split_password",
    "take",
    "upsert",
]
