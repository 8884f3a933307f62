"""Spend and ticks read models: folded incrementally, equal to a rebuild from zero."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
import sqlalchemy as sa
from genai_prices import Usage, calc_price
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.config import PriceOverride
from harness.contracts.events import (
    BudgetSpent,
    Event,
    TickCompleted,
    TickScheduled,
    TickStarted,
    TickTimedOut,
    ToolCalled,
)
from harness.prices import PriceBook
from harness.projections import (
    Projection,
    Projector,
    SpendProjection,
    TicksProjection,
    projector_for,
    spend_report,
)
from harness.projections.base import EventData, Kernel
from harness.projections.spend import spend_daily
from harness.projections.ticks import ticks
from harness.store import NewEvent, SqlEventStore, open_store
from harness.timespec import as_utc
from tests.procs import catch_up, racing

DAY1 = datetime(2026, 11, 28, 23, 59, 59, tzinfo=UTC)
DAY2 = datetime(2026, 11, 29, 0, 0, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def spent(
    tick: str, level: str, model: str, prompt: int, completion: int, **kw: Any
) -> BudgetSpent:
    return BudgetSpent(
        tick_id=tick,
        level=level,
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        **kw,
    )


def append(store: SqlEventStore, events: Sequence[Event]) -> None:
    for event in events:
        store.append(f"tick-{getattr(event, 'tick_id', 'x')}", [event.to_record()])


@pytest.mark.parametrize(
    ("model", "prompt", "completion", "cache_read", "cache_write"),
    [
        ("gpt-4o-mini", 12_000, 800, 4_000, 0),
        ("claude-sonnet-4-5", 50_000, 2_000, 30_000, 10_000),
        ("gemini-2.5-pro", 150_000, 1_000, 0, 0),
        ("gemini-2.5-pro", 250_000, 1_000, 20_000, 0),
    ],
)
def test_price_arithmetic_equals_genai_prices(
    model: str, prompt: int, completion: int, cache_read: int, cache_write: int
) -> None:
    book = PriceBook()
    day = "2026-11-30"
    tier = -1
    for above in book.thresholds(model, day):
        if prompt > above:
            tier = above
    mine = book.cost(model, day, tier, prompt, completion, cache_read, cache_write)
    theirs = calc_price(
        Usage(
            input_tokens=prompt,
            output_tokens=completion,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        ),
        model,
        genai_request_timestamp=datetime(2026, 11, 30, 12, tzinfo=UTC),
    ).total_price
    assert mine == pytest.approx(float(theirs), rel=1e-12)


def test_every_models_price_thresholds_are_among_the_tier_bounds() -> None:
    """A fold sums calls per bucket between the bounds: no model's tier may split a bucket."""
    from genai_prices.data_snapshot import get_snapshot

    book = PriceBook()
    bounds = set(book.tier_bounds())
    models = {model.id for provider in get_snapshot().providers for model in provider.models}
    for day in ("2024-06-01", "2026-11-30"):
        outside = {m: t for m in models if not set(t := book.thresholds(m, day)) <= bounds}
        assert outside == {}, day


@settings(max_examples=200, deadline=None)
@given(
    model=st.sampled_from(["gemini-2.5-pro", "claude-sonnet-4-5", "gpt-4o-mini", "unpriced"]),
    prompt=st.integers(0, 1_000_000) | st.sampled_from(PriceBook().tier_bounds()),
    nudge=st.integers(-1, 1),
)
def test_a_prompts_bucket_has_the_prompts_own_tier(model: str, prompt: int, nudge: int) -> None:
    book, day = PriceBook(), "2026-11-30"
    prompt = max(0, prompt + nudge)
    bucket = bisect_left(book.tier_bounds(), prompt)
    assert book.bucket_tier(model, day, bucket) == book.tier(model, day, prompt)


def test_spend_report_groups_prices_and_never_prices_unknown_models_at_zero(
    store: SqlEventStore,
) -> None:
    append(
        store,
        [
            spent("a", "min", "gpt-4o-mini", 1_000_000, 100_000, occurred_at=DAY1),
            spent("a", "min", "gpt-4o-mini", 1_000_000, 0, occurred_at=DAY2, estimated=True),
            spent("b", "hour", "my-local-model", 500, 50, occurred_at=DAY2),
            spent("c", "hour", "home-gpu-model", 10, 10, occurred_at=DAY2),
        ],
    )
    prices = PriceBook({"home-gpu-model": PriceOverride(input_per_mtok=1, output_per_mtok=2)})
    projector_for(store, prices).catch_up()
    with store.read_transaction() as conn:
        by_level = spend_report(conn, prices, by=["level"])
        by_day = spend_report(conn, prices, by=["level", "day"], levels=["min"])
        by_model = spend_report(conn, prices, by=["model"], since=date(2026, 11, 29))

    hour, minute = by_level
    assert minute.group == {"level": "min"}
    assert (minute.prompt_tokens, minute.completion_tokens) == (2_000_000, 100_000)
    assert (minute.model_calls, minute.estimated_calls) == (2, 1)
    assert minute.cost_usd == pytest.approx(2 * 0.15 + 0.1 * 0.6)
    assert hour.cost_usd is None and hour.unpriced_calls == 1
    assert [row.group["day"] for row in by_day] == ["2026-11-28", "2026-11-29"]
    costs = {row.group["model"]: row.cost_usd for row in by_model}
    assert costs == {
        "gpt-4o-mini": pytest.approx(0.15),
        "home-gpu-model": pytest.approx((10 + 20) / 1e6),
        "my-local-model": None,
    }


def test_ticks_read_model_follows_each_tick(store: SqlEventStore) -> None:
    append(
        store,
        [
            TickScheduled(tick_id="t1", level="min", slot=DAY1),
            TickStarted(tick_id="t1", level="min", pid=1, host="h"),
            spent("t1", "min", "m", 100, 10),
            ToolCalled(tick_id="t1", level="min", name="rag_lookup", status="ok"),
            ToolCalled(tick_id="t1", level="min", name="shell", status="cancelled"),
            spent("t1", "min", "m", 200, 20),
            TickCompleted(tick_id="t1", level="min", result_path="/r/t1.json"),
            TickStarted(tick_id="t2", level="hour", pid=2, host="h"),
            TickTimedOut(tick_id="t2", level="hour", timeout_seconds=5),
        ],
    )
    projector_for(store, PriceBook()).catch_up()
    with store.read_transaction() as conn:
        rows = {row.tick_id: row for row in conn.execute(sa.select(ticks))}
    t1, t2 = rows["t1"], rows["t2"]
    assert (t1.status, t1.prompt_tokens, t1.completion_tokens, t1.model_calls) == (
        "completed",
        300,
        30,
        2,
    )
    assert (t1.tool_calls, t1.tool_calls_cancelled, t1.result_path) == (1, 1, "/r/t1.json")
    assert t1.started_at is not None and t1.finished_at is not None
    assert (t2.status, t2.level) == ("timed_out", "hour")


def test_a_ticks_list_time_is_its_scheduling_else_its_first_event(store: SqlEventStore) -> None:
    projector = projector_for(store, PriceBook())
    append(store, [spent("t3", "min", "m", 1, 1, occurred_at=DAY1)])
    projector.catch_up()
    append(store, [spent("t3", "min", "m", 1, 1, occurred_at=DAY2)])
    projector.catch_up()
    with store.read_transaction() as conn:
        assert as_utc(conn.execute(sa.select(ticks.c.sort_at)).scalar_one()) == DAY1
    append(store, [TickStarted(tick_id="t3", level="min", pid=1, host="h", occurred_at=DAY2)])
    append(store, [TickScheduled(tick_id="t3", level="min", occurred_at=DAY1 - HOUR)])
    projector.catch_up()
    with store.read_transaction() as conn:
        row = conn.execute(sa.select(ticks)).one()
    assert (row.status, as_utc(row.sort_at)) == ("scheduled", DAY1 - HOUR)


class Exploding(Projection):
    name = "spend"
    types = frozenset({"BudgetSpent"})
    tables = (spend_daily,)

    def apply(self, conn: sa.Connection, batch: Sequence[EventData]) -> None:
        SpendProjection(PriceBook()).apply(conn, batch)
        raise RuntimeError("crash half way through a batch")


def test_a_batch_that_fails_leaves_read_model_and_checkpoint_untouched(
    store: SqlEventStore,
) -> None:
    append(store, [spent("a", "min", "m", 1, 1)])
    with pytest.raises(RuntimeError):
        Projector(store, [Exploding()]).catch_up()
    with store.read_transaction() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(spend_daily)).scalar() == 0
    assert Projector(store, [Exploding()]).checkpoints() == {"spend": 0}


def _dump(store: SqlEventStore) -> dict[str, list[tuple[Any, ...]]]:
    with store.read_transaction() as conn:
        return {
            table.name: sorted(tuple(row) for row in conn.execute(sa.select(table)))
            for table in (spend_daily, ticks)
        }


def test_two_processes_catching_up_at_once_fold_each_event_once(store_url: str) -> None:
    store = open_store(store_url)
    append(store, [spent(f"t{i % 5}", "min", "gpt-4o-mini", i, 1) for i in range(200)])
    with racing(catch_up, (store_url,), (store_url,)):
        pass
    with store.read_transaction() as conn:
        total = conn.execute(sa.select(sa.func.sum(spend_daily.c.prompt_tokens))).scalar()
    assert total == sum(range(200))
    store.close()


class Windows(Projection):
    """Records the events of each batch it is given."""

    name = "windows"
    types = frozenset({"BudgetSpent", "TickStarted"})
    tables = ()

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        self.batches.append([position for position, _, _ in batch])


def test_windows_are_counted_in_events_not_positions(store: SqlEventStore) -> None:
    positions = [
        position
        for i in range(10)
        for position in store.append(
            f"tick-t{i % 3}",
            [
                spent(f"t{i}", "min", "m", i, 1).to_record()
                if i % 4
                else NewEvent(uuid4(), "Other", 1, {})
            ],
        ).positions
    ]
    projection, reported = Windows(), []
    projector = Projector(store, [projection], batch_size=3)
    assert projector.catch_up(progress=lambda done, total: reported.append((done, total))) == 7
    kept = [p for i, p in enumerate(positions) if i % 4]
    assert projection.batches == [
        [p for p in kept if p <= positions[2]],
        [p for p in kept if positions[2] < p <= positions[5]],
        [p for p in kept if positions[5] < p <= positions[8]],
        [p for p in kept if p > positions[8]],
    ]
    assert reported == [(3, 10), (6, 10), (9, 10), (10, 10)]
    assert projector.checkpoints() == {"windows": positions[-1]}


def _spend_dump(store: SqlEventStore) -> list[tuple[Any, ...]]:
    return _dump(store)["spend_daily"]


def _varied_spend(store: SqlEventStore, count: int) -> None:
    models = ["gemini-2.5-pro", "gpt-4o-mini", "unpriced-model"]
    append(
        store,
        [
            spent(
                f"t{i % 7}",
                ["min", "hour"][i % 2],
                models[i % 3],
                (i * 37_003) % 400_000,
                i % 900,
                occurred_at=[DAY1, DAY2][i % 2],
                estimated=i % 5 == 0,
                cache_read_tokens=None if i % 3 else i,
            )
            for i in range(count)
        ],
    )


def test_a_backlog_over_the_threshold_folds_in_parts_equal_to_one_process(
    store: SqlEventStore,
) -> None:
    _varied_spend(store, 90)
    prices = PriceBook()
    one = Projector(store, [SpendProjection(prices)], processes=1, partition_above=10)
    assert one.rebuild("spend") == 90 and one.spawned == 0
    alone = _spend_dump(store)

    parts = Projector(
        store, [SpendProjection(prices)], batch_size=20, partition_above=10, processes=3
    )
    reported: list[tuple[int, int]] = []
    assert parts.rebuild("spend", lambda done, total: reported.append((done, total))) == 90
    assert parts.spawned == 2 and reported == [(90, 90)]
    assert _spend_dump(store) == alone
    assert parts.checkpoints() == {"spend": store.last_position()}


def test_a_catch_up_below_the_threshold_spawns_no_process(store: SqlEventStore) -> None:
    _varied_spend(store, 30)
    projector = Projector(
        store, [SpendProjection(PriceBook())], batch_size=7, partition_above=30, processes=2
    )
    assert projector.catch_up() == 30 and projector.spawned == 0
    _varied_spend(store, 31)
    assert projector.catch_up() == 31 and projector.spawned == 1


class Overtaken(SpendProjection):
    """Another process catches spend up by windows while this one starts folding in parts."""

    def __init__(self, store: SqlEventStore) -> None:
        super().__init__(PriceBook())
        self.store = store

    def kernel(self) -> Kernel:
        Projector(self.store, [SpendProjection(self.prices)], processes=1).catch_up()
        return super().kernel()


def test_a_fold_in_parts_that_another_process_overtook_writes_nothing(
    store: SqlEventStore,
) -> None:
    _varied_spend(store, 40)
    projector = Projector(store, [Overtaken(store)], batch_size=10, partition_above=10)
    assert projector.catch_up() == 0 and projector.spawned == 1
    overtaken = _spend_dump(store)
    Projector(store, [SpendProjection(PriceBook())], processes=1).rebuild("spend")
    assert _spend_dump(store) == overtaken


levels = st.sampled_from(["min", "hour"])
models = st.sampled_from(["gpt-4o-mini", "gemini-2.5-pro", "unpriced-model"])
ticks_ids = st.sampled_from(["t1", "t2", "t3"])
moments = st.sampled_from([DAY1, DAY2])
spends = st.builds(
    spent,
    ticks_ids,
    levels,
    models,
    st.integers(0, 400_000),
    st.integers(0, 5_000),
    occurred_at=moments,
    estimated=st.booleans(),
    cache_read_tokens=st.none() | st.integers(0, 1000),
)
lifecycle = st.one_of(
    st.builds(TickScheduled, tick_id=ticks_ids, level=levels, slot=moments),
    st.builds(TickStarted, tick_id=ticks_ids, level=levels, pid=st.just(1), host=st.just("h")),
    st.builds(TickCompleted, tick_id=ticks_ids, level=levels, result_path=st.just("/r.json")),
    st.builds(TickTimedOut, tick_id=ticks_ids, level=levels, timeout_seconds=st.just(1.0)),
    st.builds(
        ToolCalled,
        tick_id=ticks_ids,
        level=levels,
        name=st.just("t"),
        status=st.sampled_from(["ok", "cancelled"]),
    ),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(st.one_of(spends, lifecycle), max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=5),
    batch_size=st.integers(1, 25),
)
def test_rebuild_from_zero_equals_the_incremental_read_models(
    store: SqlEventStore, events: list[Event], cuts: list[int], batch_size: int
) -> None:
    with store.write_transaction() as conn:
        for table in ("events", "projection_checkpoints", "spend_daily", "ticks"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    incremental = Projector(store, [SpendProjection(PriceBook()), TicksProjection()], batch_size)
    done = 0
    for cut in [*sorted(set(cuts)), len(events)]:
        append(store, events[done:cut])
        done = max(done, cut)
        incremental.catch_up()
    kept = _dump(store)

    rebuilder = projector_for(store, PriceBook())
    rebuilder.rebuild("spend")
    rebuilder.rebuild("ticks")
    assert _dump(store) == kept
    in_parts = Projector(store, [SpendProjection(PriceBook())], batch_size, partition_above=0)
    in_parts.rebuild("spend")
    assert _dump(store) == kept
    spend_total = sum(row[4] for row in kept["spend_daily"])
    assert spend_total == sum(e.prompt_tokens for e in events if isinstance(e, BudgetSpent))
