"""A PostgreSQL append held open after it took its position, released when the test says.

The test's own session holds an advisory lock; a trigger made for the test (BEFORE INSERT
on events, for the stream `late` only) waits for that lock inside the appending
transaction. The late append then holds its transaction id, so its position, and cannot
commit: exactly a writer that commits after others that started later. No sleeps: the
test waits until the append is seen waiting, and lets it go by releasing the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import uuid4

import sqlalchemy as sa

from harness.store import ANY, NewEvent, SqlEventStore
from harness.store.records import AppendResult
from tests.waiting import wait_until

LATE_STREAM = "late"
LOCK_KEY = 0x6C617465  # "late"

_TRIGGER = f"""
CREATE FUNCTION test_wait_for_late() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK_KEY});
    RETURN NEW;
END
$$;
CREATE TRIGGER test_late BEFORE INSERT ON events FOR EACH ROW
    WHEN (NEW.stream_id = '{LATE_STREAM}') EXECUTE FUNCTION test_wait_for_late();
"""
_WAITING = sa.text(
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :key AND NOT granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
"""Advisory locks are the database's, but `pg_locks` lists the whole cluster's: a late
append of another worker's (or another suite's) test counted, and the block began before
this one's append held its transaction id."""


@contextmanager
def late_append(writer: SqlEventStore, data: dict[str, object]) -> Iterator[list[AppendResult]]:
    """Start `writer` appending one event to `late`; inside the block it waits to commit.

    On leaving, the lock is released and the append waited for; the list then holds its
    result. `writer` is used by the append's thread alone until then.
    """
    event = NewEvent(uuid4(), "Thing", 1, data)
    done: list[AppendResult] = []
    with writer.engine.connect() as holder:
        holder.exec_driver_sql(_TRIGGER)
        holder.execute(sa.select(sa.func.pg_advisory_lock(LOCK_KEY)))
        holder.commit()
        thread = threading.Thread(
            target=lambda: done.append(writer.append(LATE_STREAM, [event], ANY))
        )
        try:
            thread.start()
            wait_until(
                lambda: holder.execute(_WAITING, {"key": LOCK_KEY}).scalar_one() > 0,
                "the late append to wait for the test's lock",
                interval=0.01,
            )
            holder.commit()
            yield done
        finally:
            holder.execute(sa.select(sa.func.pg_advisory_unlock(LOCK_KEY)))
            thread.join(60)
            holder.exec_driver_sql("DROP TRIGGER test_late ON events")
            holder.exec_driver_sql("DROP FUNCTION test_wait_for_late()")
            holder.commit()
    assert done, "the late append did not return"
