"""Many processes append at once; a concurrent reader must never skip a committed event."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest
import sqlalchemy as sa

from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling import waves
from harness.scheduling.budget import Budgets
from harness.scheduling.waves import SlotClaim
from harness.store import (
    ANY,
    NO_STREAM,
    ConcurrencyError,
    NewEvent,
    SqlEventStore,
    StoreError,
    StoreUnavailableError,
    migrate_store,
    open_store,
)
from harness.store.partitions import delete_positions, ensure_days
from harness.store.schema import events
from harness.store.writer import COLLISION_RETRIES, WRITER_NAME
from tests.conftest import fresh_pg_database, libpq_dsn
from tests.late_writer import held_inserts, late_append
from tests.procs import CONTEXT, append_many, claim, claim_wave, gather, racing
from tests.tick_support import make_settings
from tests.waiting import wait_until

WRITERS = 4
CONNECT_AND_CLOSE = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
    "c.execute('SELECT COUNT(*) FROM events').fetchall(); c.close()"
)
"""Another process's connection that reads and closes: the last one out deletes the WAL."""
PER_WRITER = 400


def test_concurrent_writers_and_a_polling_reader_see_every_event(store_url: str) -> None:
    reader = open_store(store_url)
    seen: list[int] = []
    writers = [(store_url, w, PER_WRITER) for w in range(WRITERS)]
    with racing(append_many, *writers) as processes:
        while True:
            running = any(process.is_alive() for process in processes)
            batch = reader.read_all(seen[-1] if seen else 0, limit=500)
            seen.extend(event.global_position for event in batch)
            if not batch and not running:
                break

    everything = reader.read_all(0, limit=100_000)
    reader.close()
    assert len(everything) == WRITERS * PER_WRITER
    assert seen == [event.global_position for event in everything], "the reader skipped events"

    per_stream: dict[str, list[int]] = defaultdict(list)
    for event in everything:
        per_stream[event.stream_id].append(event.stream_position)
    for positions in per_stream.values():
        assert positions == list(range(1, len(positions) + 1))


def test_exactly_one_process_creates_a_stream(store_url: str) -> None:
    results = CONTEXT.Queue()
    with racing(claim, *[(store_url, "slot-min-0900", results)] * 6) as processes:
        outcomes = sorted(gather(results, processes, 6))
    assert outcomes == ["lost"] * 5 + ["won"]
    store = open_store(store_url)
    assert len(store.read_stream("slot-min-0900")) == 1
    store.close()


@pytest.mark.long
def test_replicas_claiming_a_wave_together_split_it_without_overlap(store_url: str) -> None:
    results = CONTEXT.Queue()
    streams = [f"tick-l{i:03d}-0900" for i in range(300)]
    waves = [streams, streams[::-1], streams[100:] + streams[:100]]
    with racing(claim_wave, *[(store_url, wave, results) for wave in waves]) as processes:
        won = gather(results, processes, len(waves))
    assert sorted(s for claimed in won for s in claimed) == sorted(streams)
    store = open_store(store_url)
    assert all(len(events) == 1 for events in store.read_streams(streams).values())
    store.close()


def test_a_sqlite_reader_resuming_while_a_writer_commits_late_still_gets_the_late_event(
    sqlite_url: str,
) -> None:
    """A writer holds its append open; others queue behind its lock; the reader resumes."""
    migrate_store(sqlite_url)
    reader = open_store(sqlite_url)
    reader.append("early", [NewEvent(uuid4(), "Load", 1, {"n": 0})], NO_STREAM)
    (first,) = reader.read_all()
    others = [open_store(sqlite_url) for _ in range(3)]
    late = {
        "event_id": uuid4(),
        "stream_id": "late",
        "stream_position": 1,
        "type": "Load",
        "version": 1,
        "data": {"n": "late"},
        "metadata": {},
        "recorded_at": datetime.now(UTC),
    }
    threads = [
        threading.Thread(
            target=other.append, args=(f"other-{i}", [NewEvent(uuid4(), "Load", 1, {"n": i})])
        )
        for i, other in enumerate(others)
    ]
    with reader.write_transaction() as writer:  # BEGIN IMMEDIATE: the writer's lock
        writer.execute(events.insert().values(late))
        for thread in threads:
            thread.start()
        in_between = reader.read_all(first.global_position)
    for thread in threads:
        thread.join(60)
    rest = reader.read_all(first.global_position)
    for store in (reader, *others):
        store.close()

    assert in_between == []
    assert [e.global_position for e in rest] == list(range(2, 2 + 1 + len(others)))
    assert rest[0].data == {"n": "late"}, "the late commit holds the position after the first"


def test_no_reader_passes_a_postgres_append_that_commits_late(
    pg_store: SqlEventStore, pg_session_url: str
) -> None:
    """The late append took its position first; a later one commits before it."""
    reader, late_writer = pg_store, open_store(pg_session_url)
    projector = projector_for(reader, PriceBook())
    (first,) = reader.append("early", [NewEvent(uuid4(), "Load", 1, {"n": 0})]).positions
    with late_append(late_writer, {"n": "late"}) as landed:
        (newer,) = reader.append("newer", [NewEvent(uuid4(), "Load", 1, {"n": 1})]).positions
        assert reader.read_stream("newer"), "the newer append is committed"
        assert [e.global_position for e in reader.read_all()] == [first]
        assert reader.read_all(first) == [] and reader.read_last(5)[0].global_position == first
        assert reader.last_position() == first
        assert not reader.wait_settled(newer, timeout=0.05)
        projector.catch_up()
        assert set(projector.checkpoints().values()) == {first}
    (late,) = landed[0].positions
    assert first < late < newer, "positions follow the transactions, not their commits"
    rest = reader.read_all(first)
    assert [(e.global_position, e.data["n"]) for e in rest] == [(late, "late"), (newer, 1)]
    assert reader.last_position() == newer and reader.wait_settled(newer, timeout=0)
    projector.catch_up()
    assert set(projector.checkpoints().values()) == {newer}
    late_writer.close()


def test_an_unrelated_open_transaction_hides_no_fresh_append(pg_store: SqlEventStore) -> None:
    """Only writers hold readers back: a session of any other kind may keep an xid open."""
    with pg_store.engine.connect() as other, fresh_pg_database() as elsewhere:
        other.exec_driver_sql("CREATE TEMPORARY TABLE scratch (n int)")
        other.exec_driver_sql("INSERT INTO scratch VALUES (1)")  # an xid, left uncommitted
        neighbour = sa.create_engine(elsewhere)
        with neighbour.connect() as far:  # another database of the cluster, named as a writer
            far.exec_driver_sql("SET application_name = 'tickwork-writer'")
            far.exec_driver_sql("CREATE TABLE scratch (n int)")
            far.exec_driver_sql("INSERT INTO scratch VALUES (1)")
            (position,) = pg_store.append("fresh", [NewEvent(uuid4(), "Load", 1, {})]).positions
            assert [e.global_position for e in pg_store.read_all()] == [position]
            assert pg_store.last_position() == position
            far.rollback()
        neighbour.dispose()
        other.rollback()


def test_an_append_is_in_the_read_after_it_while_another_database_commits_in_a_loop(
    pg_store: SqlEventStore,
) -> None:
    """A transaction that ends while the horizon looks at the sessions hides nothing.

    Three sessions of another database commit one-row inserts as fast as the server runs
    them, so some end between a reader's snapshot and its look at the sessions (migration
    0034: before it, about one read in ten here missed the append just made).
    """
    missed = []
    with fresh_pg_database() as elsewhere, committing_in_a_loop(libpq_dsn(elsewhere), 3):
        for n in range(500):
            (position,) = pg_store.append(f"s{n % 9}", [NewEvent(uuid4(), "Load", 1, {})]).positions
            if pg_store.last_position() < position:
                missed.append(position)
    assert missed == []


CHURN = "DO $$ BEGIN LOOP INSERT INTO scratch VALUES (1); COMMIT; END LOOP; END $$"


@contextlib.contextmanager
def committing_in_a_loop(dsn: str, sessions: int) -> Iterator[None]:
    """`sessions` sessions of `dsn`'s database committing one-row inserts until the block ends."""
    churners = [psycopg.connect(dsn, autocommit=True) for _ in range(sessions)]
    churners[0].execute("CREATE TABLE scratch (n int)")

    def churn(conn: psycopg.Connection) -> None:
        with contextlib.suppress(psycopg.errors.QueryCanceled):
            conn.execute(CHURN)

    threads = [threading.Thread(target=churn, args=(conn,)) for conn in churners]
    try:
        with psycopg.connect(dsn, autocommit=True) as counting:
            for thread in threads:
                thread.start()
            wait_until(
                lambda: counting.execute("SELECT count(*) FROM scratch").fetchone() >= (300,),
                "the sessions committing",
            )
        yield
    finally:
        for conn in churners:
            conn.cancel_safe()
        for thread in threads:
            thread.join()
        for conn in churners:
            conn.close()


HORIZON_FROM = sa.text("SELECT tickwork_events_horizon(CAST(:seen AS pg_snapshot))")
NO_CAP = 2**63 - 1


def test_the_horizon_looks_again_at_a_transaction_ended_since_the_readers_snapshot(
    pg_store: SqlEventStore, pg_session_url: str
) -> None:
    """An ended transaction holds readers back only if it wrote events here.

    Its session cannot tell any more what it was. Each snapshot is taken after a later
    append committed, so the transaction is in its in-progress list (a snapshot lists only
    ids below the newest one completed).
    """
    with pg_store.engine.connect() as other, pg_store.engine.connect() as reader:
        other.exec_driver_sql("CREATE TEMPORARY TABLE scratch (n int)")
        other.commit()
        other.exec_driver_sql("INSERT INTO scratch VALUES (1)")
        xid = other.exec_driver_sql("SELECT pg_current_xact_id()::text").scalar_one()
        pg_store.append("after", [NewEvent(uuid4(), "Load", 1, {})])
        seen = reader.exec_driver_sql("SELECT pg_current_snapshot()::text").scalar_one()
        reader.commit()
        assert xid in seen.split(":")[2].split(","), "the snapshot shows it in progress"
        other.commit()  # ended, and wrote no event
        assert reader.execute(HORIZON_FROM, {"seen": seen}).scalar_one() == NO_CAP

    late_writer = open_store(pg_session_url)
    with pg_store.engine.connect() as reader:
        with late_append(late_writer, {"n": "late"}) as landed:
            pg_store.append("after", [NewEvent(uuid4(), "Load", 1, {})])
            seen = reader.exec_driver_sql("SELECT pg_current_snapshot()::text").scalar_one()
            reader.commit()
        (late,) = landed[0].positions  # committed after `seen`, which does not show it
        assert reader.execute(HORIZON_FROM, {"seen": seen}).scalar_one() == late >> 20 << 20
    late_writer.close()


def test_appends_racing_on_one_stream_with_any_all_land_in_order(store_url: str) -> None:
    """Without a lock two appends may read the same version: the loser goes again."""
    stores = [open_store(store_url) for _ in range(WRITERS)]

    def append_all(store: SqlEventStore, writer: int) -> None:
        for i in range(50):
            store.append("hot", [NewEvent(uuid4(), "Load", 1, {"w": writer, "i": i})], ANY)

    threads = [threading.Thread(target=append_all, args=(s, w)) for w, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    hot = stores[0].read_stream("hot")
    assert [e.stream_position for e in hot] == list(range(1, WRITERS * 50 + 1))
    positions = [e.global_position for e in hot]
    assert positions == sorted(positions), "stream order is global order"
    for writer in range(WRITERS):
        assert [e.data["i"] for e in hot if e.data["w"] == writer] == list(range(50))
    for store in stores:
        store.close()


def test_two_replicas_deciding_one_levels_budget_at_once_cannot_both_miss_each_other(
    store_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, daily_token_budget=15_000, reserve_tokens=10_000)
    prices = PriceBook()
    replicas = [open_store(store_url) for _ in range(2)]
    budgets = [Budgets(store, projector_for(store, prices), prices, settings) for store in replicas]
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    claims = [SlotClaim(f"min-replica-{n}", "min", slot, reserved_tokens=10_000) for n in range(2)]
    both_decided = threading.Barrier(2)
    verdicts: dict[str, bool] = {}

    def replica(n: int) -> None:
        assert budgets[n].try_reserve("min", claims[n].tick_id).allowed
        both_decided.wait(30)  # each decided before the other claimed: neither saw the other
        assert waves.claim_wave(replicas[n], settings, [claims[n]]) == {claims[n].tick_id}
        verdicts[claims[n].tick_id] = budgets[n].confirm("min", claims[n].tick_id).allowed

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    first = min(
        claims, key=lambda c: replicas[0].read_stream(f"tick-{c.tick_id}")[0].global_position
    )
    assert verdicts == {c.tick_id: c is first for c in claims}
    for store in replicas:
        store.close()


def test_opening_a_sqlite_store_again_keeps_the_locks_of_its_open_connections(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A second store on the file must not drop the POSIX locks of the first's connections.

    Closing any descriptor of a file drops them all; another process then takes itself for
    the last connection and checkpoints and deletes the WAL under the first (stale reads,
    then a malformed file).
    """
    migrate_store(sqlite_url)
    first = open_store(sqlite_url)
    first.append("s", [NewEvent(uuid4(), "Thing", 1, {})], ANY)  # its writer stays connected
    open_store(sqlite_url).close()
    database = next(tmp_path.glob("*.db"))
    subprocess.run([sys.executable, "-c", CONNECT_AND_CLOSE, str(database)], check=True, timeout=30)
    assert database.with_name(database.name + "-wal").exists(), "another process reset the WAL"
    assert first.last_position() == 1
    first.close()


FIRST_POSITION = "(pg_current_xact_id()::text::bigint << 20) + 1"
"""The position a writer gives its transaction's first event (migration 0005)."""


@pytest.mark.parametrize("retries", [COLLISION_RETRIES, 0], ids=["retried", "no retry left"])
def test_a_tick_stream_begun_on_either_side_of_midnight_is_begun_once(
    pg_session_url: str, retries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick stream is begun in one day's partition, whichever writer's clock says what.

    A writer whose clock says the next day, starting a stream another began a moment
    before midnight (not committed yet), waits for it on `tick_streams`' key, then finds
    it begun, in the earlier day. With no retry left, its wave is refused as one that lost
    a race, to be claimed again, not as one reusing an event id, as it was reported before.
    """
    monkeypatch.setattr("harness.store.writer.COLLISION_RETRIES", retries)
    midnight = datetime(2026, 6, 1, tzinfo=UTC)
    day = (midnight - timedelta(seconds=1)).date()
    after = open_store(pg_session_url, clock=lambda: midnight)
    ensure_days(after.engine, [day, midnight.date()])
    stream = f"tick-{uuid4().hex}"
    with after.engine.connect() as first:  # the first writer, its append not committed yet
        first.exec_driver_sql(
            "WITH started AS (INSERT INTO tick_streams VALUES (%s, %s)), "
            f"ids AS (INSERT INTO event_ids VALUES (%s, {FIRST_POSITION})) "
            f"INSERT INTO events VALUES ({FIRST_POSITION}, %s, %s, 1, "
            "'TickScheduled', 1, '{}', '{}', %s, %s)",
            (stream, day, (first_id := uuid4()), first_id, stream, midnight, day),
        )
        created: list[set[str] | StoreError] = []

        def begin_it_too() -> None:
            try:
                created.append(
                    after.create_streams({stream: [NewEvent(uuid4(), "TickScheduled", 1, {})]})
                )
            except StoreError as exc:
                created.append(exc)

        second = threading.Thread(target=begin_it_too)
        second.start()
        wait_until(lambda: _writers_waiting(after), "the second writer to wait for the first")
        first.commit()
        second.join(60)
    if retries:
        assert created == [set()], "the stream was begun already"
    else:
        (refused,) = created
        assert isinstance(refused, StoreUnavailableError), refused
        assert "collided with concurrent writes" in str(refused)
    with after.read_transaction() as conn:
        homes = conn.exec_driver_sql(
            "SELECT tableoid::regclass::text FROM events WHERE stream_id = %s", (stream,)
        ).scalars()
        assert list(homes) == [f"events_{day:%Y%m%d}"]
    after.close()


def test_waves_of_the_same_streams_in_opposite_orders_wait_for_each_other_without_a_retry(
    pg_session_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replicas claim one wave, its streams in their own orders: the later claim waits, then skips.

    The first claim is held between its two streams. Without the wave's locks the second
    began the held stream meanwhile, and one of them was refused on the other's stream (a
    collision here; a deadlock, broken a second later and run again round after round,
    where each held what the other wanted). With no retry left, the second claim then
    failed (checked with the lock statement taken out).
    """
    monkeypatch.setattr("harness.store.writer.COLLISION_RETRIES", 0)
    free, held_stream = f"wave-{uuid4().hex}", f"wave-{uuid4().hex}"
    claims: dict[str, set[str] | StoreError] = {}
    with (
        closing(open_store(pg_session_url)) as one,
        closing(open_store(pg_session_url)) as two,
    ):

        def claim_in(name: str, store: SqlEventStore, order: list[str]) -> None:
            try:
                claims[name] = store.create_streams(
                    {stream: [NewEvent(uuid4(), "Claimed", 1, {"by": name})] for stream in order}
                )
            except StoreError as exc:
                claims[name] = exc

        first = threading.Thread(target=claim_in, args=("one", one, [free, held_stream]))
        second = threading.Thread(target=claim_in, args=("two", two, [held_stream, free]))
        with held_inserts(one.engine, held_stream) as held:
            first.start()
            wait_until(lambda: held.waiting() == 1, "the first claim to reach the held stream")
            second.start()
            wait_until(lambda: _writers_waiting(one) == 2, "the second claim to wait")
            held.release()
            first.join(60)
            second.join(60)
    assert claims == {"one": {free, held_stream}, "two": set()}


def test_a_tick_streams_next_append_follows_its_day_when_another_writer_moved_it(
    pg_session_url: str,
) -> None:
    """A writer's later appends to a tick stream name the day it saw; `tick_streams` decides.

    The stream leaves (its events and its day, as an archived day's do) and another writer,
    whose clock says the next day, begins it again there: the first writer's next append
    lands in the next day's partition after that writer's event, and a stale expected
    version is still refused.
    """
    today = datetime(2026, 6, 1, 12, tzinfo=UTC)
    tomorrow = today + timedelta(days=1)
    with (
        closing(open_store(pg_session_url, clock=lambda: today)) as first,
        closing(open_store(pg_session_url, clock=lambda: tomorrow)) as second,
    ):
        stream = f"tick-{uuid4().hex}"
        first.append(stream, [NewEvent(uuid4(), "TickScheduled", 1, {})], NO_STREAM)
        with pytest.raises(ConcurrencyError):
            first.append(stream, [NewEvent(uuid4(), "TickStarted", 1, {})], 2)
        first.append(stream, [NewEvent(uuid4(), "TickStarted", 1, {})], 1)
        with first.write_transaction() as conn:
            positions = conn.exec_driver_sql(
                "SELECT global_position FROM events WHERE stream_id = %s", (stream,)
            ).scalars()
            assert delete_positions(conn, list(positions)) == 2
        second.append(stream, [NewEvent(uuid4(), "TickScheduled", 1, {})], NO_STREAM)
        landed = first.append(stream, [NewEvent(uuid4(), "TickFinished", 1, {})], ANY)
        assert landed.stream_version == 2
        with first.read_transaction() as conn:
            homes = conn.exec_driver_sql(
                "SELECT stream_position, tableoid::regclass::text FROM events WHERE stream_id = %s "
                "ORDER BY stream_position",
                (stream,),
            ).all()
        assert [tuple(home) for home in homes] == [
            (1, f"events_{tomorrow:%Y%m%d}"),
            (2, f"events_{tomorrow:%Y%m%d}"),
        ]


def _writers_waiting(store: SqlEventStore) -> int:
    """The store's writers waiting for a lock, read afresh (a transaction keeps its first look).

    Its database's only: the activity listed is the whole cluster's, other tests' too.
    """
    with store.engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock' AND datname = current_database()",
                (WRITER_NAME,),
            ).scalar_one()
        )


def test_threads_folding_at_once_each_hold_one_connection_at_most(store: SqlEventStore) -> None:
    """Eight threads catch every read model up at once, one connection each at most.

    A fold's windows are read on its tracking transaction's connection, and the threads
    take turns before taking one. A thread that took a second connection inside its
    transaction could wait for ever on a pool the others held the same way (issue 45:
    every thread of a loaded service).
    """
    for i in range(50):
        store.append(f"s-{i}", [NewEvent(uuid4(), "Load", 1, {"n": i})])
    peak = [0]
    pool = store.engine.pool

    def checked_out(*_: object) -> None:
        peak[0] = max(peak[0], pool.checkedout())  # type: ignore[attr-defined]

    sa.event.listen(pool, "checkout", checked_out)
    failed: list[BaseException] = []

    def fold() -> None:
        try:
            projector_for(store, PriceBook()).catch_up()
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=fold) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failed == []
    assert peak[0] <= len(threads), f"{peak[0]} connections out at once for {len(threads)} threads"
