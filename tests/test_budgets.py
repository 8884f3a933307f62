"""Budgets as data: `[[budgets]]` on any scope and window, their actions, and what they show."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.cli.app import checked_settings
from harness.config import (
    ConfigError,
    LevelConfig,
    PriceOverride,
    RoutingConfig,
    RunnerConfig,
    Settings,
    load_settings,
)
from harness.contracts import (
    Billing,
    BudgetCrossed,
    BudgetProjected,
    BudgetSpent,
    LevelBudgetExceeded,
    LevelPaused,
    LevelResumed,
    RouteFallback,
    decode,
)
from harness.contracts.budgets import BudgetEntry, window_of
from harness.contracts.events import TERMINAL_TYPES, budget_stream, level_stream
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.executors import LocalExecutor
from harness.execution.lifecycle import Decisions
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.budget_windows import (
    BudgetWindowsProjection,
    budget_window_spend,
    ensure_folded,
)
from harness.projections.spend import spend_by
from harness.routing.catalog import CatalogError
from harness.routing.decisions import configured_router
from harness.scheduling.alerts import Alerter
from harness.scheduling.budget import Budgets
from harness.scheduling.budget_watch import BudgetWatch, budget_statuses, held_paused
from harness.scheduling.control import switch_level
from harness.scheduling.describe import describe_levels
from harness.scheduling.log_feed import LogFeed
from harness.scheduling.service import Service
from harness.scheduling.state_lines import state_line
from harness.scheduling.waves import SlotClaim, claim_wave
from harness.store import EventStore, SqlEventStore, open_store
from tests.catalog_support import valid
from tests.commands import forked, forked_each, write_config
from tests.test_reload import service_on, write
from tests.test_routing import Routed, of_type, target, write_catalog
from tests.tick_support import Harness, calls, run_claims

BERLIN = "Europe/Berlin"


def _level(**fields: Any) -> LevelConfig:
    """A level that reserves nothing unless told: any budget can pay its tick."""
    return LevelConfig(every="1m", model="fake-model", **{"reserve_tokens": 0, **fields})


def _settings(tmp_path: Path, budgets: list[dict[str, Any]], **levels: LevelConfig) -> Settings:
    return Settings(
        store={"url": f"sqlite:///{tmp_path}/events.db"},  # type: ignore[arg-type]
        levels=levels or {"min": _level(tags=["team-a"]), "hour": _level()},
        budgets=[BudgetEntry(**entry) for entry in budgets],
    )


def _spend(
    store: EventStore,
    level: str,
    at: datetime,
    tokens: int,
    n: int = 0,
    billing: Billing = "api",
) -> None:
    spent = BudgetSpent(
        tick_id=f"{level}-{at:%Y%m%d%H%M}-{n}",
        level=level,
        model="fake-model",
        prompt_tokens=tokens,
        completion_tokens=0,
        occurred_at=at,
        billing=billing,
    )
    store.append(spent.stream_id, [spent.to_record()])


def _budgets(settings: Settings, store: EventStore) -> Budgets:
    prices = PriceBook(settings.prices)
    return Budgets(store, projector_for(store, prices), prices, settings)


BAD = [
    ('scope = "tag:nobody"\ntokens = 5', "budgets.0.scope: no level carries tag 'nobody'"),
    ('scope = "level:ghost"\ntokens = 5', "budgets.0.scope: no level named 'ghost'"),
    ('scope = "team:a"\ntokens = 5', "budgets.0.scope: must match the pattern"),
    ('scope = "global"\ntokens = 0', "budgets.0.tokens: must be greater than 0"),
    ('scope = "global"\nusd = -1.5', "budgets.0.usd: must be greater than 0"),
    ('scope = "global"\nlist_usd = 0', "budgets.0.list_usd: must be greater than 0"),
    ('scope = "global"\nlist_usd = "lots"', "budgets.0.list_usd: must be a valid number"),
    ('scope = "global"', "budgets.0: a budget needs a limit"),
    ('scope = "global"\ntokens = 5\naction = "reroute"', "action 'reroute' needs a 'target:'"),
    ('scope = "target:gpu"\ntokens = 5\naction = "pause"', "action 'pause' pauses levels"),
    ('scope = "global"\ntokens = 5\nalert_at = [0.8, 0.5]', "budgets.0.alert_at: "),
    ('scope = "global"\ntokens = 5\nwindow = "fortnight"', "budgets.0.window: must be"),
    ('scope = "target:gpu"\ntokens = 5', "budgets.0.scope: a target: scope needs a [routing]"),
    # Overlapping: the same scope and window twice.
    (
        'scope = "global"\ntokens = 5\n[[budgets]]\nname = "b2"\nscope = "global"\nusd = 1',
        "budgets.1: overlaps budgets.0 (same scope 'global' and window 'day')",
    ),
    # Contradictory: a tag's limit at or above the global one of the same window never binds.
    (
        'scope = "global"\ntokens = 5\n[[budgets]]\nname = "b2"\nscope = "tag:team-a"\ntokens = 9',
        "budgets.1.tokens: 9 can never bind: budgets.0 (global, same window) stops at 5",
    ),
    # The old daily key is an entry too: a level: day budget beside it overlaps.
    (
        'scope = "level:min"\ntokens = 5',
        "levels.min.daily_*_budget: overlaps budgets.0 (same scope 'level:min'",
    ),
]


@pytest.mark.parametrize(("entry", "message"), BAD, ids=range(len(BAD)))
def test_bad_budgets_are_refused_at_load_with_the_entrys_path(
    tmp_path: Path, entry: str, message: str
) -> None:
    daily = "daily_token_budget = 50\n" if "level:min" in entry else ""
    path = tmp_path / "tickwork.toml"
    path.write_text(
        '[levels.min]\nevery = "1m"\nmodel = "m"\ntags = ["team-a"]\n'
        f'{daily}\n[[budgets]]\nname = "b1"\n{entry}\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert message in str(caught.value), str(caught.value)


def test_a_target_budget_must_name_a_target_of_the_catalog(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(valid()))
    gpu = BudgetEntry(name="gpu", scope="target:gpu", tokens=5, action="reroute")
    settings = _settings(tmp_path, []).model_copy(
        update={"budgets": [gpu], "routing": RoutingConfig(catalog=catalog)}
    )
    with pytest.raises(CatalogError) as caught:
        configured_router(settings)
    assert "budgets.0.scope: the catalog has no target named 'gpu'" in str(caught.value)

    # A provider scope holds the catalog's targets on that host.
    cloud = BudgetEntry(name="cloud", scope="provider:api.example.com", usd=5, action="reroute")
    routed = settings.model_copy(update={"budgets": [cloud]})
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    (rule,) = _budgets(routed, store).rules
    assert rule.targets == {"mini", "large"} and rule.covers("min", "mini")
    assert not rule.covers("min", "local") and not rule.covers_level("min")
    store.close()


def test_a_budgets_told_of_no_reload_decides_by_the_budgets_and_levels_in_force(
    store: SqlEventStore, tmp_path: Path
) -> None:
    """The runner's budgets (`Decisions`) share the service's settings and hear of no reload."""
    settings = _settings(tmp_path, [{"name": "all", "scope": "global", "tokens": 1_000}])
    day = datetime(2026, 12, 1, 9, tzinfo=UTC)
    _spend(store, "min", day, 150)
    budgets = Decisions(settings, store, None).budgets
    assert budgets.over("min", day) is None

    settings.replace_budgets([BudgetEntry(name="all", scope="global", tokens=100)])
    over = budgets.over("min", day)
    assert over is not None and (over.budget, over.limit_tokens) == ("all", 100), over

    settings.replace_budgets([])
    assert budgets.over("min", day) is None
    held = settings.levels["min"].model_copy(update={"daily_token_budget": 100})
    settings.replace_levels({**settings.levels, "min": held})
    over = budgets.over("min", day)
    assert over is not None and over.budget == "level-min-daily", over
    assert budgets.over("hour", day) is None


def test_a_watch_pass_pairs_statuses_read_before_a_reload_with_its_budgets_by_name(
    store: SqlEventStore, tmp_path: Path
) -> None:
    """The rules follow a reload by themselves, so they may change within one watch pass."""
    kept = {"name": "kept", "scope": "level:min", "tokens": 100, "action": "pause"}
    gone = {"name": "gone", "scope": "level:hour", "tokens": 100, "action": "pause"}
    settings = _settings(tmp_path, [gone, kept])
    day = datetime(2026, 12, 1, 9, tzinfo=UTC)
    _spend(store, "min", day, 150)
    budgets = _budgets(settings, store)
    statuses = budget_statuses(budgets, day)
    settings.replace_budgets([BudgetEntry(**kept)])
    assert set(held_paused(budgets, statuses)) == {"min"}


def test_a_provider_budget_holds_the_targets_of_the_catalog_in_force_not_the_file(
    store: SqlEventStore, tmp_path: Path
) -> None:
    """A target moved to another host leaves the provider's budget; a broken file changes nothing.

    The router keeps the last valid catalog in force when the file turns invalid: the
    budgets follow it, and one made then (the preparer's, at its first tick) does not raise.
    """
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(valid()))
    cloud = BudgetEntry(name="cloud", scope="provider:api.example.com", usd=5, action="reroute")
    settings = _settings(tmp_path, []).model_copy(
        update={"budgets": [cloud], "routing": RoutingConfig(catalog=catalog)}
    )
    router = configured_router(settings)
    assert router is not None
    prices = PriceBook()
    budgets = Budgets(store, projector_for(store, prices), prices, settings, router=router)
    assert budgets.rules[0].targets == {"mini", "large"}

    moved = valid()
    moved["targets"]["large"]["base_url"] = "https://api.elsewhere.example/v1"
    catalog.write_text(json.dumps(moved))
    router.source.poll()
    assert budgets.rules[0].targets == {"mini"}

    catalog.write_text("{")
    router.source.poll()
    later = Budgets(store, projector_for(store, prices), prices, settings, router=router)
    assert budgets.rules[0].targets == later.rules[0].targets == {"mini"}


def test_calendar_windows_follow_the_zones_dst_and_the_months_end() -> None:
    autumn = window_of("day", BERLIN, datetime(2026, 10, 25, 12, tzinfo=UTC))
    assert autumn.end - autumn.start == timedelta(hours=25)
    spring = window_of("day", BERLIN, datetime(2026, 3, 29, 12, tzinfo=UTC))
    assert spring.end - spring.start == timedelta(hours=23)
    february = window_of("month", BERLIN, datetime(2028, 2, 29, 22, 59, tzinfo=UTC))
    assert (february.start, february.end) == (
        datetime(2028, 1, 31, 23, tzinfo=UTC),
        datetime(2028, 2, 29, 23, tzinfo=UTC),
    )
    week = window_of("week", "America/New_York", datetime(2026, 3, 9, 3, tzinfo=UTC))
    assert (week.start, week.end) == (
        datetime(2026, 3, 2, 5, tzinfo=UTC),  # Monday midnight EST
        datetime(2026, 3, 9, 4, tzinfo=UTC),  # the next Monday's, in EDT
    )
    rolling = window_of("24h", "UTC", datetime(2026, 3, 9, 3, 5, tzinfo=UTC))
    assert rolling.end - rolling.start == timedelta(hours=24)


def test_spend_counts_in_the_window_it_occurred_in_across_a_month_end_and_a_dst_day(
    store: SqlEventStore, tmp_path: Path
) -> None:
    settings = _settings(
        tmp_path,
        [
            {
                "name": "team-a",
                "scope": "tag:team-a",
                "window": "month",
                "timezone": BERLIN,
                "tokens": 10_000,
            },
            {
                "name": "all-day",
                "scope": "global",
                "window": "day",
                "timezone": BERLIN,
                "tokens": 10_000,
            },
        ],
    )
    # 23:30 on Oct 31 in Berlin, then 00:30 on Nov 1 (both UTC Oct 31); `hour` has no tag.
    _spend(store, "min", datetime(2026, 10, 31, 22, 30, tzinfo=UTC), 100)
    _spend(store, "min", datetime(2026, 10, 31, 23, 30, tzinfo=UTC), 20)
    _spend(store, "hour", datetime(2026, 10, 31, 23, 40, tzinfo=UTC), 3)
    # 23:30 on Oct 25 in Berlin (CET again, UTC+1): still that 25-hour day.
    _spend(store, "hour", datetime(2026, 10, 25, 22, 30, tzinfo=UTC), 7)
    budgets = _budgets(settings, store)
    october = datetime(2026, 10, 31, 22, 45, tzinfo=UTC)
    november = datetime(2026, 11, 1, 9, tzinfo=UTC)
    assert budgets.spent(budgets.rules, october)["team-a"].tokens == 100
    assert budgets.spent(budgets.rules, november)["team-a"].tokens == 20
    assert budgets.spent(budgets.rules, november)["all-day"].tokens == 23
    assert (
        budgets.spent(budgets.rules, datetime(2026, 10, 25, 12, tzinfo=UTC))["all-day"].tokens == 7
    )

    # A budget added later counts its window's earlier spend: the read model is refolded.
    wider = settings.model_copy(
        update={
            "budgets": [
                *settings.budgets,
                BudgetEntry(name="hours", scope="global", window="month", tokens=50_000),
            ]
        }
    )
    later = _budgets(wider, store)
    assert later.spent(later.rules, october)["hours"].tokens == 100 + 20 + 3 + 7
    (status,) = [s for s in budget_statuses(later, october) if s.name == "hours"]
    assert (status.used_tokens, status.remaining_tokens) == (130, 50_000 - 130)
    assert status.window_end == datetime(2026, 11, 1, tzinfo=UTC)
    assert status.runs_out_at is None, "at 130 tokens in 31 days it lasts the month"


def test_a_refold_for_a_new_budget_never_shows_a_half_folded_window(
    store: SqlEventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget check elsewhere reads the old rows while a new budget's refold runs."""
    at = datetime.now(UTC)
    settings = _settings(tmp_path, [{"name": "all", "scope": "global", "tokens": 10**6}])
    _spend(store, "min", at - timedelta(minutes=5), 100)
    before = _budgets(settings, store)
    assert before.spent(before.rules, at)["all"].tokens == 100
    inside, go = threading.Event(), threading.Event()
    apply = BudgetWindowsProjection.apply

    def held_apply(self: BudgetWindowsProjection, conn: Any, batch: Any) -> None:
        apply(self, conn, batch)
        inside.set()
        assert go.wait(60), "the test never let the refold finish"

    monkeypatch.setattr(BudgetWindowsProjection, "apply", held_apply)
    wider = settings.model_copy(
        update={
            "budgets": [
                *settings.budgets,
                BudgetEntry(name="week", scope="global", window="week", tokens=10**6),
            ]
        }
    )
    refolding = _budgets(wider, store)
    results: dict[str, int] = {}
    worker = threading.Thread(
        target=lambda: results.update(
            {k: v.tokens for k, v in refolding.spent(refolding.rules, at).items()}
        )
    )
    seen: list[int] = []
    reader = threading.Thread(
        target=lambda: seen.append(before.spent(before.rules, at, fold=False)["all"].tokens)
    )
    worker.start()
    try:
        assert inside.wait(60), "the refold never folded a batch"
        # Mid-refold, another reader sees the rows as they were before it began (SQLite)
        # or waits for the refold's commit (PostgreSQL's TRUNCATE): never an empty window.
        reader.start()
    finally:
        go.set()
        worker.join(60)
        reader.join(60)
    assert seen == [100]
    assert results == {"all": 100, "week": 100}
    monkeypatch.undo()
    # A second process with the same budgets finds them folded: no refold again.
    again = _budgets(wider, store)
    assert not ensure_folded(store, again.windows, again.rules, at)


def test_the_budgets_read_model_rebuilt_from_zero_equals_the_incremental_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    store = open_store(sqlite_url)
    settings = _settings(
        tmp_path,
        [
            {"name": "rolling", "scope": "global", "window": "24h", "tokens": 10**9},
            {"name": "team-a", "scope": "tag:team-a", "window": "week", "tokens": 10**9},
        ],
    )
    budgets = _budgets(settings, store)
    start = datetime(2026, 12, 1, tzinfo=UTC)
    for n in range(30):  # folded in between, a few events at a time
        _spend(store, ("min", "hour")[n % 2], start + timedelta(minutes=53 * n), 10 + n, n)
        if n % 7 == 0:
            budgets.windows.catch_up()
    budgets.windows.catch_up()

    def rows() -> list[tuple[Any, ...]]:
        with store.read_transaction() as conn:
            return sorted(tuple(r) for r in conn.execute(budget_window_spend.select()))

    incremental = rows()
    assert len(incremental) > 2
    budgets.windows.rebuild("budget_windows")
    assert rows() == incremental
    store.close()


def test_soft_thresholds_and_the_limit_alert_once_per_window(
    store: SqlEventStore, tmp_path: Path
) -> None:
    settings = _settings(
        tmp_path,
        [{"name": "team-a", "scope": "tag:team-a", "tokens": 1_000, "alert_at": [0.5, 0.8]}],
    )
    sent: list[tuple[str, str]] = []

    def sender(url: str, title: str, body: str) -> str:
        sent.append((title, body))
        return "ok"

    alerter = Alerter(settings, store, env={"TICKWORK_ALERT_URLS": "json://x"}, sender=sender)
    assert alerter.poll() == []
    day = datetime(2026, 12, 1, 23, tzinfo=UTC)  # late: no projection runs ahead of the spend
    _spend(store, "min", day, 600)
    replicas = [BudgetWatch(settings, store, _budgets(settings, store)) for _ in range(2)]
    assert [e.threshold for e in replicas[0].poll(day)] == [0.5]
    assert replicas[1].poll(day) == [], "the other replica finds the crossing recorded"
    assert replicas[0].poll(day) == []
    _spend(store, "min", day, 500, n=1)
    assert [e.threshold for e in replicas[1].poll(day)] == [0.8, 1.0]
    raised = alerter.poll()
    assert [a.kind for a in raised] == ["budget"] * 3
    assert len(sent) == 3 and "limit reached (1,100 tokens)" in sent[2][1], sent
    assert alerter.poll() == [] and replicas[0].poll(day) == []

    tomorrow = day + timedelta(days=1)
    _spend(store, "min", tomorrow, 700)
    assert [e.threshold for e in replicas[0].poll(tomorrow)] == [0.5]
    assert len(alerter.poll()) == 1 and len(sent) == 4


def test_a_budget_on_course_for_its_thresholds_warns_once_each_with_time_left(
    store: SqlEventStore, tmp_path: Path
) -> None:
    settings = _settings(
        tmp_path, [{"name": "team-a", "scope": "tag:team-a", "tokens": 1_000, "alert_at": [0.8]}]
    )
    sent: list[str] = []

    def sender(url: str, title: str, body: str) -> str:
        sent.append(body)
        return "ok"

    alerter = Alerter(settings, store, env={"TICKWORK_ALERT_URLS": "json://x"}, sender=sender)
    assert alerter.poll() == []
    lines: list[str] = []
    feed = LogFeed(store, PriceBook(), lines.append)
    day = datetime(2026, 12, 1, tzinfo=UTC)
    _spend(store, "min", day + timedelta(minutes=30), 300)
    watch = BudgetWatch(settings, store, _budgets(settings, store))
    assert watch.poll(day + timedelta(hours=2)) == [], "a tenth of the window has not passed"

    six = day + timedelta(hours=6)  # 300 tokens in 6 h: 50 an hour, 1,200 by midnight
    (status,) = budget_statuses(watch.budgets, six)
    assert (status.projected_tokens, status.projected_fraction) == (1_200, 1.2)
    assert status.runs_out_at == day + timedelta(hours=20)
    warned = watch.poll(six)
    assert [(type(e), e.threshold, getattr(e, "reaches_at", None)) for e in warned] == [
        (BudgetProjected, 0.8, day + timedelta(hours=16)),
        (BudgetProjected, 1.0, day + timedelta(hours=20)),
    ]
    restarted = BudgetWatch(settings, store, _budgets(settings, store))
    assert restarted.poll(six + timedelta(hours=1)) == [], "once, across a restart"
    assert watch.poll(six) == []
    assert len(alerter.poll()) == 2
    assert "budget team-a (tag:team-a): 80% reached at 2026-12-01 16:00 UTC" in sent[0], sent
    assert "(300 tokens spent, 1,200 tokens by its end)" in sent[0]
    feed.poll()
    assert lines[0] == (
        "budget team-a on course for 80% at 2026-12-01 16:00 UTC (tag:team-a, window to "
        "2026-12-02 00:00): 300 of 1,000 tokens spent, 1,200 tokens by the window's end at "
        "its rate so far"
    ), lines
    assert lines[1].startswith("budget team-a on course for its limit at 2026-12-01 20:00 UTC")

    _spend(store, "min", six + timedelta(hours=1), 550, n=1)
    (crossed,) = restarted.poll(six + timedelta(hours=2))
    assert (type(crossed), crossed.threshold) == (BudgetCrossed, 0.8), "warned is not crossed"
    assert len(alerter.poll()) == 1 and len(sent) == 3

    tomorrow = day + timedelta(days=1, hours=12)  # a new window: 100 in 12 h lasts the day
    _spend(store, "min", tomorrow, 100)
    assert restarted.poll(tomorrow) == []
    (calm,) = budget_statuses(watch.budgets, tomorrow)
    assert (calm.projected_tokens, calm.runs_out_at) == (200, None)


def test_a_pause_budget_pauses_its_levels_once_per_window_as_budget(
    store: SqlEventStore, tmp_path: Path
) -> None:
    settings = _settings(
        tmp_path, [{"name": "team-a", "scope": "tag:team-a", "tokens": 100, "action": "pause"}]
    )
    watch = BudgetWatch(settings, store, _budgets(settings, store))
    day = datetime(2026, 12, 1, 9, tzinfo=UTC)
    _spend(store, "min", day, 150)
    (crossed,) = watch.poll(day)
    assert crossed.levels == ["min"], "only the tagged level"
    (paused,) = [e for e in store.read_stream(level_stream("min")) if e.type == LevelPaused.type]
    assert paused.data["by"] == "budget" and "budget team-a" in paused.data["reason"]
    assert not store.read_stream(level_stream("hour"))

    switch_level(settings, store, "min", pause=False, by="operator")
    assert BudgetWatch(settings, store, _budgets(settings, store)).poll(day) == []
    assert store.read_stream(level_stream("min"))[-1].data["by"] == "operator", "resume holds"
    assert len(store.read_stream(budget_stream("team-a"))) == 1
    assert store.read_stream(budget_stream("team-a"))[0].type == BudgetCrossed.type


def test_a_pause_budget_on_billed_usd_pauses_the_metered_level_not_the_subscription_one(
    store: SqlEventStore, tmp_path: Path
) -> None:
    """Both levels spent USD 2 of list value; only `hour`'s was billed, passing USD 1."""
    prices = {"fake-model": PriceOverride(input_per_mtok=1.0, output_per_mtok=1.0)}
    budget = {"name": "bill", "scope": "global", "usd": 1.0, "action": "pause"}
    levels = {"min": _level(billing="subscription"), "hour": _level()}
    settings = _settings(tmp_path, [budget], **levels).model_copy(update={"prices": prices})
    day = datetime(2026, 12, 1, 9, tzinfo=UTC)
    _spend(store, "min", day, 2_000_000, billing="subscription")
    _spend(store, "hour", day, 2_000_000)
    (crossed,) = BudgetWatch(settings, store, _budgets(settings, store)).poll(day)
    assert (crossed.used_usd, crossed.levels) == (2.0, ["hour"])
    assert not store.read_stream(level_stream("min")), "the subscription level runs on"


def test_the_service_log_tells_a_budget_crossing_its_pauses_and_a_level_over_budget(
    store: SqlEventStore, tmp_path: Path
) -> None:
    settings = _settings(
        tmp_path, [{"name": "team-a", "scope": "tag:team-a", "tokens": 100, "action": "pause"}]
    )
    lines: list[str] = []
    feed = LogFeed(store, PriceBook(), lines.append)
    day = datetime.now(UTC)
    _spend(store, "min", day, 150)
    BudgetWatch(settings, store, _budgets(settings, store)).poll(day)
    over = LevelBudgetExceeded(
        level="hour", day=f"{day:%Y-%m-%d}", spent_tokens=900, spent_usd=None, reserved_tokens=0
    )
    store.append(level_stream("hour"), [over.to_record()])
    feed.poll()
    paused, crossed, exceeded = lines
    assert crossed.startswith("budget team-a crossed 100% (tag:team-a, window to "), crossed
    assert crossed.endswith("150 of 100 tokens spent; its levels are paused (min)"), crossed
    assert paused.startswith("min paused (budget team-a (tag:team-a, day) spent: 150 tokens")
    assert paused.endswith("): by budget; no tick starts until `tickwork resume min`"), paused
    assert exceeded == (
        f"hour over its daily budget ({day:%Y-%m-%d} UTC): 900 tokens spent; its slots are "
        "skipped `budget` until the next UTC day"
    )


def test_a_stop_budget_skips_slots_and_stops_a_tick_before_its_next_call(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, reserve_tokens=0)
    global_budget = BudgetEntry(name="everything", scope="global", tokens=1_000)
    harness.settings = harness.settings.model_copy(update={"budgets": [global_budget]})
    harness.preparer = Preparer(harness.settings, harness.store, env=harness.runner.env)
    harness.runner = Runner(harness.settings, harness.store, env=harness.runner.env)
    budgets = _budgets(harness.settings, harness.store)
    assert budgets.try_reserve("min", "min-before").allowed
    budgets.settle("min", "min-before")

    # Another level, in another process or replica, spends most of the global budget, and
    # a tick of a third level in flight holds the rest: this tick's first call would pass it.
    _spend(harness.store, "elsewhere", datetime.now(UTC), 600)
    holder = SlotClaim("hour-holding", "hour", None, reserved_tokens=500)
    assert claim_wave(harness.store, harness.settings, [holder]) == {holder.tick_id}
    check = budgets.try_reserve("min", "min-after", budgets.held())
    assert (check.allowed, check.budget, check.spent_tokens, check.reserved_tokens) == (
        False,
        "everything",
        600,
        500,
    )

    outcome = harness.tick([Step(text="never asked")])
    assert outcome.result is not None and outcome.result.stop_reason == "budget", outcome
    assert "budget everything (global, day)" in outcome.result.text
    assert outcome.tick_id not in fake.state.first_request


@pytest.mark.parametrize(
    ("limit", "usd", "stopped"), [("usd", 1.0, False), ("list_usd", 1.8, True)]
)
def test_a_list_usd_budget_stops_a_subscription_level_and_a_usd_budget_does_not(
    tmp_path: Path, fake: FakeUpstream, limit: str, usd: float, stopped: bool
) -> None:
    """A subscription level: a limit on what is billed never holds it, one on list value does.

    It adds nothing to the bill, so not even a billed limit the other levels' bill has
    passed holds it. At USD 1 a million tokens, a metered level's 1.5M tokens are billed
    USD 1.5; this level's own 0.2M are worth USD 0.2 and billed nothing; a tick in flight
    holds 0.2M more. The USD 1 billed limit is passed and holds nothing here; the USD 1.8
    list value limit is passed with the reservation, by which the scheduler refuses a
    slot and the tick's worker stops before its first call.
    """
    harness = Harness(tmp_path, fake, rag=False, reserve_tokens=0, billing="subscription")
    budget = BudgetEntry(name="team", scope="global", **{limit: usd})
    prices = {"fake-model": PriceOverride(input_per_mtok=1.0, output_per_mtok=1.0)}
    harness.settings = harness.settings.model_copy(update={"budgets": [budget], "prices": prices})
    harness.preparer = Preparer(harness.settings, harness.store, env=harness.runner.env)
    harness.runner = Runner(harness.settings, harness.store, env=harness.runner.env)
    _spend(harness.store, "metered", datetime.now(UTC), 1_500_000)
    _spend(harness.store, "min", datetime.now(UTC), 200_000, billing="subscription")
    holder = SlotClaim("metered-holding", "metered", None, reserved_tokens=200_000)
    assert claim_wave(harness.store, harness.settings, [holder]) == {holder.tick_id}

    budgets = _budgets(harness.settings, harness.store)
    check = budgets.try_reserve("min", "min-next", budgets.held())
    assert (check.allowed, check.spent_usd, check.spent_list_usd) == (not stopped, 1.5, 1.7)
    outcome = harness.tick([Step(text="Nothing paged.")])
    assert outcome.result is not None, outcome
    assert (outcome.tick_id in fake.state.first_request) is not stopped
    if stopped:
        assert outcome.result.stop_reason == "budget", outcome
        assert "reached list value USD 1.90 with its reservations" in outcome.result.text
    else:
        assert outcome.result.text == "Nothing paged.", outcome


NOWHERE = "http://127.0.0.1:9/v1"
"""The catalog tests' targets' endpoint: they price and bill ticks, and call no target."""


def _plan_catalog(path: Path, billing: Billing, **extra: Any) -> Path:
    """Lane `min` on target `plan`, billed as `billing`; `metered` is billed by the call."""
    targets = {
        "plan": {**target(NOWHERE, "plan-model"), "billing": billing},
        "metered": target(NOWHERE, "metered-model"),
    }
    return write_catalog(path, targets, ["plan"], **extra)


def _routed_config(tmp_path: Path, catalog: Path, usd: float) -> Path:
    """`min`, routed by `catalog`, and `hour`, on its model, both reserving 10,000 tokens.

    At USD 1 a million tokens (a tick reserves USD 0.01), under a global budget of USD
    `usd` billed.
    """
    level = '[levels.{}]\nevery = "1m"\nmodel = "fake-model"\n'
    levels = level.format("min") + level.format("hour")
    price = '[prices."fake-model"]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n'
    budget = f'[[budgets]]\nname = "bill"\nscope = "global"\nusd = {usd}\n'
    return write(tmp_path, f'{levels}[routing]\ncatalog = "{catalog}"\n{price}{budget}')


@pytest.mark.parametrize("promotions", [{}, {"plan": "metered"}], ids=["own", "promoted"])
def test_a_usd_budget_holds_a_plan_lane_whose_ticks_a_failure_may_promote_to_a_metered_target(
    store: SqlEventStore, tmp_path: Path, promotions: dict[str, str]
) -> None:
    """A promotion to a metered target bills the plan lane's tick: a billed budget holds it.

    `hour`'s bill passed USD 1; `min`'s lane, on a plan alone, adds nothing to it.
    """
    catalog = _plan_catalog(tmp_path / "catalog.json", "subscription", promotions=promotions)
    prices = {"fake-model": PriceOverride(input_per_mtok=1.0, output_per_mtok=1.0)}
    settings = _settings(tmp_path, [{"name": "bill", "scope": "global", "usd": 1.0}])
    settings = settings.model_copy(
        update={"prices": prices, "routing": RoutingConfig(catalog=catalog)}
    )
    day = datetime(2026, 12, 1, 9, tzinfo=UTC)
    _spend(store, "hour", day, 2_000_000)
    over = _budgets(settings, store).over("min", day)
    assert (over is not None) is bool(promotions), over
    assert over is None or (over.budget, over.spent_usd) == ("bill", 2.0), over


def test_a_reloaded_catalog_bills_the_levels_as_it_routes_them_and_a_rejected_one_does_not(
    tmp_path: Path,
) -> None:
    """The service's budgets bill `min` as the router's catalog in force says.

    Read anew with every reload, not as the file on disk did when they were made.
    """
    catalog = _plan_catalog(tmp_path / "catalog.json", "api")
    service, _, _ = service_on(_routed_config(tmp_path, catalog, usd=1.0))
    assert service.router is not None
    day = datetime(2026, 12, 1, 9, tzinfo=UTC)
    _spend(service.store, "hour", day, 2_000_000)
    over = service.budgets.over("min", day)
    assert over is not None and over.budget == "bill", "a metered lane is held by the bill"

    _plan_catalog(catalog, "subscription")
    service.router.source.poll()
    assert service.budgets.over("min", day) is None, "a plan's lane adds nothing to the bill"

    catalog.write_text("{")  # rejected: the plan's catalog stays in force
    service.router.source.poll()
    assert service.budgets.over("min", day) is None
    service.store.close()


def test_a_reroute_budget_makes_the_lane_pass_over_its_spent_target(
    tmp_path: Path, sqlite_url: str, fake: FakeUpstream
) -> None:
    targets = {"metered": target(fake.url, "metered-model"), "spare": target(fake.url, "spare")}
    catalog = write_catalog(tmp_path / "catalog.json", targets, ["metered", "spare"])
    routed = Routed(tmp_path, sqlite_url, catalog)
    cap = BudgetEntry(name="metered-cap", scope="target:metered", tokens=100, action="reroute")
    routed.settings = routed.settings.model_copy(update={"budgets": [cap]})
    routed.preparer = Preparer(routed.settings, routed.store, env=routed.runner.env)
    routed.runner = Runner(routed.settings, routed.store, env=routed.runner.env)
    spent = BudgetSpent(
        tick_id="min-earlier",
        level="min",
        model="metered-model",
        prompt_tokens=150,
        completion_tokens=0,
        target="metered",
    )
    routed.store.append(spent.stream_id, [spent.to_record()])

    outcome, events = routed.tick(fake, [Step(text="answered by the spare")])
    assert outcome.status == "completed" and outcome.result is not None, outcome.reason
    assert outcome.result.target == "spare"
    (passed_over,) = of_type(events, RouteFallback.type)
    assert passed_over["from_target"] == "metered" and passed_over["to_target"] == "spare"
    assert passed_over["reason"].startswith("budget: budget metered-cap (target:metered)")


def test_a_budget_shared_by_two_worker_processes_is_overshot_by_at_most_a_call_each(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    steps = [calls("nothing"), calls("nothing"), Step(text="done")]
    probe = Harness(tmp_path / "probe", fake, rag=False)
    sizes = [
        e.data["prompt_tokens"] + e.data["completion_tokens"]
        for e in probe.events(probe.tick(list(steps)))
        if e.type == BudgetSpent.type
    ]
    limit = 2 * sizes[0] + sizes[1] // 2  # both first calls fit; any second passes it
    harness = Harness(tmp_path, fake, rag=False, reserve_tokens=0)
    level = harness.settings.levels["min"]
    harness.settings = harness.settings.model_copy(
        update={
            "levels": {
                "min": level.model_copy(update={"tags": ["team-a"]}),
                "hour": level.model_copy(update={"tags": ["team-a"]}),
            },
            "budgets": [BudgetEntry(name="team-a", scope="tag:team-a", tokens=limit)],
            "runner": RunnerConfig(max_concurrent=2, start_spacing_seconds=0, grace_seconds=1),
        }
    )
    preparer = Preparer(harness.settings, harness.store, env=harness.runner.env)
    runner = Runner(harness.settings, harness.store, env=harness.runner.env)
    executor = LocalExecutor(harness.settings, preparer, runner, print)
    claims = [SlotClaim(f"{name}-shared", name, None) for name in ("min", "hour")]
    events = run_claims(harness, fake, executor, claims, steps)
    booked = [e for e in events if e.type == BudgetSpent.type]
    total = sum(e.data["prompt_tokens"] + e.data["completion_tokens"] for e in booked)
    assert total - limit <= 2 * max(sizes), (total, limit, sizes)
    assert len({e.data["pid"] for e in events if e.type == "TickStarted"}) == 2
    ends = [e.data for e in events if e.type in TERMINAL_TYPES]
    assert len(ends) == 2 and any(end.get("stop_reason") == "budget" for end in ends), ends


def test_spend_by_tag_counts_each_level_under_each_of_its_tags(
    sqlite_url: str, tmp_path: Path
) -> None:
    store = open_store(sqlite_url)
    settings = _settings(
        tmp_path,
        [],
        min=_level(tags=["team-a", "pager"]),
        hour=_level(tags=["team-a"]),
        day=_level(),
    )
    now = datetime.now(UTC)
    for level, tokens in (("min", 100), ("hour", 20), ("day", 3)):
        _spend(store, level, now, tokens)
    prices = PriceBook(settings.prices)
    projector_for(store, prices).catch_up(["spend"])
    tags = {name: list(level.tags) for name, level in settings.levels.items()}
    rows = spend_by(store, prices, ["tag"], tags)
    assert {row.group["tag"]: row.prompt_tokens for row in rows} == {
        "": 3,
        "pager": 100,
        "team-a": 120,
    }
    store.close()


def test_tickwork_budgets_prints_each_window_and_spend_by_tag(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        '[levels.min]\nevery = "1m"\nmodel = "m"\ntags = ["team-a"]\nreserve_tokens = 0\n\n'
        '[[budgets]]\nname = "team-a"\nscope = "tag:team-a"\nwindow = "month"\n'
        'timezone = "Europe/Berlin"\ntokens = 1000\nalert_at = [0.5]\n',
    )
    store = open_store(f"sqlite:///{tmp_path}/events.db")  # migrates the new store
    _spend(store, "min", datetime.now(UTC), 250)
    store.close()
    env = {"TICKWORK_CONFIG": str(config)}
    # Three processes meet a budget the read model was not folded for, at once: one folds
    # it, the others wait for its fold and read it (none reads a half-folded window).
    listed, table, by_tag = forked_each(
        tmp_path, [["budgets", "--json"], ["budgets"], ["spend", "--by", "tag", "--json"]], env
    )
    assert listed.returncode == 0, listed.stderr
    (budget,) = json.loads(listed.stdout)
    assert (budget["name"], budget["used_tokens"], budget["remaining_tokens"]) == (
        "team-a",
        250,
        750,
    )
    assert budget["projected_tokens"] >= 250 and budget["projected_fraction"] >= 0.25
    assert table.returncode == 0 and "team-a" in table.stdout and "25%" in table.stdout
    assert "at window end" in table.stdout
    assert [(r["group"], r["prompt_tokens"]) for r in json.loads(by_tag.stdout)] == [
        ({"tag": "team-a"}, 250)
    ]


TEAM = "".join(
    f'[levels.t{n}]\nevery = "1m"\nmodel = "{{model}}"\ntags = ["team"]\n' for n in range(1, 6)
)
"""Five levels under one tag, each reserving the default 10,000 tokens a tick."""


def test_a_budget_that_cannot_pay_one_tick_of_a_level_it_covers_is_refused_at_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tickwork.toml"
    path.write_text(
        TEAM.format(model="m")
        + '[levels.own]\nevery = "1m"\nmodel = "m"\ndaily_token_budget = 5000\n'
        + '[[budgets]]\nname = "team"\nscope = "tag:team"\ntokens = 2000\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    said = str(caught.value)
    for n in range(1, 6):
        assert (
            f"budgets.0.tokens: budget 'team' (2,000 tokens) cannot pay one tick of level "
            f"'t{n}', which reserves 10,000 tokens (reserve_tokens)"
        ) in said, said
    assert (
        "levels.own.daily_token_budget: budget 'level-own-daily' (5,000 tokens) cannot pay "
        "one tick of level 'own', which reserves 10,000 tokens"
    ) in said, said
    # A reservation the budget can pay loads.
    path.write_text(
        TEAM.format(model="m") + '[[budgets]]\nname = "team"\nscope = "tag:team"\ntokens = 10000\n'
    )
    assert load_settings(path).budgets[0].tokens == 10_000


@pytest.mark.parametrize("unit", ["usd", "list_usd"])
def test_a_usd_budget_below_one_ticks_reservation_at_the_level_price_exits_2(
    tmp_path: Path, unit: str
) -> None:
    """Billed (`usd`) or list value (`list_usd`): a level billed on `api` is held by both."""
    # 10,000 reserved tokens at USD 10 per million input tokens: USD 0.10 a tick.
    prices = '[prices."priced-model"]\ninput_per_mtok = 10.0\noutput_per_mtok = 30.0\n'
    budget = f'[[budgets]]\nname = "team-usd"\nscope = "tag:team"\n{unit} = 0.05\n'
    priced = write_config(tmp_path / "priced", TEAM.format(model="priced-model") + prices + budget)
    unpriced = write_config(tmp_path / "unpriced", TEAM.format(model="no-such-model-xyz") + budget)
    refused, loaded = (
        forked(path.parent, "budgets", env={"TICKWORK_CONFIG": str(path)})
        for path in (priced, unpriced)
    )
    assert refused.returncode == 2, refused.stderr
    assert (
        f"budgets.0.{unit}: budget 'team-usd' (USD 0.05) cannot pay one tick of level 't1', "
        "which reserves 10,000 tokens, USD 0.1 at priced-model's price"
    ) in refused.stderr, refused.stderr
    assert loaded.returncode == 0, "an unpriced model says nothing: " + loaded.stderr


def test_a_usd_budget_is_not_refused_for_one_tick_of_a_level_a_catalog_lane_routes(
    tmp_path: Path,
) -> None:
    """The lane's targets run, maybe on a plan, not the level's model: its price says nothing.

    Neither at start-up nor at a reload; `hour`, which runs on its model, is refused.
    """
    catalog = _plan_catalog(tmp_path / "catalog.json", "subscription")
    config = _routed_config(tmp_path, catalog, usd=0.005)
    with pytest.raises(ConfigError) as caught:
        checked_settings(config)
    refused = str(caught.value)
    assert (
        "budgets.0.usd: budget 'bill' (USD 0.005) cannot pay one tick of level 'hour', which "
        "reserves 10,000 tokens, USD 0.01 at fake-model's price"
    ) in refused, refused
    assert "level 'min'" not in refused, refused

    service, reload, lines = service_on(_routed_config(tmp_path, catalog, usd=1.0))
    _routed_config(tmp_path, catalog, usd=0.005)
    assert not reload.reload()
    [line] = [line for line in lines if " rejected (" in line]
    assert "cannot pay one tick of level 'hour'" in line and "level 'min'" not in line, line
    service.store.close()


def test_the_skip_line_names_the_budget_what_it_holds_the_reservation_and_the_limit(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, tags=["team"])
    team = BudgetEntry(name="team", scope="tag:team", tokens=20_000)
    settings = harness.settings.model_copy(update={"budgets": [team]})
    _spend(harness.store, "min", datetime.now(UTC), 15_000)
    lines: list[str] = []
    executor = LocalExecutor(settings, harness.preparer, harness.runner, lines.append)
    service = Service(settings, harness.store, executor, lines.append)
    slot = datetime.now(UTC).replace(microsecond=0)
    service.fire([(slot, "min"), (slot + timedelta(seconds=1), "min")])
    skipped = [line for line in lines if " skipped: " in line]
    assert len(skipped) == 2, lines
    assert all(
        line.endswith(
            "skipped: min is held by budget team: 15,000 tokens used, 0 reserved by ticks in "
            "flight, this tick would reserve 10,000; the limit is 20,000 tokens"
        )
        for line in skipped
    ), skipped


def _resumes(store: EventStore, level: str) -> list[dict[str, Any]]:
    return [e.data for e in store.read_stream(level_stream(level)) if e.type == LevelResumed.type]


def test_a_level_paused_by_a_budget_resumes_by_itself_when_the_window_rolls_over(
    store: SqlEventStore, tmp_path: Path
) -> None:
    settings = _settings(
        tmp_path, [{"name": "team-a", "scope": "tag:team-a", "tokens": 100, "action": "pause"}]
    )
    watch = BudgetWatch(settings, store, _budgets(settings, store))
    day = datetime(2026, 12, 1, 9, tzinfo=UTC)
    midnight = datetime(2026, 12, 2, tzinfo=UTC)
    _spend(store, "min", day, 150)
    watch.poll(day)
    (status,) = budget_statuses(watch.budgets, day)
    assert (status.paused_levels, status.resumes_at) == (("min",), midnight)
    (described,) = describe_levels(settings, store, ["min"], day)
    assert described.paused is not None and described.paused.resumes_at == midnight

    assert watch.poll(day + timedelta(hours=14)) == [] and _resumes(store, "min") == []
    replica = BudgetWatch(settings, store, _budgets(settings, store))
    for each in (watch, replica):  # both replicas see the new window: one resume is stored
        each.poll(midnight + timedelta(seconds=5))
    (resumed,) = [e for e in store.read_stream(level_stream("min")) if e.type == LevelResumed.type]
    assert (resumed.data["by"], resumed.data["reason"]) == (
        "budget",
        "its budget's window rolled over",
    )
    said = state_line(decode(resumed), ["min"])
    assert said == "min resumed (its budget's window rolled over): by budget", said
    assert budget_statuses(watch.budgets, midnight)[0].resumes_at is None

    # A pause an operator decided is never lifted by a budget.
    switch_level(settings, store, "min", pause=True, by="operator")
    watch.poll(midnight + timedelta(hours=1))
    assert store.read_stream(level_stream("min"))[-1].type == LevelPaused.type


def test_a_reload_that_raises_a_pause_budgets_limit_resumes_its_level(tmp_path: Path) -> None:
    level = '[levels.min]\nevery = "1h"\nmodel = "fake-model"\ntags = ["team-a"]\n'
    level += "reserve_tokens = 0\n"
    budget = '[[budgets]]\nname = "team-a"\nscope = "tag:team-a"\ntokens = {}\naction = "pause"\n'
    config = write(tmp_path, level + budget.format(1_000))
    service, reload, lines = service_on(config)
    watch = BudgetWatch(service.settings, service.store, service.budgets)
    day = datetime.now(UTC)
    _spend(service.store, "min", day, 1_500)
    (crossed,) = watch.poll(day)
    assert crossed.levels == ["min"] and _resumes(service.store, "min") == []

    config.write_text(config.read_text().replace("tokens = 1000", "tokens = 5000"))
    assert reload.reload()
    assert any("[[budgets]] reloaded" in line for line in lines), lines
    watch.poll(day)
    assert [r["by"] for r in _resumes(service.store, "min")] == ["budget"]
    said = "budget team-a has room again in this window"
    assert str(_resumes(service.store, "min")[0]["reason"]).startswith(said)
    service.store.close()


def test_budgets_and_levels_say_when_a_level_a_budget_paused_resumes(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        '[levels.min]\nevery = "1h"\nmodel = "m"\ntags = ["team-a"]\nreserve_tokens = 0\n'
        '[[budgets]]\nname = "team-a"\nscope = "tag:team-a"\ntokens = 100\naction = "pause"\n',
    )
    settings = load_settings(config)
    store = open_store(settings.store.url)
    now = datetime.now(UTC)
    _spend(store, "min", now, 150)
    BudgetWatch(settings, store, _budgets(settings, store)).poll(now)
    store.close()
    env = {"TICKWORK_CONFIG": str(config)}
    budgets, levels = (
        forked(tmp_path, *args, env=env) for args in (["budgets"], ["levels", "min"])
    )
    assert budgets.returncode == 0 and levels.returncode == 0, budgets.stderr + levels.stderr
    tomorrow = (now + timedelta(days=1)).strftime("%Y-%m-%d 00:00")
    assert f"team-a holds min paused until {tomorrow} UTC" in budgets.stdout, budgets.stdout
    assert f"resumes by itself at {tomorrow}:00 UTC" in levels.stdout, levels.stdout
