"""The HTTP API on a real uvicorn server and a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from harness.api.metrics import Exposition, header, sample
from harness.api.reads import Reads
from harness.config import (
    AgentsConfig,
    LevelConfig,
    PathsConfig,
    Settings,
    StoreConfig,
)
from harness.contracts.events import (
    CONTROL_STREAM,
    TERMINAL_TYPES,
    BudgetSpent,
    DigestPublished,
    TickAttemptFailed,
    TickCancelled,
    TickCompleted,
    TickEvent,
    TickFailed,
    TickScheduled,
    TickStarted,
    level_stream,
    tick_stream,
)
from harness.contracts.result import TickResult, write_result
from harness.devtools.fake_llm import FakeUpstream, Step, fake_upstream
from harness.execution.manual import ManualTicks
from harness.prices import PriceBook, format_usd
from harness.projections import tick_line
from harness.projections.levels import cancel_scopes, level_paused
from harness.projections.spend import REPORT_DAYS
from harness.rag import build_index
from harness.store import Heartbeat, SqlEventStore, open_store
from harness.store.writer import WRITER_NAME
from tests.api_support import TOKEN, serving, settings_for
from tests.commands import forked, write_config
from tests.conftest import libpq_dsn
from tests.tick_support import Harness, calls
from tests.waiting import wait_until


@dataclass
class Api:
    settings: Settings
    store: SqlEventStore
    http: httpx.Client


@pytest.fixture
def api(store_url: str, tmp_path: Path) -> Iterator[Api]:
    settings = settings_for(store_url, tmp_path)
    store = open_store(store_url)
    with serving(settings, store) as client:
        yield Api(settings, store, client)
    store.close()


HOUR = timedelta(hours=1)


def record(store: SqlEventStore, *events: TickEvent) -> None:
    store.append(events[0].stream_id, [event.to_record() for event in events])


def started_with_spend(
    tick_id: str, level: str, model: str, tokens: tuple[int, int]
) -> list[TickEvent]:
    """A tick scheduled, started and one model call into it."""
    prompt, completion = tokens
    return [
        TickScheduled(tick_id=tick_id, level=level),
        TickStarted(tick_id=tick_id, level=level, pid=1, host="h"),
        BudgetSpent(
            tick_id=tick_id,
            level=level,
            model=model,
            prompt_tokens=prompt,
            completion_tokens=completion,
        ),
    ]


def seed(store: SqlEventStore, results: Path) -> None:
    """A completed tick of `min` with spend and a result file, one running, one queued."""
    path = results / "min" / "done.json"
    write_result(path, TickResult(tick_id="min-done", ok=True, text="Pager is quiet."))
    done = started_with_spend("min-done", "min", "gpt-4o-mini", (1200, 30))
    record(store, *done, TickCompleted(tick_id="min-done", level="min", result_path=str(path)))
    record(store, *started_with_spend("hour-run", "hour", "home-model", (7, 3)))
    record(store, TickScheduled(tick_id="min-queued", level="min"))


def test_status_shows_running_queued_paused_budgets_and_lag(api: Api, tmp_path: Path) -> None:
    seed(api.store, tmp_path / "results")
    assert api.http.post("/levels/hour/pause").status_code == 200

    status = api.http.get("/status").json()

    assert [t["tick_id"] for t in status["running"]] == ["hour-run"]
    assert status["running"][0]["runtime_seconds"] >= 0
    assert [t["tick_id"] for t in status["queued"]] == ["min-queued"]
    assert status["paused_levels"] == ["hour"]
    levels = {level["name"]: level for level in status["levels"]}
    assert levels["min"]["tokens_today"] == 1230 and levels["min"]["token_budget"] == 100_000
    assert levels["hour"]["cost_today_usd"] is None, "home-model has no price"
    assert status["store_position"] == api.store.last_position()
    assert {p["lag"] for p in status["projections"].values()} == {0}


def test_ticks_filter_by_level_status_and_since_and_show_one_with_its_result(
    api: Api, tmp_path: Path
) -> None:
    seed(api.store, tmp_path / "results")

    everything = api.http.get("/ticks").json()
    assert {t["tick_id"] for t in everything} == {"min-done", "hour-run", "min-queued"}
    done = api.http.get("/ticks", params={"level": "min", "status": "completed"}).json()
    assert [t["tick_id"] for t in done] == ["min-done"]
    assert done[0]["prompt_tokens"] == 1200 and done[0]["finished_at"].endswith("Z")
    assert done[0]["model"] == "gpt-4o-mini" and done[0]["queue_wait_seconds"] >= 0
    (queued,) = [t for t in everything if t["tick_id"] == "min-queued"]
    assert queued["queue_wait_seconds"] is None, "it has not started: its wait is not known"
    both = api.http.get("/ticks", params=[("level", "min"), ("level", "hour")]).json()
    assert len(both) == 3
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert api.http.get("/ticks", params={"since": future}).json() == []
    assert len(api.http.get("/ticks", params={"since": "1h", "limit": 2}).json()) == 2

    detail = api.http.get("/ticks/min-done").json()
    assert [e["type"] for e in detail["events"]] == [
        "TickScheduled",
        "TickStarted",
        "BudgetSpent",
        "TickCompleted",
    ]
    assert detail["tick"]["status"] == "completed"
    assert detail["result"]["text"] == "Pager is quiet."
    missing = api.http.get("/ticks/no-such-tick")
    assert missing.status_code == 404 and "no-such-tick" in missing.json()["detail"]


def test_the_health_rows_success_and_usd_per_tick_count_the_same_ticks(api: Api) -> None:
    """Of today's ticks two completed, one failed, one was cancelled and one still runs.

    Both cells count the three that ran to an end; the cost per tick is the level's spend
    today over them.
    """
    mine = {"level": "min"}
    ends: dict[str, TickEvent | None] = {
        "min-a": TickCompleted(tick_id="min-a", **mine),
        "min-b": TickCompleted(tick_id="min-b", **mine),
        "min-c": TickFailed(tick_id="min-c", reason="boom", **mine),
        "min-d": TickCancelled(tick_id="min-d", **mine),
        "min-e": None,
    }
    for tick_id, end in ends.items():
        events = started_with_spend(tick_id, "min", "gpt-4o-mini", (1000, 100))
        record(api.store, *events, *([end] if end else []))
    levels = {level["name"]: level for level in api.http.get("/status").json()["levels"]}
    spent_today = levels["min"]["cost_today_usd"]
    assert spent_today == pytest.approx(5 * (1000 * 0.15 + 100 * 0.6) / 1e6)
    panels = api.http.get("/dashboard/panels").text
    health = panels.split('id="health"')[1].split('<tr data-level="min">')[1].split("</tr>")[0]
    assert '<td class="success">67% of 3</td>' in health, health
    assert f'<td class="per-tick">${format_usd(spent_today / 3)}</td>' in health, health


def test_the_levels_table_says_where_each_levels_calls_go_and_when_the_fake_answers(
    api: Api,
) -> None:
    """Told by the scheduler's heartbeat, as its banner says it (`tickwork run` beats it)."""
    fake = "http://127.0.0.1:9/v1"
    wires = {"openai-chat": f"tickwork's fake at {fake} (script its answers: POST …/_script)"}
    beating = Heartbeat(api.store, "scheduler", fake, wires)
    beating.beat()
    panels = api.http.get("/dashboard/panels").text
    levels = panels.split('id="levels"')[1].split("</section>")[0]
    assert (
        '<p class="fake">Ticks go to tickwork\'s fake upstream at http://127.0.0.1:9/v1' in levels
    )
    assert "POST http://127.0.0.1:9/_script</p>" in levels, levels
    assert "<th>upstream</th>" in levels
    assert f"<td>openai-chat: {escape(wires['openai-chat'])}</td>" in levels, levels
    beating.stop()
    levels = api.http.get("/dashboard/panels").text.split('id="levels"')[1]
    assert 'class="fake"' not in levels.split("</section>")[0]
    assert "openai-chat: as the scheduler&#x27;s environment says (none runs)" in levels


def test_a_tick_run_by_hand_is_marked_in_every_tick_list(api: Api, tmp_path: Path) -> None:
    t0 = datetime.now(UTC) - HOUR
    for tick_id, manual in (("min-by-hand", True), ("min-slot", False)):
        ids = {"tick_id": tick_id, "level": "min"}
        record(
            api.store,
            TickScheduled(**ids, manual=manual, occurred_at=t0),
            TickStarted(**ids, pid=1, host="h", occurred_at=t0),
            TickCompleted(**ids, occurred_at=t0 + timedelta(seconds=1)),
        )
        t0 += timedelta(seconds=2)
    listed = api.http.get("/ticks", params={"level": "min"}).json()
    assert {t["tick_id"]: t["manual"] for t in listed} == {"min-by-hand": True, "min-slot": False}
    table = api.http.get("/dashboard/ticks").text
    rows = {
        tick_id: next(row for row in table.split("<tr") if f'/ui/ticks/{tick_id}"' in row)
        for tick_id in ("min-by-hand", "min-slot")
    }
    assert '<span class="by-hand">by hand</span>' in rows["min-by-hand"], table
    assert "by hand" not in rows["min-slot"], table

    config = write_config(tmp_path, "", store_url=api.settings.store.url)
    shown = forked(tmp_path, "ticks", env={"TICKWORK_CONFIG": str(config)})
    assert shown.returncode == 0, shown.stderr
    printed = {line.split()[0]: line.split()[1:4] for line in shown.stdout.splitlines()[1:]}
    assert printed["min-by-hand"][:3] == ["completed", "(by", "hand)"], shown.stdout
    assert printed["min-slot"][0] == "completed" and "hand)" not in printed["min-slot"]


def test_a_retried_tick_shows_its_attempts_and_took_covers_them_all(
    api: Api, tmp_path: Path
) -> None:
    """Its first attempt timed out, its second met a 500, its third completed: 14.8 s in all."""
    t0 = datetime.now(UTC) - HOUR
    ids = {"tick_id": "min-retried", "level": "min"}
    record(
        api.store,
        TickScheduled(**ids, occurred_at=t0),
        TickStarted(**ids, pid=1, host="h", attempt=1, occurred_at=t0),
        TickAttemptFailed(
            **ids,
            attempt=1,
            failure_class="infrastructure",
            reason="timed out after 12 s",
            retry_in_seconds=2.0,
            occurred_at=t0 + timedelta(seconds=12.6),
        ),
        TickStarted(**ids, pid=2, host="h", attempt=2, occurred_at=t0 + timedelta(seconds=14.6)),
        TickAttemptFailed(
            **ids,
            attempt=2,
            failure_class="infrastructure",
            reason="InternalServerError: the upstream answered 500: overloaded",
            retry_in_seconds=0.1,
            occurred_at=t0 + timedelta(seconds=14.65),
        ),
        TickStarted(**ids, pid=3, host="h", attempt=3, occurred_at=t0 + timedelta(seconds=14.7)),
        TickCompleted(**ids, occurred_at=t0 + timedelta(seconds=14.8)),
    )
    line = tick_line(api.store.read_stream(tick_stream("min-retried")), PriceBook())
    assert line.startswith(
        "min-retried completed after 3 attempts (timed out, the upstream answered 500: "
        "overloaded): 14.8 s,"
    ), line

    (listed,) = api.http.get("/ticks", params={"level": "min"}).json()
    assert listed["attempts"] == 3, listed
    took = datetime.fromisoformat(listed["finished_at"]) - datetime.fromisoformat(
        listed["started_at"]
    )
    assert took.total_seconds() == pytest.approx(14.8), listed
    table = api.http.get("/dashboard/ticks").text
    assert "<th>attempts</th>" in table and "<td>14.8 s</td><td>3</td>" in table, table

    config = write_config(tmp_path, "", store_url=api.settings.store.url)
    shown = forked(tmp_path, "ticks", env={"TICKWORK_CONFIG": str(config)})
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    assert header.split()[4:6] == ["took", "attempts"], shown.stdout
    assert row.split()[4:7] == ["14.8", "s", "3"], shown.stdout


def test_ticks_page_by_cursor_without_gaps_or_repeats_while_new_ones_arrive(api: Api) -> None:
    at = datetime(2026, 11, 1, 12, tzinfo=UTC)
    for n in range(7):  # two ticks share each time but the last: the id breaks the tie
        tick = f"min-{n}"
        record(api.store, TickScheduled(tick_id=tick, level="min", occurred_at=at + n // 2 * HOUR))
    seen: list[str] = []
    url: str | None = "/ticks?level=min&limit=3"
    while url is not None:
        answer = api.http.get(url)
        seen += [t["tick_id"] for t in answer.json()]
        record(api.store, TickScheduled(tick_id=f"new-{len(seen)}", level="min"))
        url = answer.links.get("next", {}).get("url")
    assert seen[:7] == ["min-6", "min-5", "min-4", "min-3", "min-2", "min-1", "min-0"]
    assert len(seen) == 7, "a page is full until the last; new ticks land before the first"
    page = api.http.get("/ticks", params={"level": "min", "limit": 5})
    assert page.json()[-1]["tick_id"] == "min-5", "three new ticks, then min-6 and min-5"
    following = httpx.URL(page.links["next"]["url"]).params["before"]
    assert following == "2026-11-01T14:00:00.000000Z,min-5"


@pytest.mark.parametrize(
    ("path", "params", "names"),
    [
        ("/ticks", {"status": "bogus"}, ["'bogus' is not a tick status", "completed"]),
        ("/ticks", {"since": "yesterday-ish"}, ["'yesterday-ish'", "30m, 12h, 7d"]),
        ("/ticks", {"limit": "0"}, ["greater than or equal to 1"]),
        ("/ticks", {"before": "2026-12-01T13:05:00.000Z"}, ["`<UTC time>,<tick id>`"]),
        ("/ticks", {"before": "yesterday-at-noon,min-1"}, ["'yesterday-at-noon' is not an ISO"]),
        ("/ticks", {"before": "2026-12-01T13:05:00,min-1"}, ["has no time zone"]),
        ("/ticks", {"before": "2026-12-01T13:05:00.000000Z," + "x" * 201}, ["at most 228"]),
        (
            "/spend",
            {"by": "colour"},
            ["'level', 'model', 'day', 'template', 'target', 'billing' or 'tag'"],
        ),
        ("/spend", {"since": "soon"}, ["'soon'"]),
        ("/dashboard/ticks", {"status": "bogus"}, ["'bogus' is not a tick status"]),
        ("/dashboard/ticks", {"since": "soonish"}, ["'soonish'", "30m, 12h, 7d"]),
        ("/ticks/min-done/stream", {"after": "-1"}, ["greater than or equal to 0"]),
        ("/dashboard/panels", {"chart": "euro"}, ["'tokens' or 'usd'"]),
    ],
)
def test_bad_query_parameters_get_422_naming_the_problem_and_change_nothing(
    api: Api, path: str, params: dict[str, str], names: list[str]
) -> None:
    before = api.store.last_position()
    answer = api.http.get(path, params=params)
    assert answer.status_code == 422
    problem = answer.json()["detail"][0]
    assert problem["loc"] == ["query", next(iter(params)), *problem["loc"][2:]]
    for name in names:
        assert name in problem["msg"]
    assert api.store.last_position() == before


def test_spend_without_since_reports_the_last_thirty_days_and_says_so(api: Api) -> None:
    """The read model keeps every day; a report not told its window covers REPORT_DAYS."""
    today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    for back in (0, REPORT_DAYS - 1, REPORT_DAYS, 400):
        spent = BudgetSpent(
            tick_id=f"min-{back}",
            level="min",
            model="gpt-4o-mini",
            prompt_tokens=back + 1,
            completion_tokens=0,
            occurred_at=today - timedelta(days=back),
        )
        record(api.store, spent)
    first = (today - timedelta(days=REPORT_DAYS - 1)).date().isoformat()

    recent = api.http.get("/spend")
    asked = api.http.get("/spend", params={"since": "2020-01-01"})

    assert recent.headers["X-Spend-Since"] == first
    inside = 1 + REPORT_DAYS  # the tokens of today and of the window's first day
    assert [row["prompt_tokens"] for row in recent.json()] == [inside]
    assert asked.headers["X-Spend-Since"] == "2020-01-01"
    assert [row["prompt_tokens"] for row in asked.json()] == [inside + REPORT_DAYS + 1 + 401]


def test_budgets_show_each_window_in_the_api_and_the_dashboard(api: Api, tmp_path: Path) -> None:
    seed(api.store, tmp_path / "results")
    (daily,) = api.http.get("/budgets").json()
    assert (daily["name"], daily["scope"], daily["window"]) == (
        "level-min-daily",
        "level:min",
        "day",
    )
    assert (daily["used_tokens"], daily["limit_tokens"]) == (1230, 100_000)
    assert daily["remaining_tokens"] == 100_000 - 1230 - daily["reserved_tokens"]
    assert daily["window_end"].startswith(
        (datetime.now(UTC).date() + timedelta(days=1)).isoformat()
    )
    as_of, start, end = (
        datetime.fromisoformat(daily[k]) for k in ("as_of", "window_start", "window_end")
    )
    elapsed = max(as_of - start, timedelta(minutes=1))
    assert daily["projected_tokens"] == round(1230 * (1 + (end - as_of) / elapsed))
    panels = api.http.get("/dashboard/panels").text
    assert '<section id="budgets"><h2>Budgets</h2>' in panels and "level-min-daily" in panels
    assert "at window end" in panels


def test_spend_groups_by_level_model_and_day(api: Api, tmp_path: Path) -> None:
    seed(api.store, tmp_path / "results")
    rows = api.http.get("/spend", params=[("by", "level"), ("by", "model")]).json()
    by = {(r["group"]["level"], r["group"]["model"]): r for r in rows}
    assert by[("min", "gpt-4o-mini")]["prompt_tokens"] == 1200
    assert by[("min", "gpt-4o-mini")]["cost_usd"] == pytest.approx((1200 * 0.15 + 30 * 0.6) / 1e6)
    assert by[("hour", "home-model")]["cost_usd"] is None
    today = datetime.now(UTC).date().isoformat()
    days = api.http.get("/spend", params={"by": "day", "since": "7d"}).json()
    assert days == [
        {
            "group": {"day": today},
            "prompt_tokens": 1207,
            "completion_tokens": 33,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "model_calls": 2,
            "estimated_calls": 0,
            "cache_write_1h_tokens": 0,
            "web_search_requests": 0,
            "cost_usd": None,
            "unpriced_calls": 1,
            "price_sources": [f"genai-prices@{version('genai-prices')}", "unpriced"],
            "priced_when_read": 2,
            "billed_usd": None,
            "subscription_calls": 0,
        }
    ]


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_request_answers_with_every_append_committed_before_it(api: Api, tmp_path: Path) -> None:
    """An append still writing below them (another tick's) holds the seed's events back.

    The request waits for it rather than answer without them; it ends once the request
    is seen polling the readers' horizon (or has answered, when it does not wait).
    """
    dsn = libpq_dsn(api.store.engine.url)
    polls: list[str] = []

    def record(*args: Any) -> None:
        if "tickwork_events_horizon" in args[2]:
            polls.append(args[2])

    with psycopg.connect(dsn, application_name=WRITER_NAME) as writer:
        writer.execute("SELECT pg_current_xact_id()")
        seed(api.store, tmp_path / "results")
        sa.event.listen(api.store.engine, "before_cursor_execute", record)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(api.http.get, "/spend", params={"by": "level"})
            wait_until(lambda: answer.done() or len(polls) > 3, "the request to read or wait")
            writer.rollback()
            rows = answer.result().json()
        sa.event.remove(api.store.engine, "before_cursor_execute", record)
    assert {row["group"]["level"]: row["prompt_tokens"] for row in rows} == {
        "min": 1200,
        "hour": 7,
    }


def publish_digest(store: SqlEventStore, path: Path, text: str, name: str) -> None:
    """A `DigestPublished` as the publisher records it, with its file."""
    path.write_text(text, encoding="utf-8")
    published = DigestPublished(
        name=name,
        period_start=datetime(2026, 1, 1, tzinfo=UTC),
        period_end=datetime(2026, 1, 2, tzinfo=UTC),
        format="md",
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        targets=["file:/tmp"],
        delivery={"file:/tmp": "ok"},
        path=str(path),
    )
    store.append(published.stream_id, [published.to_record()])


def test_latest_digest_is_the_last_published_with_its_file(api: Api, tmp_path: Path) -> None:
    none_yet = api.http.get("/digests/latest")
    assert none_yet.status_code == 404 and "no digest published" in none_yet.json()["detail"]

    publish_digest(api.store, tmp_path / "first.md", "# Monday\n", "daily")
    publish_digest(api.store, tmp_path / "second.md", "# Tuesday\nAll quiet.\n", "daily")
    latest = api.http.get("/digests/latest").json()
    assert latest["content"] == "# Tuesday\nAll quiet.\n"
    assert latest["data"]["path"] == str(tmp_path / "second.md")
    assert latest["data"]["format"] == "md"

    (tmp_path / "second.md").unlink()
    gone = api.http.get("/digests/latest").json()
    assert gone["content"] is None and "second.md" in gone["content_error"]


def test_pause_resume_and_cancel_append_what_the_cli_appends(api: Api, tmp_path: Path) -> None:
    seed(api.store, tmp_path / "results")

    too_long = api.http.post("/levels/min/pause", params={"note": "x" * 2001})
    assert too_long.status_code == 422 and not level_paused(api.store, "min")
    paused = api.http.post("/levels/min/pause", params={"reason": "upgrade", "note": "ask bob"})
    assert paused.json() == {"level": "min", "was_paused": False, "paused": True}
    assert level_paused(api.store, "min")
    switch = api.store.read_stream(level_stream("min"))[-1]
    assert switch.type == "LevelPaused" and switch.data["by"] == "http:127.0.0.1"
    assert (switch.data["reason"], switch.data["note"]) == ("upgrade", "ask bob")
    [described] = api.http.get("/levels", params={"level": "min"}).json()
    assert (described["paused"]["by"], described["paused"]["note"]) == ("http:127.0.0.1", "ask bob")
    assert len(described["next"]) == 5 and described["recent"], described
    assert api.http.get("/levels", params={"level": "weekly"}).status_code == 404
    assert "upgrade (note: ask bob)" in api.http.get("/dashboard/panels").text
    resumed = api.http.post("/levels/min/resume")
    assert resumed.json() == {"level": "min", "was_paused": True, "paused": False}
    assert not level_paused(api.store, "min")

    cancelled = api.http.post("/cancel/min").json()
    assert cancelled == {"scope": "min", "scopes": ["min"], "matching": ["min-queued"]}
    request = api.store.read_stream(CONTROL_STREAM)[-1]
    assert request.type == "CancelRequested" and request.data["scope"] == "min"
    nothing = api.http.post("/cancel/mx")
    assert nothing.status_code == 404 and "no level" in nothing.json()["detail"]
    prefix = api.http.post("/cancel/min-q").json()
    assert prefix["scopes"] == ["min-queued"], "a prefix stands for the ticks in flight it names"
    assert api.http.delete("/cancel/min").json() == {"scope": "min", "cleared": True}
    assert api.store.read_stream(CONTROL_STREAM)[-1].type == "CancelCleared"
    assert api.http.delete("/cancel/min").json() == {"scope": "min", "cleared": False}
    assert [scope.scope for scope in cancel_scopes(api.store)] == ["min-queued"]
    ended = TickCancelled(tick_id="min-queued", level="min", reason="cancelled")
    api.store.append(tick_stream("min-queued"), [ended.to_record()])
    api.http.get("/status")  # folds the end into the ticks read model
    assert cancel_scopes(api.store) == [], "a tick's scope ends with its tick"

    before = api.store.last_position()
    unknown = api.http.post("/levels/weekly/pause")
    assert unknown.status_code == 404 and "no level named 'weekly'" in unknown.json()["detail"]
    assert api.http.post("/levels/min/explode").status_code == 422
    assert api.store.last_position() == before


def test_a_backfill_is_forecast_refused_by_its_budget_forced_shown_and_cancelled(
    api: Api,
) -> None:
    """A bad request, a dry run and one its forecast's budget refuses record nothing."""
    end = datetime.now(UTC).replace(second=0, microsecond=0) - HOUR
    body = {"from": (end - HOUR).isoformat(), "to": end.isoformat(), "max": 2}
    before = api.store.last_position()
    bad = [
        ("/levels/weekly/backfill", body, 404, "no level named 'weekly'"),
        ("/levels/min/backfill", {**body, "to": body["from"]}, 422, "is not after from"),
        ("/levels/min/backfill", {**body, "from": "2026-12-01T00:00"}, 422, "from"),
        ("/levels/min/backfill", {**body, "max": 0}, 422, "max"),
        ("/levels/min/backfill", {**body, "overlap": "cancel_other"}, 422, "overlap"),
    ]
    for path, payload, code, says in bad:
        answer = api.http.post(path, json=payload)
        assert answer.status_code == code and says in str(answer.json()["detail"]), answer.text
    assert api.store.last_position() == before
    dry = api.http.post("/levels/min/backfill", json={**body, "dry_run": True})
    assert dry.status_code == 200, dry.text
    forecast = dry.json()
    assert len(forecast["slots"]) == 60 and forecast["left_alone"] == 0
    assert forecast["tick"]["tokens"] == 10_000 and forecast["tick"]["ticks"] == 0
    assert "reservation" in forecast["tick"]["source"]
    (crossing,) = forecast["crossings"]  # 100,000 a day pays ten reservations of 10,000
    assert (crossing["budget"], crossing["fits"]) == ("level-min-daily", 10)
    assert crossing["slot"] == forecast["slots"][10]
    refused = api.http.post("/levels/min/backfill", json=body)
    assert refused.status_code == 409 and "level-min-daily" in refused.json()["detail"]
    assert api.store.last_position() == before
    asked = api.http.post("/levels/min/backfill", json={**body, "force": True})
    assert asked.status_code == 202, asked.text
    shown = asked.json()
    assert (shown["state"], shown["overlap"], shown["max_at_once"]) == ("open", "buffer_all", 2)
    assert shown["slots"] == 60 and shown["claimed"] == 0
    (listed,) = api.http.get("/status").json()["backfills"]
    assert listed["backfill_id"] == shown["backfill_id"] and listed["by"] == "http:127.0.0.1"
    assert shown["backfill_id"] in api.http.get("/dashboard/panels").text
    cancelled = api.http.post(f"/backfills/{shown['backfill_id']}/cancel")
    assert cancelled.json() == {"scope": shown["backfill_id"], "scopes": [], "matching": []}
    assert api.http.get("/status").json()["backfills"][0]["state"] == "cancelled"
    again = api.http.post(f"/backfills/{shown['backfill_id']}/cancel")
    assert again.status_code == 404 and "cancelled already" in again.json()["detail"]


def test_a_tick_page_tells_its_story_and_its_stream_ends_with_it(api: Api, tmp_path: Path) -> None:
    seed(api.store, tmp_path / "results")
    record(
        api.store,
        TickAttemptFailed(
            tick_id="min-done",
            level="min",
            attempt=1,
            failure_class="content",
            reason="odd",
            retry_in_seconds=0.5,
        ),
    )

    page = api.http.get("/dashboard/ticks/min-done").text
    assert page.count('<li class="ev ') == 5, "every event is a line of the story"
    assert "model gpt-4o-mini: 1,200 prompt + 30 completion tokens" in page
    assert "attempt 1 failed (content): odd" in page, "a line after the end is shown too"
    assert 'data-ended="true"' in page and "completed (stop reason" in page
    assert "Pager is quiet." in page and 'id="cancel"' not in page
    running = api.http.get("/dashboard/ticks/hour-run").text
    assert 'data-ended="false"' in running and 'data-cancel="hour-run"' in running

    stream = api.http.get("/ticks/min-done/stream", params={"after": 3})
    assert stream.headers["content-type"].startswith("text/event-stream")
    kinds = [line for line in stream.text.splitlines() if line.startswith("event: ")]
    assert kinds == ["event: story", "event: story", "event: now", "event: end"], stream.text
    assert '<p id="now" class="now"></p>' in stream.text, "an ended tick stands nowhere"
    assert "t-TickCompleted" in stream.text and "data: 5" in stream.text

    listed = api.http.get("/dashboard/ticks", params={"level": "min"}).text
    assert 'href="/ui/ticks/min-done"' in listed and "hour-run" not in listed
    for missing in ("/dashboard/ticks/nope", "/ticks/nope/stream"):
        answer = api.http.get(missing)
        assert answer.status_code == 404 and "'nope'" in answer.json()["detail"], missing
    unknown = api.http.post("/levels/nope/tick")
    assert unknown.status_code == 404 and "'nope'" in unknown.json()["detail"]


def test_run_now_owns_its_tick_in_the_server_process_without_a_cli(tmp_path: Path) -> None:
    """The button's tick is claimed and followed by the server; only the tick is a process."""
    settings = settings_for(f"sqlite:///{tmp_path}/events.db", tmp_path)
    store = open_store(settings.store.url)
    try:
        with serving(settings, store) as http:
            started = http.post("/levels/min/tick")
            assert started.status_code == 202, started.text
            stream = f"tick-{started.json()['tick_id']}"

            def ended() -> list[str]:
                types = [event.type for event in store.read_stream(stream)]
                return types if set(types) & TERMINAL_TYPES else []

            types = wait_until(ended, "the run-now tick to end")
        scheduled = store.read_stream(stream, limit=1)[0]
        assert scheduled.data["manual"] and scheduled.data["scheduler_pid"] == os.getpid()
        assert "TickStarted" in types and types[-1] == "TickCompleted", types
    finally:
        store.close()


def test_a_stopping_server_ends_the_run_now_tick_it_owns_cancelled(tmp_path: Path) -> None:
    settings = settings_for(f"sqlite:///{tmp_path}/events.db", tmp_path)
    store = open_store(settings.store.url)
    try:
        with fake_upstream() as fake:
            fake.script("default", [Step(text="too late", delay=120)])
            env = {**os.environ, "OPENAI_BASE_URL": fake.url}
            manual = ManualTicks(settings, store, upstream=lambda: nullcontext(env), router=None)
            with serving(settings, store, manual) as http:
                stream = f"tick-{http.post('/levels/min/tick').json()['tick_id']}"

                def started() -> bool:
                    return any(e.type == "TickStarted" for e in store.read_stream(stream))

                wait_until(started, "the run-now tick to start")
        ended = wait_until(
            lambda: [e for e in store.read_stream(stream) if e.type in TERMINAL_TYPES],
            "the tick to end",
        )
        assert [(e.type, e.data["reason"]) for e in ended] == [
            ("TickCancelled", ManualTicks.STOPPED)
        ]
        assert manual.start("min") is None, "a stopped server starts no tick"
    finally:
        store.close()


def test_the_openapi_schema_lists_every_endpoint(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    assert {
        "/status",
        "/ticks",
        "/ticks/{tick_id}",
        "/spend",
        "/digests/latest",
        "/levels/{level}/{action}",
        "/cancel/{scope}",
        "/metrics",
    } <= set(paths)
    assert {p["name"] for p in paths["/ticks"]["get"]["parameters"]} == {
        "level",
        "status",
        "since",
        "before",
        "limit",
    }
    before = next(p for p in paths["/ticks"]["get"]["parameters"] if p["name"] == "before")
    bounds = next(s for s in before["schema"]["anyOf"] if s["type"] == "string")
    assert (bounds["minLength"], bounds["maxLength"]) == (22, 228)
    assert "Link" in paths["/ticks"]["get"]["responses"]["200"]["headers"]


def test_with_a_token_every_endpoint_needs_the_bearer(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    with serving(settings_for(sqlite_url, tmp_path, token=TOKEN), store) as http:
        for path in ("/status", "/ticks", "/metrics", "/dashboard/panels", "/dashboard/ticks"):
            assert http.get(path).status_code == 401, path
            wrong = http.get(path, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, path
            right = http.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
            assert right.status_code == 200, path
        assert http.post("/levels/min/pause").status_code == 401
        assert not level_paused(store, "min")
        assert http.post("/levels/min/tick").status_code == 401
        assert http.get("/ticks/x/stream").status_code == 401
        assert http.get("/dashboard/ticks/x").status_code == 401
        assert store.last_position() == 0, "nothing was recorded or started"
        for shell in ("/", "/ui/ticks", "/ui/ticks/x"):
            assert http.get(shell).status_code == 200, "the empty page shells hold no data"
    store.close()


def metrics(http: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = http.get("/metrics")
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


def test_metrics_after_real_ticks(tmp_path: Path, fake: FakeUpstream) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "oncall.md").write_text("# On call\n\nEscalate database alerts to Ana.")
    build_index(notes, tmp_path / "rag.db")
    harness = Harness(tmp_path, fake, max_tool_calls=1)
    capped = harness.tick([calls("rag_lookup", "rag_lookup"), Step(text="never asked")])
    plain = harness.tick([Step(text="Quiet.")])
    assert capped.status == plain.status == "completed"
    fired = datetime.now(UTC) - timedelta(seconds=3)  # a jittered slot: late from its fire time
    slot = fired - timedelta(seconds=50)
    late = TickScheduled(tick_id="min-late", level="min", slot=slot, fire_at=fired)
    record(harness.store, late)
    on_plan = {"prompt_tokens": 100, "completion_tokens": 10, "price_source": "catalog:plan"}
    for billing, cost in (("subscription", 0.25), ("api", 0.5)):
        plan = BudgetSpent(
            tick_id="min-plan",
            level="min",
            model="plan-model",
            cost_usd=cost,
            billing=billing,
            **on_plan,
        )
        record(harness.store, plan)

    with serving(harness.settings, harness.store) as http:
        seen = metrics(http)
    spent = [
        e for outcome in (capped, plain) for e in harness.events(outcome) if e.type == "BudgetSpent"
    ]
    model = spent[0].data["model"]
    level = (("level", "min"),)
    assert seen[("tickwork_ticks", (("level", "min"), ("status", "completed")))] == 2
    assert seen[("tickwork_tick_duration_seconds_count", level)] == 2
    assert seen[("tickwork_tick_duration_seconds_bucket", (("le", "+Inf"), *level))] == 2
    assert seen[("tickwork_tick_duration_seconds_sum", level)] > 0
    assert seen[("tickwork_tokens_total", (("kind", "prompt"), *level, ("model", model)))] == sum(
        e.data["prompt_tokens"] for e in spent
    )
    assert seen[("tickwork_model_calls_total", (*level, ("model", model)))] == len(spent)
    on_plan_model = (*level, ("model", "plan-model"))
    assert seen[("tickwork_cost_usd_total", on_plan_model)] == 0.75, "list value"
    assert seen[("tickwork_billed_usd_total", on_plan_model)] == 0.5, "billed: api only"
    assert seen[("tickwork_tool_cap_hits_total", level)] == 1
    assert seen[("tickwork_tool_calls_cancelled_total", level)] == 1
    assert seen[("tickwork_ticks_in_flight", (*level, ("state", "queued")))] == 1
    assert seen[("tickwork_ticks_in_flight", (*level, ("state", "running")))] == 0
    assert seen[("tickwork_projection_lag_events", (("projection", "ticks"),))] == 0
    assert seen[("tickwork_store_position", ())] == harness.store.last_position()
    lag = seen[("tickwork_scheduler_fire_lag_seconds", (*level, ("stat", "last")))]
    assert 3 <= lag < 50
    text = Exposition(Reads(harness.settings, harness.store)).text()
    parsed = list(text_string_to_metric_families(text.decode()))
    assert generate_latest(_Families(parsed)) == text, (
        "the text /metrics writes is prometheus_client's, byte for byte"
    )
    odd = GaugeMetricFamily("tickwork_probe", 'a "help"\\ line\n', labels=["value"])
    ours = header("tickwork_probe", "gauge", 'a "help"\\ line\n')
    for n, value in enumerate((12_345_678, 999_999, -3, 0.5, 1e21, float("inf"))):
        label = f'quote " slash \\ newline \n {n}'
        odd.add_metric([label], value)
        ours += sample("tickwork_probe", {"value": label}, value)
    assert ours.encode() == generate_latest(_Families([odd])), "odd values and labels too"
    harness.store.close()


def test_metrics_kept_between_scrapes_show_each_change_as_a_fresh_render_does(api: Api) -> None:
    """The text kept from the last scrape is reused only while what it shows stands."""
    kept = Exposition(Reads(api.settings, api.store))

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = kept.text()
        fresh = Exposition(Reads(api.settings, api.store)).text()
        assert text == fresh, "the kept text is what a fresh render writes"
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text.decode())
            for sample in family.samples
        }

    level = (("level", "min"),)
    running = (*level, ("state", "running"))
    empty = scrape()
    assert empty[("tickwork_ticks_in_flight", running)] == 0
    assert scrape() == empty, "nothing stored since: the same text"

    record(api.store, *started_with_spend("min-a", "min", "gpt-4o-mini", (100, 10)))
    started = scrape()
    assert started[("tickwork_ticks", (*level, ("status", "running")))] == 1
    assert started[("tickwork_ticks_in_flight", running)] == 1
    tokens = ("tickwork_tokens_total", (("kind", "prompt"), *level, ("model", "gpt-4o-mini")))
    assert started[tokens] == 100
    assert ("tickwork_tick_duration_seconds_count", level) not in started

    record(api.store, TickCompleted(tick_id="min-a", level="min"))
    ended = scrape()
    assert ended[("tickwork_ticks", (*level, ("status", "completed")))] == 1
    assert ("tickwork_ticks", (*level, ("status", "running"))) not in ended
    assert ended[("tickwork_ticks_in_flight", running)] == 0
    assert ended[("tickwork_tick_duration_seconds_count", level)] == 1
    assert ended[("tickwork_store_position", ())] == api.store.last_position()

    record(api.store, *started_with_spend("min-b", "min", "gpt-4o-mini", (5, 1)))
    assert scrape()[tokens] == 105, "the same row of spend, moved"
    assert api.http.post("/levels/hour/pause").status_code == 200
    assert scrape()[("tickwork_level_paused", (("level", "hour"),))] == 1


@dataclass
class _Families:
    """Metric families as prometheus_client's writer takes them (a collector)."""

    families: list[Metric]

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def test_a_refused_level_says_why_and_how_to_install_in_status_and_on_the_dashboard(
    sqlite_url: str, tmp_path: Path
) -> None:
    agents = tmp_path / "no-agents"
    settings = Settings(
        store=StoreConfig(url=sqlite_url),
        paths=PathsConfig(results=tmp_path / "results", spool=tmp_path / "spool"),
        agents=AgentsConfig(dir=agents),
        levels={
            "min": LevelConfig(every="1m", model="gpt-4o-mini"),
            "coder": LevelConfig(every="1m", model="m", api="anthropic", agent="claude-code"),
        },
    )
    store = open_store(sqlite_url)
    with serving(settings, store) as http:
        levels = {level["name"]: level for level in http.get("/status").json()["levels"]}
        panels = http.get("/dashboard/panels").text
    store.close()
    assert levels["min"]["refused"] is None and levels["coder"]["next_slot"] is None
    assert f"npm ci --prefix {agents}" in levels["coder"]["refused"]
    assert "refused: levels.coder.agent = &#x27;claude-code&#x27;" in panels
    assert f"npm ci --prefix {agents}" in panels
