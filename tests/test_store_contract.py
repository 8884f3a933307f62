"""The event store contract, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from uuid import uuid4

import pytest
import sqlalchemy as sa

from harness.contracts import tick_stream
from harness.contracts.events import BudgetSpent, RawEvent, TickStarted, decode
from harness.folds.spend import spend_sums
from harness.folds.sums import Folded, Kernel
from harness.store import (
    ANY,
    NO_STREAM,
    ConcurrencyError,
    EventIdConflictError,
    NewEvent,
    SchemaError,
    SqlEventStore,
    StoreUnavailableError,
    Window,
    migrate_store,
    open_store,
)
from harness.store.schema import event_ids, events, projection_checkpoints
from harness.store.tick_rows import compact, packed_ids
from harness.store.writer import Refused, Writer, appends_settled
from tests.conftest import fresh_pg_database
from tests.late_writer import late_append
from tests.waiting import DEADLINE_SECONDS

SPENT = {
    "occurred_at": "2026-11-30T02:14:50Z",
    "model": "gemini-2.5-pro",
    "completion_tokens": 7,
    "cache_read_tokens": None,
    "cache_write_tokens": 3,
    "estimated": False,
}
BOUNDS = (100_000, 200_000)


def new(type_: str = "Thing", **data: object) -> NewEvent:
    return NewEvent(uuid4(), type_, 1, dict(data), {"source": "test"})


def settled(store: SqlEventStore) -> None:
    """Wait until every event appended can be read back.

    On PostgreSQL reads stop below the writers' horizon, and a transaction of another
    database on the server (another test's) can hold it back a moment under load.
    """
    with store.read_transaction() as conn:
        newest = conn.execute(sa.select(sa.func.max(events.c.global_position))).scalar() or 0
    assert store.wait_settled(newest, timeout=DEADLINE_SECONDS)


def test_append_assigns_stream_and_global_positions(store: SqlEventStore) -> None:
    first = store.append("s-1", [new(n=1), new(n=2)], NO_STREAM)
    second = store.append("s-2", [new(n=3)], NO_STREAM)
    third = store.append("s-1", [new(n=4)], 2)

    positions = [*first.positions, *second.positions, *third.positions]
    assert positions == sorted(set(positions)) and len(positions) == 4, "strictly increasing"
    assert (first.stream_version, second.stream_version, third.stream_version) == (2, 1, 3)
    assert [e.stream_position for e in store.read_stream("s-1")] == [1, 2, 3]
    settled(store)
    assert [(e.global_position, e.data["n"]) for e in store.read_all()] == list(
        zip(positions, [1, 2, 3, 4], strict=True)
    )
    assert store.last_position() == positions[-1]
    assert store.stream_version("s-1") == 3
    assert store.stream_version("nope") == 0


def test_wrong_expected_version_raises_and_writes_nothing(store: SqlEventStore) -> None:
    last = store.append("s", [new(), new()], NO_STREAM).positions[-1]

    for expected in (1, 3, NO_STREAM):
        with pytest.raises(ConcurrencyError) as caught:
            store.append("s", [new(), new()], expected)
        assert caught.value.actual == 2
        assert "expected version" in str(caught.value) and "'s'" in str(caught.value)

    with pytest.raises(ConcurrencyError):
        store.append("fresh", [new()], 1)
    assert store.wait_settled(last)
    assert store.last_position() == last
    assert store.stream_version("fresh") == 0


def test_exact_version_zero_is_refused_with_a_hint(store: SqlEventStore) -> None:
    with pytest.raises(ValueError, match="NO_STREAM"):
        store.append("s", [new()], 0)


def test_an_oversized_batch_is_refused_with_the_limit(store: SqlEventStore) -> None:
    store.append("s", [new() for _ in range(1000)])
    with pytest.raises(ValueError, match="at most 1000"):
        store.append("s", [new() for _ in range(1001)])
    assert len(store.read_all(limit=2000)) == 1000


def test_any_appends_after_whatever_is_there(store: SqlEventStore) -> None:
    store.append("s", [new()], ANY)
    result = store.append("s", [new(), new()], ANY)
    assert result.stream_version == 3


def test_duplicate_event_id_is_a_noop_reporting_the_stored_position(
    store: SqlEventStore,
) -> None:
    event = new(tokens=10)
    store.append("other", [new()], NO_STREAM)
    stored = store.append("s", [event], NO_STREAM)

    again = store.append("s", [event], ANY)
    stale_retry = store.append("s", [event], NO_STREAM)

    assert again.duplicate and stale_retry.duplicate
    assert again.positions == stale_retry.positions == stored.positions
    assert store.wait_settled(stored.positions[0])
    assert store.last_position() == stored.positions[0]
    assert [e.event_id for e in store.read_stream("s")] == [event.event_id]


def test_a_whole_batch_retried_is_a_noop(store: SqlEventStore) -> None:
    batch = [new(n=i) for i in range(3)]
    first = store.append("s", batch, NO_STREAM)
    retry = store.append("s", batch, NO_STREAM)
    assert retry.duplicate and retry.positions == first.positions


def test_partly_stored_batch_is_refused_whole(store: SqlEventStore) -> None:
    stored = new()
    (last,) = store.append("s", [stored], NO_STREAM).positions
    with pytest.raises(EventIdConflictError, match="1 of 2 event ids"):
        store.append("s", [stored, new()], ANY)
    assert store.wait_settled(last)
    assert store.last_position() == last


def test_empty_append_changes_nothing(store: SqlEventStore) -> None:
    (last,) = store.append("s", [new()], NO_STREAM).positions
    result = store.append("s", [], ANY)
    assert result.positions == () and result.stream_version == 1
    assert store.wait_settled(last)
    assert store.last_position() == last


def test_create_streams_starts_only_the_new_streams_in_one_call(store: SqlEventStore) -> None:
    store.append("taken", [new(n=0)], NO_STREAM)
    wanted = {"a": [new(n=1), new(n=2)], "taken": [new(n=3)], "b": [new(n=4)]}

    assert store.create_streams(wanted) == {"a", "b"}
    assert [e.data["n"] for e in store.read_stream("taken")] == [0]
    assert [e.stream_position for e in store.read_stream("a")] == [1, 2]
    assert store.create_streams({"a": [new()], "b": [new()]}) == set()
    settled(store)
    assert [e.data["n"] for e in store.read_all()] == [0, 1, 2, 4]
    assert store.create_streams({}) == set()


def test_create_streams_with_a_stored_event_id_writes_nothing(store: SqlEventStore) -> None:
    stored = new()
    (last,) = store.append("s", [stored], NO_STREAM).positions
    with pytest.raises(EventIdConflictError, match="nothing was written"):
        store.create_streams({"fresh": [new()], "other": [stored]})
    assert store.wait_settled(last)
    assert store.stream_version("fresh") == 0 and store.last_position() == last
    with pytest.raises(ValueError, match="'empty': 0 events"):
        store.create_streams({"empty": []})


def test_read_streams_returns_each_stream_in_order(store: SqlEventStore) -> None:
    for i in range(6):
        store.append(f"s-{i % 3}", [new(i=i)], ANY)
    found = store.read_streams(["s-2", "s-0", "missing", "s-0"])
    assert list(found) == ["s-2", "s-0", "missing"]
    assert [e.data["i"] for e in found["s-0"]] == [0, 3]
    assert [e.data["i"] for e in found["s-2"]] == [2, 5]
    assert found["missing"] == []
    store.append("s-0", [new("Other")], ANY)
    assert [e.type for e in store.read_streams(["s-0"], types=["Other"])["s-0"]] == ["Other"]


def test_read_stream_and_read_all_page_and_filter(store: SqlEventStore) -> None:
    for i in range(10):
        store.append(f"s-{i % 2}", [new("Even" if i % 2 == 0 else "Odd", i=i)], ANY)

    assert [e.data["i"] for e in store.read_stream("s-0", after=2, limit=2)] == [4, 6]
    settled(store)
    positions = [e.global_position for e in store.read_all()]
    assert [e.global_position for e in store.read_all(positions[2], limit=4)] == positions[3:7]
    odd = store.read_all(types=["Odd"])
    assert [e.data["i"] for e in odd] == [1, 3, 5, 7, 9]
    assert store.read_all(after_position=positions[-1]) == []
    assert store.wait_settled(positions[-1], timeout=0), "nothing is in flight"
    assert store.read_all(store.lookback(3)) == store.read_all(positions[6])
    assert store.lookback(10) == store.lookback(11) == 0


def test_records_round_trip_exactly(store: SqlEventStore) -> None:
    data = {"text": "héllo ✓ \u2028", "nested": {"list": [1, 2.5, None, True]}, "n": 2**40}
    event = NewEvent(uuid4(), "Rich", 3, data, {"trace": "abc"})
    before = datetime.now(UTC)
    store.append("s", [event], NO_STREAM)
    settled(store)
    (stored,) = store.read_all()

    assert stored.event_id == event.event_id
    assert (stored.type, stored.version, stored.data, stored.metadata) == (
        "Rich",
        3,
        data,
        {"trace": "abc"},
    )
    assert stored.data is stored.data, "JSON is parsed once, on first access"
    (again,) = store.read_stream("s")
    assert again == stored and again != store.read_all()[0].as_dict()
    assert again.as_dict()["data"] == data and "Rich" in repr(again)
    assert stored.recorded_at.tzinfo is not None
    assert before - timedelta(seconds=1) <= stored.recorded_at <= datetime.now(UTC)
    assert store.first_position_since(before - timedelta(seconds=1)) == stored.global_position
    later = datetime.now(UTC) + timedelta(hours=1)
    assert store.first_position_since(later) == stored.global_position + 1


def test_a_read_transaction_reads_the_stores_own_database(store: SqlEventStore) -> None:
    store.append("s", [new(), new()], NO_STREAM)
    with store.tracking("spend") as tracking:
        store.save_checkpoint(tracking, tracking.horizon)

    with store.read_transaction() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(events)).scalar() == 2
        checkpoint = sa.select(projection_checkpoints.c.position).where(
            projection_checkpoints.c.name == "spend"
        )
        assert conn.execute(checkpoint).scalar() == store.last_position()


def test_typed_events_round_trip_and_unknown_types_are_kept(store: SqlEventStore) -> None:
    spent = BudgetSpent(tick_id="t1", level="min", model="m", prompt_tokens=5, completion_tokens=2)
    started = TickStarted(tick_id="t1", level="min", pid=42, host="h")
    store.append("tick-t1", [started.to_record(), spent.to_record()], NO_STREAM)
    store.append("tick-t1", [new("FromTheFuture", x=1)], ANY)

    decoded = [decode(e) for e in store.read_stream("tick-t1")]
    assert decoded[:2] == [started, spent]
    assert isinstance(decoded[2], RawEvent)
    assert decoded[2].type == "FromTheFuture" and decoded[2].data == {"x": 1}


def test_read_last_returns_the_newest_events_of_the_types_asked_for(store: SqlEventStore) -> None:
    for i in range(6):
        store.append("s", [new("Even" if i % 2 == 0 else "Odd", i=i)], ANY)
    settled(store)

    assert [e.data["i"] for e in store.read_last(2, types=["Even"])] == [4, 2]
    assert [e.data["i"] for e in store.read_last(3)] == [5, 4, 3]
    assert store.read_last(5, types=["Never"]) == []


def test_a_window_holds_the_types_asked_for_after_the_checkpoint_up_to_its_end(
    store: SqlEventStore,
) -> None:
    for i in range(8):
        store.append(f"s-{i % 3}", [new("Even" if i % 2 == 0 else "Odd", i=i)], ANY)
    assert store.checkpoints(["fold"]) == {"fold": 0}
    settled(store)
    p = [e.global_position for e in store.read_all()]

    with store.tracking("fold") as tracking:
        assert (tracking.position, tracking.horizon) == (0, p[7])
        first = list(store.read_window(tracking, ["Even"], p[4]))
        store.save_checkpoint(tracking, p[4])
    with store.tracking("fold") as tracking:
        assert (tracking.position, tracking.horizon) == (p[4], p[7])
        rest = list(store.read_window(tracking, ["Even", "Odd"], tracking.horizon))
        assert list(store.read_window(tracking, [], tracking.horizon)) == []
        with pytest.raises(ValueError, match="past the horizon"):
            store.read_window(tracking, ["Even"], tracking.horizon + 1)

    assert first == [(p[0], "Even", {"i": 0}), (p[2], "Even", {"i": 2}), (p[4], "Even", {"i": 4})]
    assert [(position, data["i"]) for position, _, data in rest] == [
        (p[5], 5),
        (p[6], 6),
        (p[7], 7),
    ]
    assert store.checkpoints(["fold", "other"]) == {"fold": p[4], "other": 0}


def test_a_window_counts_events_whatever_the_positions_between_them(
    store: SqlEventStore,
) -> None:
    """Windows are sized by events: nothing here assumes positions are dense."""
    positions = [
        position
        for i in range(7)
        for position in store.append(f"s-{i % 3}", [new(i=i)], ANY).positions
    ]
    last = positions[-1]

    assert store.window(0, last, 3) == Window(0, positions[2], 3)
    assert store.window(positions[2], last, 3) == Window(positions[2], positions[5], 3)
    assert store.window(positions[5], last, 3) == Window(positions[5], last, 1)
    assert store.window(0, positions[1], 3) == Window(0, positions[1], 2)
    assert store.window(0, last) == Window(0, last, 7)
    assert store.window(0, positions[4]) == Window(0, positions[4], 5)
    assert store.window(positions[3], last) == Window(positions[3], last, 3)
    assert store.window(last, last, 3) == Window(last, last, 0)
    assert store.window(last, last + 1_000_000) == Window(last, last + 1_000_000, 0)


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_a_range_folded_in_parts_equals_it_folded_whole(store: SqlEventStore, parts: int) -> None:
    for i in range(40):
        spent = {**SPENT, "prompt_tokens": i * 9_000, "level": f"l{i % 3}"}
        store.append(f"t-{i % 4}", [new("BudgetSpent", **spent), new("Other", i=i)], ANY)
    horizon = store.last_position()
    kernel = Kernel(spend_sums, (BOUNDS,))
    spends = [(e.global_position, e.data) for e in store.read_all(0, 1000, ["BudgetSpent"])]

    whole = store.fold_range(0, horizon, ["BudgetSpent"], kernel, parts)
    assert whole == Folded(spend_sums((data for _, data in spends), BOUNDS), 40, 80)
    after = store.window(0, horizon, 31).end
    tail = [data for position, data in spends if position > after]
    assert store.fold_range(after, horizon, ["BudgetSpent"], kernel, parts) == Folded(
        spend_sums(tail, BOUNDS), len(tail), 49
    )
    assert store.fold_range(horizon, horizon, ["BudgetSpent"], kernel, parts) == Folded({}, 0, 0)


def test_a_tracking_block_that_raises_keeps_neither_its_writes_nor_its_checkpoint(
    store: SqlEventStore,
) -> None:
    (position,) = store.append("s", [new(i=1)], NO_STREAM).positions
    with store.tracking("fold") as tracking:
        store.save_checkpoint(tracking, position)

    with pytest.raises(RuntimeError, match="half way"), store.tracking("fold") as tracking:
        assert tracking.position == position
        written = {"name": "read-model", "position": 7, "updated_at": datetime.now(UTC)}
        tracking.conn.execute(projection_checkpoints.insert().values(written))
        store.save_checkpoint(tracking, 0)
        raise RuntimeError("the fold failed half way")

    assert store.checkpoints(["fold", "read-model"]) == {"fold": position, "read-model": 0}


def test_a_second_tracker_of_one_name_waits_and_sees_the_first_ones_checkpoint(
    store: SqlEventStore,
) -> None:
    store.append("s", [new(i=1), new(i=2)], NO_STREAM)
    entered, seen = threading.Event(), []

    def second() -> None:
        with store.tracking("fold") as tracking:
            entered.set()
            seen.append(tracking.position)

    with store.tracking("fold") as tracking:
        waiting = threading.Thread(target=second)
        waiting.start()
        # A window for the second tracker to get in while the first holds the lock.
        assert not entered.wait(0.5)
        store.save_checkpoint(tracking, 2)
    waiting.join(timeout=30)
    assert seen == [2]


def test_a_window_never_reaches_an_append_still_in_flight(
    pg_store: SqlEventStore, pg_session_url: str
) -> None:
    """PostgreSQL hands out a position before the append commits; the horizon waits for it.

    PostgreSQL only: SQLite has one writer, whose lock the tracker waits for, so nothing is
    ever in flight there.
    """
    store, late_writer = pg_store, open_store(pg_session_url)
    (first,) = store.append("s", [new(i=1)], NO_STREAM).positions
    with late_append(late_writer, {"i": 2}):
        (newer,) = store.append("s", [new(i=3)], ANY).positions
        with store.tracking("fold") as tracking:
            assert tracking.horizon == first
            assert [e[2] for e in store.read_window(tracking, ["Thing"], first)] == [{"i": 1}]
            store.save_checkpoint(tracking, tracking.horizon)
    late_writer.close()
    with store.tracking("fold") as tracking:
        assert (tracking.position, tracking.horizon) == (first, newer)
        window = list(store.read_window(tracking, ["Thing"], newer))
        assert [e[2] for e in window] == [{"i": 2}, {"i": 3}]


def test_a_wave_bigger_than_a_transactions_positions_is_refused(store: SqlEventStore) -> None:
    wave = {f"s-{i}": [new()] * 1000 for i in range(1049)}
    with pytest.raises(ValueError, match="at most 1048575 events"):
        store.create_streams(wave)
    assert store.last_position() == 0


def test_unreachable_postgres_is_reported_as_unavailable() -> None:
    with pytest.raises(StoreUnavailableError, match="unavailable"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_unopenable_sqlite_is_reported_as_unavailable(tmp_path: object) -> None:
    with pytest.raises(StoreUnavailableError):
        open_store("sqlite:////proc/no/such/dir/events.db")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_store_whose_table_is_gone_says_to_migrate(backend: str, sqlite_url: str) -> None:
    """Both paths that meet the driver's error (the writer's and SQLAlchemy's) say so."""
    with contextlib.ExitStack() as stack:
        url = sqlite_url if backend == "sqlite" else stack.enter_context(fresh_pg_database())
        migrate_store(url)
        store = open_store(url)
        stack.callback(store.close)
        store.append("s", [new()], NO_STREAM)
        with store.engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE events"))
        with pytest.raises(SchemaError, match=r"(?s)no schema.*tickwork migrate"):
            store.append("s", [new()], ANY)
        with pytest.raises(SchemaError, match=r"(?s)no schema.*tickwork migrate"):
            store.read_stream("s")


def test_a_postgres_connection_cut_mid_life_is_unavailable_then_reopened() -> None:
    with fresh_pg_database() as url:
        migrate_store(url)
        store = open_store(url)
        store.append("s", [new()], NO_STREAM)
        with store.engine.begin() as conn:  # ends the writer's own connection, not this one
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        with pytest.raises(StoreUnavailableError, match="unavailable"):
            store.append("s", [new()], ANY)
        assert store.append("s", [new()], ANY).stream_version == 2
        store.close()


def test_a_tick_s_reads_and_appends_on_postgresql_take_one_session(pg_store: SqlEventStore) -> None:
    """A tick process reads its stream, then appends: one connection for all of it.

    The writer keeps the pool's connection for its own, and asks on it whether its day's
    partitions (made days ahead) exist: asked on a pooled connection, the question opened
    a second session for every tick, a backend the server forks and the client sets up.
    """
    stream, opened = tick_stream("t-one-session"), []
    pg_store.read_stream(stream)  # on the connection its opening checked the schema on
    sa.event.listen(pg_store.engine, "connect", lambda *_: opened.append(1))
    pg_store.append(stream, [new()], NO_STREAM)
    assert pg_store.append(stream, [new()], ANY).stream_version == 2
    assert opened == []


def test_a_read_of_one_statement_hands_its_connection_back_to_transactions(
    store: SqlEventStore,
) -> None:
    """PostgreSQL runs read_all and read_last outside a transaction; the next user may not."""
    store.append("s", [new()])
    settled(store)
    assert store.read_all() and store.read_last(1)
    row = {"name": "rolled-back", "position": 1, "updated_at": datetime.now(UTC)}
    with contextlib.suppress(RuntimeError), store.write_transaction() as conn:
        conn.execute(sa.insert(projection_checkpoints).values(row))
        raise RuntimeError("roll the transaction back")
    assert store.checkpoints(["rolled-back"]) == {"rolled-back": 0}


def _interleaved_ticks(store: SqlEventStore, closed: int, open_: int) -> list[str]:
    """Tick streams appended in turns with a level's events; the first `closed` end."""
    ticks = [f"t{n}" for n in range(closed + open_)]
    for tick in ticks:
        store.append(f"tick-{tick}", [new("TickScheduled", tick_id=tick, level="min")])
    for turn in range(3):
        for n, tick in enumerate(ticks):
            spent = {**SPENT, "prompt_tokens": 9_000 * (n + turn), "tick_id": tick, "level": "min"}
            store.append(f"tick-{tick}", [new("BudgetSpent", **spent)])
            store.append("level-min", [new("LevelNoted", turn=turn, tick=tick)])
    for tick in ticks[:closed]:
        store.append(f"tick-{tick}", [new("TickCompleted", tick_id=tick, level="min")])
    store.append("level-min", [new("LevelNoted", last=True)])
    return ticks


def _everything_read(store: SqlEventStore, ticks: list[str]) -> dict[str, object]:
    """What every reader of the log gives, to compare before and after packing."""
    everything = store.read_all(0, 10_000)
    positions = [0, *(e.global_position for e in everything)]
    last = positions[-1]
    kinds = [None, ["BudgetSpent"], ["TickCompleted", "LevelNoted"], ["LevelNoted"]]

    with store.tracking("compare") as locked:
        assert locked.horizon >= last, "nothing is writing: a tracking's horizon passes it"
        tracking = replace(locked, position=0)
        windows = [list(store.read_window(tracking, kind, last)) for kind in kinds[1:] if kind]
        store.save_checkpoint(tracking, last)  # packing waits for every checkpoint
    return {
        "streams": {tick: store.read_stream(f"tick-{tick}") for tick in ticks},
        "paged": [store.read_stream(f"tick-{ticks[0]}", after=1, limit=2)],
        "many": store.read_streams([f"tick-{tick}" for tick in ticks], types=["BudgetSpent"]),
        "all": [
            [e.global_position for e in store.read_all(after, limit, kind)]
            for after in positions
            for limit in (1, 4, 1000)
            for kind in kinds
        ],
        "last": [
            [e.global_position for e in store.read_last(limit, kind)]
            for limit in (1, 5, 100)
            for kind in kinds
        ],
        "windows": windows,
        "counted": [
            store.window(after, last, size) for after in positions for size in (1, 4, None)
        ],
        "lookback": [store.lookback(count) for count in range(len(positions) + 1)],
        "since": [store.first_position_since(e.recorded_at) for e in everything],
        "folded": store.fold_range(0, last, ["BudgetSpent"], Kernel(spend_sums, (BOUNDS,)), 2),
        "version": [store.stream_version(f"tick-{tick}") for tick in ticks],
    }


def test_packed_ticks_read_as_they_did_by_every_reader(store: SqlEventStore) -> None:
    """Closed ticks packed into rows: streams, ranges, windows, counts and folds unchanged."""
    ticks = _interleaved_ticks(store, closed=3, open_=2)
    before = _everything_read(store, ticks)

    assert compact(store) == 3
    with store.read_transaction() as conn:
        hot = set(conn.execute(sa.select(events.c.stream_id).distinct()).scalars())
    assert hot == {"tick-t3", "tick-t4", "level-min"}, "closed ticks left `events`"
    assert compact(store) == 0, "a second pass finds nothing new"
    assert _everything_read(store, ticks) == before


def test_windows_by_reach_read_the_log_once_in_few_steps_packed_or_not(
    store: SqlEventStore,
) -> None:
    """`reach` bounds windows by counts, never by a range of positions.

    PostgreSQL's positions jump by a million between two transactions: windows of 50,000
    positions took a first fold over a handful of events through ~169,000 empty windows.
    """
    _interleaved_ticks(store, closed=3, open_=2)
    whole = store.read_all(0, 10_000)
    kinds = sorted({e.type for e in whole})
    last = whole[-1].global_position
    for packing in (False, True):
        if packing:
            assert compact(store) == 3
        ends = [0]
        while ends[-1] < last and len(ends) <= len(whole) // 2:
            ends.append(store.reach(ends[-1], last, 4))
        read = []
        for after, upper in pairwise(ends):
            with store.reading("fold", after, last) as part:
                read += [position for position, _, _ in store.read_window(part, kinds, upper)]
        assert read == [e.global_position for e in whole]
        assert ends[-1] == last, f"{len(ends) - 1} windows do not cover {len(whole)} events"
    assert store.reach(last, last, 4) == last
    assert store.checkpoints(["fold"]) == {"fold": 0}, "reading moves no checkpoint"


def test_a_packed_streams_replays_are_noops_and_its_new_events_land_once(
    store: SqlEventStore,
) -> None:
    """A late spool replay of a packed event stays a no-op; a new event lands after it."""
    ticks = _interleaved_ticks(store, closed=1, open_=0)
    stream = f"tick-{ticks[0]}"
    stored = store.read_stream(stream)
    compact(store)
    replay = NewEvent(stored[1].event_id, stored[1].type, 1, stored[1].data)

    again = store.append(stream, [replay])
    assert again.duplicate and again.positions == (stored[1].global_position,)
    assert again.stream_version == len(stored)
    with pytest.raises(EventIdConflictError):
        store.append(stream, [replay, new("TickNoted", tick_id=ticks[0], level="min")])
    with pytest.raises(ConcurrencyError):
        store.append(stream, [new("TickNoted")], NO_STREAM)
    with pytest.raises(ConcurrencyError):
        store.append(stream, [new("TickNoted")], len(stored) - 1)
    late = store.append(stream, [new("TickNoted", tick_id=ticks[0], level="min")], len(stored))
    assert late.stream_version == len(stored) + 1 and not late.duplicate
    assert store.wait_settled(late.positions[0])
    assert store.read_stream(stream) == [*stored, *store.read_all(late.positions[0] - 1, 1)]
    assert store.stream_version(stream) == len(stored) + 1
    assert store.create_streams({stream: [new("TickScheduled")]}) == set()


def test_an_append_checked_against_a_row_packed_again_since_is_sent_back(
    store: SqlEventStore,
) -> None:
    """The writer takes a packed stream's append only at the row version it was checked at.

    A row packed again after the check may hold a replay of the batch (no unique index
    holds a row's ids), so an append checked against an older version is refused.
    """
    ticks = _interleaved_ticks(store, closed=1, open_=0)
    stream = f"tick-{ticks[0]}"
    compact(store)
    with store.read_transaction() as conn:
        packed = packed_ids(conn, stream)
    assert packed is not None
    late = [new("TickNoted", tick_id=ticks[0], level="min")]
    writer = Writer(store.engine)
    for unchecked in (None, packed.version - 1):
        with pytest.raises(Refused):
            writer.append(stream, late, ANY, checked=unchecked)
    _, version = writer.append(stream, late, ANY, checked=packed.version)
    writer.close()
    assert version == packed.version + 1 == store.stream_version(stream)


def test_replicas_replaying_one_late_event_of_a_packed_stream_at_once_land_it_once(
    store: SqlEventStore, store_url: str
) -> None:
    ticks = _interleaved_ticks(store, closed=1, open_=0)
    stream = f"tick-{ticks[0]}"
    compact(store)
    late = [new("TickNoted", tick_id=ticks[0], level="min")]
    replica = open_store(store_url)
    both = threading.Barrier(2)
    results = []

    def replay(by: SqlEventStore) -> None:
        both.wait()
        results.append(by.append(stream, late))

    racing = [threading.Thread(target=replay, args=(by,)) for by in (store, replica)]
    for thread in racing:
        thread.start()
    for thread in racing:
        thread.join(60)
    replica.close()
    assert sorted(result.duplicate for result in results) == [False, True]
    assert len({result.positions for result in results}) == 1
    assert [e.event_id for e in store.read_stream(stream)].count(late[0].event_id) == 1


def test_packed_ids_leave_event_ids_once_no_append_began_before_their_pass(
    pg_store: SqlEventStore, pg_session_url: str
) -> None:
    """PostgreSQL: an append whose snapshot predates a packing pass has only `event_ids`.

    So a pass's ids leave it only once the appends running when it committed have
    ended; a replay of one is then refused by its row.
    """
    store = pg_store
    ticks = _interleaved_ticks(store, closed=1, open_=0)
    stream = f"tick-{ticks[0]}"
    stored = store.read_stream(stream)
    late_writer = open_store(pg_session_url)
    with late_append(late_writer, {"i": 1}):
        assert not appends_settled(store.engine, 0.05), "an append is in flight"
    late_writer.close()
    assert appends_settled(store.engine, 0.05)
    compact(store)
    with store.read_transaction() as conn:
        kept = conn.execute(sa.select(event_ids.c.event_id)).scalars().all()
    assert not {e.event_id for e in stored} & set(kept), "the packed ids left `event_ids`"
    replay = NewEvent(stored[0].event_id, stored[0].type, 1, stored[0].data)
    assert store.append(stream, [replay]).duplicate
