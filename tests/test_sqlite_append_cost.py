"""The SQLite append path stays cheap and right.

The version check must not grow with the stream (a long stream appends as cheaply), and
the cursor and function the writer keeps follow its connection.
"""

from __future__ import annotations

import sqlite3
from uuid import uuid4

from harness.store import ANY, NewEvent, open_store
from harness.store.engine import SQLITE_CACHE_KIB, SQLITE_READ_CACHE_KIB
from harness.store.writer import _SQLITE_FIRST, SQLITE_LANDED


def _steps(connection: sqlite3.Connection, stream_id: str, expected: int) -> int:
    """SQLite VM instructions the checked first insert of a batch runs; rolled back.

    Counted rather than timed: the count does not depend on how loaded the machine is.
    """
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    landed: list[int] = []

    def land(position: int) -> int:  # as the writer's: records the position it was given
        landed.append(position)
        return position

    connection.create_function(SQLITE_LANDED, 1, land)
    connection.set_progress_handler(count, 1)
    connection.execute("BEGIN IMMEDIATE")
    stamp = "2026-11-30 00:00:00.000000"
    row = (uuid4().hex, stream_id, expected, "T", 1, "{}", "{}", stamp)
    connection.execute(_SQLITE_FIRST, (*row, False, None))  # not a packed tick's stream
    connection.set_progress_handler(None, 0)
    connection.execute("ROLLBACK")
    assert landed == [expected + 1]
    return steps


def test_version_check_reads_the_index_end_not_the_stream(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    for _ in range(20):
        store.append("long", [NewEvent(uuid4(), "T", 1, {}) for _ in range(100)], ANY)
    store.append("short", [NewEvent(uuid4(), "T", 1, {})], ANY)
    store.close()
    connection = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        short, long = _steps(connection, "short", 1), _steps(connection, "long", 2000)
    finally:
        connection.close()
    # A scan of the stream's 2,000 index entries would cost thousands of steps more.
    assert long < short + 100, (short, long)


def test_a_writer_connection_opened_again_reports_where_appends_land(sqlite_url: str) -> None:
    """The writer keeps a cursor and registers its function per connection: a new one gets both."""
    store = open_store(sqlite_url)
    try:
        assert store.append("s", [NewEvent(uuid4(), "T", 1, {})], ANY).stream_version == 1
        store._writer.close()  # the next append opens a fresh connection
        alone = store.append("s", [NewEvent(uuid4(), "T", 1, {})], 1)
        batch = store.append("s", [NewEvent(uuid4(), "T", 1, {}) for _ in range(3)], ANY)
        assert (alone.positions, alone.stream_version) == ((2,), 2)
        assert (batch.positions, batch.stream_version) == ((3, 4, 5), 5)
    finally:
        store.close()


def test_only_the_writer_connection_keeps_a_large_page_cache(sqlite_url: str) -> None:
    """Pooled connections fill their cache and keep it while pooled: small there.

    At 64 MiB a connection, `tickwork run`'s pool held 75 MiB of a big store's pages.
    """
    store = open_store(sqlite_url)
    try:
        store.append("s", [NewEvent(uuid4(), "T", 1, {})], ANY)
        with store.read_transaction() as conn:
            read = conn.exec_driver_sql("PRAGMA cache_size").scalar_one()
        written = store._writer._connection.execute("PRAGMA cache_size").fetchone()[0]
    finally:
        store.close()
    assert (read, written) == (-SQLITE_READ_CACHE_KIB, -SQLITE_CACHE_KIB)
    assert SQLITE_READ_CACHE_KIB < SQLITE_CACHE_KIB
