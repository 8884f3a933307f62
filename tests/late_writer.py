"""PostgreSQL appends held open inside their transactions, released when the test says.

The test's own session holds an advisory lock; a trigger made for the test (BEFORE INSERT
on events, for one stream only) waits for that lock inside the appending transaction. The
held append then keeps what it took before (its transaction id, so its position; the
index entries and locks of what it inserted already) and cannot commit: exactly a writer
that commits after others that started later, or one caught between two of its streams.
No sleeps: the test waits until the append is seen waiting, and lets it go by releasing
the lock.
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

_WAITING = sa.text(
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :key AND NOT granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
"""Advisory locks are the database's, but `pg_locks` lists the whole cluster's: a late
append of another worker's (or another suite's) test counted, and the block began before
this one's append held its transaction id."""


class HeldInserts:
    """The test's end of the lock that inserts of one stream wait for."""

    def __init__(self, holder: sa.Connection) -> None:
        self.holder = holder
        self.held = True

    def waiting(self) -> int:
        """How many transactions wait in the trigger now."""
        count = int(self.holder.execute(_WAITING, {"key": LOCK_KEY}).scalar_one())
        self.holder.commit()
        return count

    def release(self) -> None:
        """Let the waiting inserts (and any later one) go on."""
        if self.held:
            self.holder.execute(sa.select(sa.func.pg_advisory_unlock(LOCK_KEY)))
            self.holder.commit()
            self.held = False


@contextmanager
def held_inserts(engine: sa.Engine, stream: str) -> Iterator[HeldInserts]:
    """Inside the block, every insert of an event of `stream` waits until `release()`.

    The block releases them when it ends, then drops the trigger: end the appending threads
    between the two (release, then join), as a trigger is dropped only once no transaction
    runs it.
    """
    with engine.connect() as holder:
        holder.exec_driver_sql(
            "CREATE FUNCTION test_wait_for_late() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN PERFORM pg_advisory_xact_lock({LOCK_KEY}); RETURN NEW; END $$"
        )
        holder.exec_driver_sql(
            "CREATE TRIGGER test_late BEFORE INSERT ON events FOR EACH ROW "
            f"WHEN (NEW.stream_id = '{stream}') EXECUTE FUNCTION test_wait_for_late()"
        )
        holder.execute(sa.select(sa.func.pg_advisory_lock(LOCK_KEY)))
        holder.commit()
        held = HeldInserts(holder)
        try:
            yield held
        finally:
            held.release()
            holder.exec_driver_sql("DROP TRIGGER test_late ON events")
            holder.exec_driver_sql("DROP FUNCTION test_wait_for_late()")
            holder.commit()


@contextmanager
def late_append(writer: SqlEventStore, data: dict[str, object]) -> Iterator[list[AppendResult]]:
    """Start `writer` appending one event to `late`; inside the block it waits to commit.

    On leaving, the lock is released and the append waited for; the list then holds its
    result. `writer` is used by the append's thread alone until then.
    """
    event = NewEvent(uuid4(), "Thing", 1, data)
    done: list[AppendResult] = []
    with held_inserts(writer.engine, LATE_STREAM) as held:
        thread = threading.Thread(
            target=lambda: done.append(writer.append(LATE_STREAM, [event], ANY))
        )
        try:
            thread.start()
            wait_until(
                lambda: held.waiting() > 0,
                "the late append to wait for the test's lock",
                interval=0.01,
            )
            yield done
        finally:
            held.release()
            thread.join(60)
    assert done, "the late append did not return"
