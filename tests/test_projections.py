"""Spend and ticks read models: folded incrementally, equal to a rebuild from zero."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from importlib.metadata import version
from itertools import pairwise
from typing import Any
from uuid import uuid4

import pytest
import sqlalchemy as sa
from genai_prices import Usage, calc_price
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.config import PriceOverride
from harness.contracts.events import (
    CONTROL_STREAM,
    BudgetSpent,
    CancelCleared,
    CancelRequested,
    DigestPublished,
    Event,
    TickCompleted,
    TickFailed,
    TickScheduled,
    TickSkipped,
    TickStarted,
    TickTimedOut,
    ToolCalled,
)
from harness.prices import PriceBook, TargetPrices
from harness.projections import (
    Projection,
    Projector,
    SpendProjection,
    TicksProjection,
    projector_for,
    spend_report,
)
from harness.projections import projector as projector_module
from harness.projections.base import EventData, Kernel
from harness.projections.digests import digests_published, latest_published
from harness.projections.level_latest import (
    ENDED,
    newest_ended,
    newest_statuses,
    tick_level_latest,
)
from harness.projections.level_stats import stats_of_levels
from harness.projections.levels import cancel_scopes, cancel_scopes_folded
from harness.projections.periods import period_counts
from harness.projections.spend import spend_daily
from harness.projections.tick_counts import TABLES as COUNTERS
from harness.projections.tick_counts import durations, status_counts, tool_cap_counts
from harness.projections.tick_spend import TickSpendProjection, tick_spend
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


def append(store: SqlEventStore, events: Sequence[Event]) -> int:
    """Append each event to its tick's stream; the last position written (0 for none)."""
    last = 0
    for event in events:
        stream = f"tick-{getattr(event, 'tick_id', 'x')}"
        last = max(last, *store.append(stream, [event.to_record()]).positions)
    return last


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


BOOK = PriceBook()
"""One price book for every example: it caches each (model, day) it looked up."""


@settings(max_examples=200, deadline=None)
@given(
    model=st.sampled_from(["gemini-2.5-pro", "claude-sonnet-4-5", "gpt-4o-mini", "unpriced"]),
    prompt=st.integers(0, 1_000_000) | st.sampled_from(BOOK.tier_bounds()),
    nudge=st.integers(-1, 1),
)
def test_a_prompts_bucket_has_the_prompts_own_tier(model: str, prompt: int, nudge: int) -> None:
    book, day = BOOK, "2026-11-30"
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
            spent("c", "hour", "home-gpu-model", 10, 10, occurred_at=DAY2, template_hash="v2"),
        ],
    )
    prices = PriceBook({"home-gpu-model": PriceOverride(input_per_mtok=1, output_per_mtok=2)})
    projector_for(store, prices).catch_up()
    with store.read_transaction() as conn:
        by_level = spend_report(conn, prices, by=["level"])
        by_day = spend_report(conn, prices, by=["level", "day"], levels=["min"])
        by_model = spend_report(conn, prices, by=["model"], since=date(2026, 11, 29))
        by_template = spend_report(conn, prices, by=["level", "template"])

    hour, minute = by_level
    assert minute.group == {"level": "min"}
    assert (minute.prompt_tokens, minute.completion_tokens) == (2_000_000, 100_000)
    assert (minute.model_calls, minute.estimated_calls) == (2, 1)
    assert minute.cost_usd == pytest.approx(2 * 0.15 + 0.1 * 0.6)
    assert hour.cost_usd is None and hour.unpriced_calls == 1
    assert [row.group["day"] for row in by_day] == ["2026-11-28", "2026-11-29"]
    assert [(row.group, row.model_calls) for row in by_template] == [
        ({"level": "hour", "template": ""}, 1),
        ({"level": "hour", "template": "v2"}, 1),
        ({"level": "min", "template": ""}, 2),
    ]
    costs = {row.group["model"]: row.cost_usd for row in by_model}
    assert costs == {
        "gpt-4o-mini": pytest.approx(0.15),
        "home-gpu-model": pytest.approx((10 + 20) / 1e6),
        "my-local-model": None,
    }


def test_a_call_is_priced_by_its_target_then_the_config_then_genai_prices_and_says_which(
    store: SqlEventStore,
) -> None:
    """The lookup order of `harness.prices`, each report row naming who priced it.

    A target prices only its own model's calls: `moved` runs another model now, so the
    call booked on it before is priced as if it had no target.
    """
    gpu = PriceOverride(input_per_mtok=1, output_per_mtok=2, per_request_usd=0.001)
    moved = PriceOverride(input_per_mtok=9, output_per_mtok=9)
    prices = PriceBook(
        {"qwen": PriceOverride(input_per_mtok=3, output_per_mtok=4)},
        {"gpu": TargetPrices("qwen", gpu), "moved": TargetPrices("other", moved)},
    )
    append(
        store,
        [
            spent("a", "min", "qwen", 1_000_000, 1_000_000, target="gpu", occurred_at=DAY2),
            spent("a", "min", "qwen", 1_000_000, 0, target="gpu", occurred_at=DAY2),
            spent("b", "min", "qwen", 1_000_000, 0, occurred_at=DAY2),
            spent("c", "min", "gpt-4o-mini", 1_000_000, 0, target="moved", occurred_at=DAY2),
            spent("d", "min", "mystery", 10, 10, target="gpu", occurred_at=DAY2),
        ],
    )
    projector_for(store, prices).catch_up()
    with store.read_transaction() as conn:
        rows = spend_report(conn, prices, by=["model", "target"])
    genai = f"genai-prices@{version('genai-prices')}"
    assert [(row.group, row.cost_usd, row.price_sources) for row in rows] == [
        ({"model": "gpt-4o-mini", "target": "moved"}, pytest.approx(0.15), (genai,)),
        ({"model": "mystery", "target": "gpu"}, None, ("unpriced",)),
        ({"model": "qwen", "target": ""}, pytest.approx(3.0), ("config",)),
        ({"model": "qwen", "target": "gpu"}, pytest.approx(2 + 2 + 0.002), ("catalog:gpu",)),
    ]
    with store.read_transaction() as conn:
        (total,) = spend_report(conn, prices, by=["level"])
    assert total.cost_usd is None and total.unpriced_calls == 1
    assert total.price_sources == ("catalog:gpu", "config", genai, "unpriced")


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


def test_a_ticks_row_has_the_model_it_spent_on_and_its_wait_from_claim_to_first_start(
    store: SqlEventStore,
) -> None:
    """The model of its last spend, else the one it was scheduled for.

    A retry's start (after its backoff) does not move the wait, nor does a rebuild.
    """
    at = datetime(2026, 11, 30, 12, tzinfo=UTC)
    seconds = [at + timedelta(seconds=n) for n in range(100)]
    events = [
        TickScheduled(tick_id="t1", level="min", model="planned", occurred_at=seconds[0]),
        TickScheduled(tick_id="t2", level="min", model="planned", occurred_at=seconds[1]),
        TickStarted(tick_id="t1", level="min", pid=1, host="h", occurred_at=seconds[3]),
        spent("t1", "min", "fallback-model", 10, 1),
        TickStarted(tick_id="t1", level="min", pid=2, host="h", attempt=2, occurred_at=seconds[60]),
        TickCompleted(tick_id="t1", level="min", occurred_at=seconds[61]),
        TickStarted(tick_id="t3", level="hour", pid=3, host="h", occurred_at=seconds[5]),
        TickScheduled(tick_id="t3", level="hour", model="m3", occurred_at=seconds[4]),
    ]
    projector = Projector(store, [TicksProjection()], batch_size=2)
    for event in events:
        append(store, [event])
        projector.catch_up()
    with store.read_transaction() as conn:
        rows = {
            row.tick_id: (row.model, row.queue_wait_seconds)
            for row in conn.execute(sa.select(ticks))
        }
    # t3's start came before its claim in the log: no start follows a claim, no wait known.
    assert rows == {"t1": ("fallback-model", 3.0), "t2": ("planned", None), "t3": ("m3", None)}
    kept = _dump(store)
    Projector(store, [TicksProjection()]).rebuild("ticks")
    assert _dump(store) == kept


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
            for table in (spend_daily, ticks, tick_level_latest, *COUNTERS)
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


def _varied_spend(store: SqlEventStore, count: int) -> int:
    """`count` varied spend events appended; returns the last one's position."""
    models = ["gemini-2.5-pro", "gpt-4o-mini", "unpriced-model"]
    return append(
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
                template_hash=[None, "0123456789abcdef", "fedcba9876543210"][i % 4 % 3],
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


def _tick_spend_dump(store: SqlEventStore) -> list[tuple[Any, ...]]:
    with store.read_transaction() as conn:
        return sorted(tuple(row) for row in conn.execute(sa.select(tick_spend)))


def test_a_fold_in_parts_chunk_by_chunk_equals_the_fold_in_one_process(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each of the 7 ticks spends in every chunk: its rows are added to chunk after chunk.
    _varied_spend(store, 90)
    prices = PriceBook()
    read_models = [SpendProjection(prices), TickSpendProjection(prices)]
    one = Projector(store, read_models, processes=1, partition_above=10)
    for name in ("spend", "tick_spend"):
        one.rebuild(name)
    alone = _spend_dump(store), _tick_spend_dump(store)

    monkeypatch.setattr(projector_module, "FOLD_CHUNK", 25)
    chunks = Projector(store, read_models, batch_size=20, partition_above=10, processes=2)
    assert chunks.rebuild("spend") == 90 and chunks.spawned == 4
    reported: list[tuple[int, int]] = []
    assert chunks.rebuild("tick_spend", lambda *told: reported.append(told)) == 90
    assert chunks.spawned == 8
    assert (_spend_dump(store), _tick_spend_dump(store)) == alone
    everything = store.window(0, store.last_position()).events
    chunked = [done for done, _ in reported if done < everything]
    assert len(chunked) >= 3 and chunked == sorted(chunked), "each chunk is reported"
    assert {total for _, total in reported[: len(chunked)]} == {everything}
    last = store.last_position()
    assert chunks.checkpoints() == {"spend": last, "tick_spend": last}


def test_a_catch_up_below_the_threshold_spawns_no_process(store: SqlEventStore) -> None:
    # Each backlog is counted once settled: on PostgreSQL a catch-up started while its
    # last appends still commit would count fewer and fold by windows instead.
    assert store.wait_settled(_varied_spend(store, 30))
    projector = Projector(
        store, [SpendProjection(PriceBook())], batch_size=7, partition_above=30, processes=2
    )
    assert projector.catch_up() == 30 and projector.spawned == 0
    assert store.wait_settled(_varied_spend(store, 31))
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
    template_hash=st.none() | st.sampled_from(["0123456789abcdef", "fedcba9876543210"]),
)
lifecycle = st.one_of(
    st.builds(
        TickScheduled,
        tick_id=ticks_ids,
        level=levels,
        slot=moments,
        fire_at=st.none() | moments,
        attempt=st.sampled_from([1, 2]),
        model=st.none() | models,
        occurred_at=moments,
    ),
    st.builds(
        TickStarted,
        tick_id=ticks_ids,
        level=levels,
        pid=st.just(1),
        host=st.just("h"),
        occurred_at=moments | st.just(DAY2 + HOUR),
    ),
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


@pytest.mark.long
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(st.one_of(spends, lifecycle), max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=5),
    batch_size=st.integers(1, 25),
)
@example(  # a second start folded alone once dated the tick's list time by itself
    events=[
        TickStarted(tick_id="t1", level="min", pid=1, host="h", occurred_at=DAY1),
        TickStarted(tick_id="t1", level="min", pid=1, host="h", occurred_at=DAY2 + HOUR),
    ],
    cuts=[],
    batch_size=1,
)
def test_rebuild_from_zero_equals_the_incremental_read_models(
    store: SqlEventStore,
    monkeypatch: pytest.MonkeyPatch,
    events: list[Event],
    cuts: list[int],
    batch_size: int,
) -> None:
    # PostgreSQL's events keep their ids and tick streams' days beside them (0010).
    beside = ("event_ids", "tick_streams") if store.engine.dialect.name == "postgresql" else ()
    with store.write_transaction() as conn:
        for table in (
            "events",
            *beside,
            "projection_checkpoints",
            "spend_daily",
            "ticks",
            "tick_level_latest",
            *COUNTERS,
        ):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    incremental = Projector(store, [SpendProjection(PriceBook()), TicksProjection()], batch_size)
    done = last = 0
    for cut in [*sorted(set(cuts)), len(events)]:
        last = max(last, append(store, events[done:cut]))
        done = max(done, cut)
        incremental.catch_up()
    assert store.last_position() == last, "every append is readable once it returns"
    incremental.catch_up()
    kept = _dump(store)
    _assert_latest_is_the_walk(store)

    rebuilder = projector_for(store, PriceBook())
    rebuilder.rebuild("spend")
    rebuilder.rebuild("ticks")
    assert _dump(store) == kept
    with store.read_transaction() as conn:
        by_status = conn.execute(
            sa.select(ticks.c.level, ticks.c.status, sa.func.count()).group_by(
                ticks.c.level, ticks.c.status
            )
        )
        assert sorted(status_counts(conn)) == sorted(tuple(row) for row in by_status)
    in_parts = Projector(store, [SpendProjection(PriceBook())], batch_size, partition_above=0)
    in_parts.rebuild("spend")
    assert _dump(store) == kept
    with monkeypatch.context() as patched:
        patched.setattr(projector_module, "FOLD_CHUNK", 20)  # up to 3 chunks of 60 events
        in_parts.rebuild("spend")
    assert _dump(store) == kept
    prompt_tokens = [column.name for column in spend_daily.columns].index("prompt_tokens")
    spend_total = sum(row[prompt_tokens] for row in kept["spend_daily"])
    assert spend_total == sum(e.prompt_tokens for e in events if isinstance(e, BudgetSpent))


def _assert_latest_is_the_walk(store: SqlEventStore) -> None:
    """Each level's kept newest and newest ended tick are what a walk of its ticks finds."""
    newest = (ticks.c.sort_at.desc(), ticks.c.tick_id.desc())
    with store.read_transaction() as conn:
        levels = set(conn.execute(sa.select(ticks.c.level)).scalars())
        statuses = newest_statuses(conn, [*levels, "never"])
        ended = newest_ended(conn, [*levels, "never"])
        walked = {}
        for level in levels:
            mine = sa.select(ticks.c.tick_id, ticks.c.status, ticks.c.finished_at)
            mine = mine.where(ticks.c.level == level).order_by(*newest).limit(1)
            last, done = (
                conn.execute(query).one_or_none()
                for query in (mine, mine.where(ticks.c.status.in_(ENDED)))
            )
            walked[level] = (
                None if last is None else last.status,
                None if done is None else (done.tick_id, done.status, as_utc(done.finished_at)),
            )
    done_kept = {level: (e.tick_id, e.status, e.finished_at) for level, e in ended.items()}
    assert {level: (statuses.get(level), done_kept.get(level)) for level in levels} == walked


def test_tick_counters_move_each_tick_once_whatever_the_order_of_its_events(
    store: SqlEventStore,
) -> None:
    """Spend before the lifecycle, an end before its start: counted once, buckets only grow."""
    at = datetime(2026, 11, 30, 12, tzinfo=UTC)
    events = [
        spent("t1", "min", "m", 10, 1),
        TickScheduled(tick_id="t1", level="min", slot=at, occurred_at=at),
        TickStarted(tick_id="t1", level="min", pid=1, host="h", occurred_at=at),
        ToolCalled(tick_id="t1", level="min", name="shell", status="cancelled"),
        ToolCalled(tick_id="t1", level="min", name="shell", status="cancelled"),
        TickCompleted(tick_id="t1", level="min", occurred_at=at + timedelta(seconds=3)),
        TickScheduled(tick_id="t3", level="hour", slot=at, occurred_at=at),
        TickTimedOut(
            tick_id="t2", level="min", timeout_seconds=5, occurred_at=at + timedelta(seconds=100)
        ),
        TickStarted(
            tick_id="t2", level="min", pid=2, host="h", occurred_at=at + timedelta(seconds=10)
        ),
    ]
    projector = Projector(store, [TicksProjection()], batch_size=2)
    seen: list[dict[str, list[int]]] = []
    for event in events:
        append(store, [event])
        projector.catch_up()
        with store.read_transaction() as conn:
            figures = {d.level: [d.count, *d.at_most] for d in durations(conn)}
            for level, hits, refused in tool_cap_counts(conn):
                figures[f"{level} caps"] = [hits, refused]
            seen.append(figures)
    for before, after in pairwise(seen):
        assert all(
            all(a <= b for a, b in zip(figures, after.get(level, ()), strict=True))
            for level, figures in before.items()
        )
    with store.read_transaction() as conn:
        # A status follows the tick's row: its last lifecycle event in the log's order.
        assert status_counts(conn) == [
            ("hour", "scheduled", 1),
            ("min", "completed", 1),
            ("min", "running", 1),
        ]
        (minute,) = durations(conn)
        assert tool_cap_counts(conn) == [("hour", 0, 0), ("min", 1, 2)]
    assert (minute.level, minute.count, minute.total_seconds) == ("min", 2, 93.0)
    assert minute.at_most == [0, 1, 1, 1, 1, 2, 2, 2, 2, 2]
    kept = _dump(store)
    Projector(store, [TicksProjection()]).rebuild("ticks")
    assert _dump(store) == kept


def test_cancel_scopes_are_the_same_folded_or_not_and_after_a_rebuild(
    store: SqlEventStore,
) -> None:
    """The read model names the requests in force; the stream's tail past it is read too."""
    legacy = NewEvent(uuid4(), "CancelRequested", 1, {"scope": "old", "by": "v1"})
    store.append(CONTROL_STREAM, [legacy])
    steps = [
        (CancelRequested(scope="min", by="a"), [("min", "a")]),
        (CancelRequested(scope="t-1", by="b"), [("min", "a"), ("t-1", "b")]),
        (CancelRequested(scope="min", by="c"), [("t-1", "b"), ("min", "c")]),
        (CancelCleared(scope="t-1"), [("min", "c")]),
        (CancelCleared(scope="min"), []),
        (CancelRequested(scope="t-1", by="d"), [("t-1", "d")]),
    ]
    projector = projector_for(store, PriceBook())
    for event, expected in steps:
        store.append(CONTROL_STREAM, [event.to_record()])
        assert [(s.scope, s.by) for s in cancel_scopes(store)] == expected
        projector.catch_up(["cancel_scopes"])
        in_force = cancel_scopes(store)
        assert [(s.scope, s.by) for s in in_force] == expected
    assert in_force[0].event_id == event.event_id
    kept = _tables(store, cancel_scopes_folded)
    projector.rebuild("cancel_scopes")
    assert _tables(store, cancel_scopes_folded) == kept


def test_the_latest_digest_is_the_newest_publication_of_the_digests_asked_for(
    store: SqlEventStore,
) -> None:
    projector = projector_for(store, PriceBook())
    assert latest_published(store, ["daily", "weekly"]) is None
    published = []
    for name in ("daily", "weekly", "daily", "other"):
        event = DigestPublished(
            name=name,
            period_start=DAY1,
            period_end=DAY2,
            format="md",
            content_hash="h",
            path=f"/d/{len(published)}.md",
            targets=[],
            delivery={},
        )
        store.append(event.stream_id, [event.to_record()])
        published.append(event)
        projector.catch_up()
    latest = latest_published(store, ["daily", "weekly"])
    assert latest is not None and latest.event_id == published[2].event_id
    weekly = latest_published(store, ["weekly"])
    assert weekly is not None and weekly.data["path"] == "/d/1.md"
    kept = _tables(store, digests_published)
    projector.rebuild("digests")
    assert _tables(store, digests_published) == kept


def _tables(store: SqlEventStore, *tables: sa.Table) -> list[list[tuple[Any, ...]]]:
    with store.read_transaction() as conn:
        return [sorted(tuple(row) for row in conn.execute(sa.select(t))) for t in tables]


def test_a_postgres_rebuild_truncates_leaving_no_dead_rows_behind(pg_store: SqlEventStore) -> None:
    """TRUNCATE gives each table a new file: the old rows are gone, not dead tuples."""
    at = datetime(2026, 11, 30, 12, tzinfo=UTC)
    append(
        pg_store,
        [
            event
            for n in range(20)
            for event in (
                TickStarted(tick_id=f"t{n}", level="min", pid=1, host="h", occurred_at=at),
                spent(f"t{n}", "min", "gpt-4o-mini", 100, 10),
                TickCompleted(tick_id=f"t{n}", level="min", occurred_at=at + timedelta(seconds=n)),
            )
        ],
    )
    projector = projector_for(pg_store, PriceBook())
    projector.catch_up()
    kept = _dump(pg_store)
    names = [table.name for table in (ticks, *COUNTERS)]

    def files() -> dict[str, int]:
        query = sa.text("SELECT relname, relfilenode FROM pg_class WHERE relname = ANY(:names)")
        with pg_store.read_transaction() as conn:
            return dict(conn.execute(query, {"names": names}).all())

    before = files()
    projector.rebuild("ticks")
    after = files()
    assert sorted(after) == sorted(names)
    assert all(after[name] != before[name] for name in names)
    assert _dump(pg_store) == kept


class CountingPrices(PriceBook):
    """The real price book, counting the rows it is asked to price."""

    priced = 0

    def cost(self, *args: Any, **kwargs: Any) -> float | None:
        self.priced += 1
        return super().cost(*args, **kwargs)


def test_a_spend_report_prices_each_aggregate_once_and_agrees_to_the_cent(
    store: SqlEventStore,
) -> None:
    append(
        store,
        [
            spent(f"t{n}", f"level{n}", model, 1_000_000 + n * 997, 100_000 + n, occurred_at=day)
            for n in range(30)
            for model in ("gpt-4o-mini", "unpriced-model")
            for day in (DAY1, DAY2)
        ],
    )
    prices = CountingPrices()
    projector_for(store, prices).catch_up()
    with store.read_transaction() as conn:
        by_level = spend_report(conn, prices, by=["level", "model"])
        assert prices.priced == 30 * 2 * 2
        prices.priced = 0
        by_model = spend_report(conn, prices, by=["model"])
    assert prices.priced == 2 * 2  # one row per model and day, not one per level
    per_level = sum(r.cost_usd or 0 for r in by_level if r.group["model"] == "gpt-4o-mini")
    known, unpriced = by_model
    assert known.group == {"model": "gpt-4o-mini"} and known.cost_usd is not None
    assert round(known.cost_usd, 2) == round(per_level, 2) and known.cost_usd > 0
    assert unpriced.cost_usd is None and unpriced.unpriced_calls == 60
    assert known.prompt_tokens == sum(r.prompt_tokens for r in by_level) // 2


def test_period_counts_from_hourly_counters_equal_counting_the_ticks(
    store: SqlEventStore,
) -> None:
    """Whole hours come from the counters, ragged ends from the ticks: the same counts."""
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    for n, minutes in enumerate((15, 59.99, 60, 90, 120, 165, 190, 200)):
        ids = {"tick_id": f"t{n}", "level": "min" if n % 3 else "hour"}
        when = at + timedelta(minutes=minutes)
        ends: list[Event] = [
            TickCompleted(**ids),
            TickSkipped(**ids, reason="budget"),
            TickSkipped(**ids, reason="overlap"),
            TickFailed(**ids, reason="x", failure_class="content"),
        ][n % 4 : n % 4 + 1]
        append(store, [TickScheduled(**ids, slot=when, occurred_at=when), *ends])
    # a tick rescheduled later moves from one hour to the next
    append(store, [TickScheduled(tick_id="t0", level="hour", occurred_at=at + timedelta(hours=2))])
    projector_for(store, PriceBook()).catch_up()

    def counted(start: datetime, end: datetime) -> list[tuple[Any, ...]]:
        why = sa.case((ticks.c.status == "skipped", ticks.c.reason), else_=None)
        query = (
            sa.select(ticks.c.level, ticks.c.status, why, sa.func.count())
            .where(ticks.c.scheduled_at >= start, ticks.c.scheduled_at < end)
            .group_by(ticks.c.level, ticks.c.status, why)
        )
        return sorted(tuple(row) for row in conn.execute(query))

    with store.read_transaction() as conn:
        for start, end in [(0, 4), (0.5, 2.84), (0.99, 1.02), (1, 3), (1.5, 1.7), (-1, 9)]:
            window = (at + timedelta(hours=start), at + timedelta(hours=end))
            found = sorted(period_counts(conn, *window, ["min", "hour"]))
            assert found == counted(*window), (start, end)
        assert sum(n for *_, n in period_counts(conn, at, at + timedelta(hours=4), ["min"])) == 5


def test_level_stats_say_the_last_outcome_the_success_rate_and_run_times(
    store: SqlEventStore,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    # Today's ticks (UTC), however soon after midnight the test runs.
    first = max(now - timedelta(minutes=10), now.replace(hour=0, minute=0, second=0))
    for n, ended in enumerate(("completed", "completed", "completed", "failed")):
        tick_id, at = f"min-{n}", first + timedelta(seconds=n)
        started = TickStarted(
            tick_id=tick_id, level="min", pid=1, host="h", occurred_at=at + timedelta(seconds=1)
        )
        end_at = at + timedelta(seconds=3 if n < 3 else 40)
        end: Event = (
            TickCompleted(tick_id=tick_id, level="min", occurred_at=end_at)
            if ended == "completed"
            else TickFailed(tick_id=tick_id, level="min", reason="boom", occurred_at=end_at)
        )
        scheduled = TickScheduled(tick_id=tick_id, level="min", occurred_at=at)
        store.append(f"tick-{tick_id}", [e.to_record() for e in (scheduled, started, end)])
    projector_for(store, PriceBook()).catch_up()
    stats, idle = stats_of_levels(store, ["min", "hour"], now)
    assert (stats.last_tick_id, stats.last_status) == ("min-3", "failed")
    assert (stats.completed_today, stats.failed_today, stats.success_rate) == (3, 1, 0.75)
    assert (stats.p50_seconds, stats.p95_seconds) == (5.0, 60.0), "from the histogram's bounds"
    assert idle.last_tick_id is None and idle.success_rate is None and idle.p50_seconds is None


def test_a_catch_up_ends_with_what_was_appended_before_it_while_appends_go_on(
    store: SqlEventStore,
) -> None:
    """An event is appended after each window folded: the call still ends after one.

    A fold that chased the moving horizon held its turn (and a connection) for as long as
    appends went on: under load, every tick preparing its calibrations waited behind it
    (issue 45). The event appended meanwhile is the next call's.
    """
    projection = Windows()

    def grow(done: int, ahead: int) -> None:
        if len(projection.batches) < 50:
            store.append("tick-chase", [spent("chase", "min", "m", 1, 1).to_record()])

    grow(0, 0)
    Projector(store, [projection], batch_size=1).catch_up(progress=grow)
    assert len(projection.batches) == 1
    Projector(store, [projection], batch_size=1).catch_up()
    assert len(projection.batches) == 2
