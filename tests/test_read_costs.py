"""Invariant 14: an operator read path costs what its window costs, not what history holds.

Each path runs against a store holding a fixed window of recent events and ticks behind
HISTORY ticks of history, then behind ten times as much. Its statements, caught as the
path sends them, are measured by the database's own account of the work, not by a
clock: on SQLite the virtual machine's instructions (a progress handler counts them)
and the plan (no SCAN of a table, no temporary B-tree to sort); on PostgreSQL
`EXPLAIN (ANALYZE, BUFFERS)`: rows the plan's scans touched and buffers read. The work
at ten times the history may exceed the work at one only by a B-tree level per lookup.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import uuid4

import orjson
import psycopg
import pytest
import sqlalchemy as sa
from fastapi import Response

from harness.api import dashboard
from harness.api.metrics import Exposition
from harness.api.reads import Reads
from harness.api.routes.spend import spend as spend_route
from harness.config import LevelConfig, Settings, StoreConfig
from harness.digests.build import build_digest
from harness.prices import PriceBook
from harness.projections import projector_for, reconcile
from harness.projections.bills import Bill, BillRow
from harness.projections.level_stats import stats_of_levels
from harness.projections.spend import BOOKED, REPORT_DAYS, spend_daily
from harness.projections.tick_spend import tick_spend
from harness.projections.ticks import (
    fire_lags,
    last_slots,
    last_statuses,
    open_ticks,
    previous_result_path,
    recent_ticks,
    settle_latest,
    slots_run,
    tick_ids_starting,
    tick_page,
    ticks,
    ticks_in_flight,
)
from harness.scheduling.describe import describe_levels
from harness.scheduling.status import snapshot
from harness.store import NewEvent, SqlEventStore
from harness.store.engine import sqlite_path
from harness.store.schema import events, projection_checkpoints
from harness.store.tick_rows import compact
from tests.conftest import libpq_dsn

HISTORY = 2_000
"""Ticks (and events) of history outside the window at the smaller size."""
LEVELS = [f"l{n}" for n in range(20)]
NOW = datetime.now(UTC).replace(microsecond=0)
WINDOW = timedelta(hours=1)
WINDOW_TICKS = 60
"""Ticks in the last hour, one a minute, of levels in turn; the last few still open."""
OPEN_STATUSES = ("scheduled", "running", "unknown")

Path_ = Callable[[SqlEventStore], object]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each backend's empty store.

    PostgreSQL's is truncated, so no earlier test's dead rows add to the buffers a plan reads.
    """
    url: str = request.getfixturevalue(
        "sqlite_url" if request.param == "sqlite" else "truncated_pg_url"
    )
    return url


def _with_conn(read: Callable[[sa.Connection], object]) -> Path_:
    def path(store: SqlEventStore) -> object:
        with store.read_transaction() as conn:
            return read(conn)

    return path


def _next_page(store: SqlEventStore) -> object:
    return tick_page(store, before=tick_page(store, limit=20).following, limit=20)


PATHS: dict[str, Path_] = {
    "first_position_since": lambda store: store.first_position_since(NOW - WINDOW),
    "tick_rows": lambda store: tick_page(store, limit=20),
    "tick_rows_next_page": _next_page,
    "tick_rows_level": lambda store: tick_page(store, levels=["l3"], limit=2),
    "tick_rows_levels": lambda store: tick_page(store, levels=["l3", "l4"], limit=2),
    "tick_rows_since": lambda store: tick_page(store, since=NOW - WINDOW),
    # `tickwork ticks --status failed`: its window (default 24h) bounds the walk, however
    # rare the status is.
    "level_stats": lambda store: stats_of_levels(store, LEVELS, NOW),
    "tick_list_status": lambda store: tick_page(
        store, status="failed", since=NOW - WINDOW, limit=50
    ),
    "open_ticks": open_ticks,
    "fire_lags": lambda store: fire_lags(store, 100),
    "ticks_in_flight": lambda store: (ticks_in_flight(store), ticks_in_flight(store, ["l3"])),
    "last_slots": lambda store: last_slots(store, LEVELS),
    "previous_result_path": lambda store: previous_result_path(store, "l3"),
    "tick_ids_starting": lambda store: tick_ids_starting(store, "l3-9", 10),
    "last_statuses": lambda store: last_statuses(store, LEVELS),
    "recent_ticks": _with_conn(lambda conn: recent_ticks(conn, LEVELS, 40)),
    "slots_run": _with_conn(lambda conn: slots_run(conn, "l3", 10)),
}


def _settings(store: SqlEventStore, levels: list[str] = LEVELS) -> Settings:
    return Settings(
        store=StoreConfig(url=store.engine.url.render_as_string(hide_password=False)),
        levels={level: LevelConfig(every="1m", model="gpt-4o-mini") for level in levels},
    )


def _reads(store: SqlEventStore) -> Reads:
    return Reads(_settings(store), store)


def _digest(store: SqlEventStore) -> object:
    prices = PriceBook()
    projector = projector_for(store, prices)
    return build_digest(store, projector, prices, "costs", NOW - WINDOW, NOW, LEVELS)


SERVED: dict[str, Path_] = {
    "dashboard panels": lambda store: dashboard.panels(_reads(store)),
    "metrics": lambda store: Exposition(_reads(store)).text(),
    "status": lambda store: snapshot(_settings(store), store, PriceBook()),
    "digest of the last hour": _digest,
    "levels described": lambda store: describe_levels(_settings(store), store, LEVELS, NOW),
}
"""What an operator asks of the service, each a path of many statements: every one of them
is held to the window's cost (their plans to scan no history table, below)."""


def _tick(n: int, at: datetime, status: str) -> dict[str, Any]:
    """A row of the ticks read model; `n` orders ids as time does."""
    level = LEVELS[n % len(LEVELS)]
    ended = status not in OPEN_STATUSES
    return {
        "tick_id": f"{level}-{n:08d}",
        "level": level,
        "status": status,
        "slot": at,
        "scheduled_at": at,
        "started_at": None if status == "scheduled" else at + timedelta(seconds=1),
        "finished_at": at + timedelta(seconds=30) if ended else None,
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "model_calls": 1,
        "estimated_calls": 0,
        "tool_calls": 0,
        "tool_calls_cancelled": 0,
        "result_path": f"/r/{level}-{n}.json" if status == "completed" else None,
        "reason": None,
        "sort_at": at,
    }


def _event(position: int, at: datetime) -> dict[str, Any]:
    return {
        "global_position": position,
        "event_id": uuid4(),
        "stream_id": f"tick-{position}",
        "stream_position": 1,
        "type": "BudgetSpent",
        "version": 1,
        "data": {"tick_id": str(position), "prompt_tokens": 1},
        "metadata": {},
        "recorded_at": at,
    }


def _add_history(store: SqlEventStore, start: int, count: int) -> None:
    """Ended ticks and events older than the window; their ids and positions below its own."""
    old = NOW - timedelta(days=2)
    with store.write_transaction() as conn:
        conn.execute(
            ticks.insert(),
            [
                _tick(n, old - timedelta(minutes=n), "failed" if n % 7 == 0 else "completed")
                for n in range(start, start + count)
            ],
        )
        settle_latest(conn, LEVELS)
        conn.execute(
            tick_spend.insert(),
            [_spent(n, old - timedelta(minutes=n)) for n in range(start, start + count)],
        )
        conn.execute(
            events.insert(),
            [_event(n + 1, old - timedelta(minutes=n)) for n in range(start, start + count)],
        )
        # Spend by day: days before the dashboard's chart, which reads its own window.
        charted = NOW - timedelta(days=dashboard.CHART_DAYS)
        days = {
            (LEVELS[n % len(LEVELS)], (charted - timedelta(minutes=n)).date())
            for n in range(start, start + count)
        }
        conn.execute(
            spend_daily.insert(), [_spent_on(level, day, f"h{start}") for level, day in days]
        )
    _settle(store)


def _add_window(store: SqlEventStore) -> None:
    with store.write_transaction() as conn:
        rows = []
        for k in range(WINDOW_TICKS):
            left = WINDOW_TICKS - k
            status = OPEN_STATUSES[left % 3] if left <= 6 else "completed"
            rows.append(_tick(90_000_000 + k, NOW - timedelta(minutes=left), status))
        conn.execute(ticks.insert(), rows)
        settle_latest(conn, LEVELS)
        conn.execute(
            tick_spend.insert(),
            [
                _spent(90_000_000 + k, NOW - timedelta(minutes=WINDOW_TICKS - k))
                for k in range(WINDOW_TICKS)
            ],
        )
        conn.execute(spend_daily.insert(), [_spent_on(level, NOW.date(), "") for level in LEVELS])
        first = 50_000_000
        conn.execute(
            events.insert(),
            [_event(first + k, NOW - WINDOW + timedelta(minutes=k)) for k in range(WINDOW_TICKS)],
        )


ONE_CALL = {
    "model": "gpt-4o-mini",
    "price_tier": -1,
    "prompt_tokens": 100,
    "completion_tokens": 10,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "model_calls": 1,
    "estimated_calls": 0,
}
"""One model call's spend, as the spend read models sum it."""


def _spent(n: int, at: datetime) -> dict[str, Any]:
    """The tick spend row of `_tick(n, at, …)`: one model call."""
    return {
        **ONE_CALL,
        "tick_id": f"{LEVELS[n % len(LEVELS)]}-{n:08d}",
        "day": at.date(),
        "governor_fired": 0,
        "hedges": 0,
        "twin": 0,
    }


def _spent_on(level: str, day: date, template_hash: str) -> dict[str, Any]:
    """A spend read model row: a level's calls on a day (`template_hash` keeps rows apart)."""
    return {
        **ONE_CALL,
        **dict.fromkeys(BOOKED, 0),
        "level": level,
        "day": day,
        "template_hash": template_hash,
        "target": "",
        "price_source": "",
        "billing": "api",
    }


def _caught_up(store: SqlEventStore) -> None:
    """Every read model's checkpoint at the last event, as a running projector keeps them.

    The rows above stand for what the projections folded; the served paths bring the
    read models up to date first, which then folds nothing.
    """
    names = projector_for(store, PriceBook()).checkpoints()
    with store.write_transaction() as conn:
        conn.execute(projection_checkpoints.delete())
        conn.execute(
            projection_checkpoints.insert(),
            [
                {"name": name, "position": 50_000_000 + WINDOW_TICKS - 1, "updated_at": NOW}
                for name in names
            ],
        )


def _settle(store: SqlEventStore) -> None:
    """PostgreSQL: statistics and visibility maps as a running service's autovacuum keeps them.

    Every table of the store, after each load: the paths read small read models too,
    and a TRUNCATE (the store emptied for the test) keeps a table's column statistics. A
    table left to autovacuum was planned with an earlier test's statistics or with fresh
    ones, as its timing fell: `tick_spend` analyzed when it held a few ticks of many rows
    made the digest hash-join all of it (2,719 -> 20,419 rows) instead of looking up the
    window's ticks.
    """
    store.vacuum()


@contextmanager
def _caught(store: SqlEventStore) -> Iterator[list[tuple[str, Any]]]:
    """The statements (and their parameters) the store's engine sends meanwhile."""
    seen: list[tuple[str, Any]] = []

    def record(*args: Any) -> None:
        _conn, _cursor, statement, parameters, _context, _many = args
        seen.append((statement, parameters))

    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)


@dataclass
class Work:
    """What a path's statements cost the database, and their plans for the message."""

    units: int
    """SQLite: VM instructions; PostgreSQL: rows its scans touched."""
    buffers: int
    plans: list[str]


def _sqlite_work(path: str, statements: list[tuple[str, Any]]) -> Work:
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        return 0

    plans = []
    with closing(sqlite3.connect(path)) as raw:
        for statement, parameters in statements:
            plan = raw.execute(f"EXPLAIN QUERY PLAN {statement}", parameters).fetchall()
            plans.append("; ".join(row[-1] for row in plan))
            raw.set_progress_handler(step, 1)
            raw.execute(statement, parameters).fetchall()
            raw.set_progress_handler(None, 1)
    return Work(steps, 0, plans)


def _touched(node: dict[str, Any]) -> int:
    """Rows every scan of a plan node (and below) returned or filtered away."""
    own = 0
    if "Scan" in node["Node Type"]:
        rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        own = rows * node["Actual Loops"]
    return own + sum(_touched(child) for child in node.get("Plans", []))


def _pg_work(dsn: str, statements: list[tuple[str, Any]]) -> Work:
    units = buffers = 0
    plans = []
    with psycopg.connect(dsn, autocommit=True) as raw:
        for statement, parameters in statements:
            explained = raw.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters
            ).fetchone()
            assert explained is not None
            (top,) = explained[0] if isinstance(explained[0], list) else orjson.loads(explained[0])
            plan = top["Plan"]
            units += _touched(plan)
            # At least none: the horizon's InitPlan can report more than its statement.
            buffers += max(0, _buffers(plan) - sum(map(_buffers, _init_plans(plan))))
            plans.append(_outline(plan))
    return Work(units, buffers, plans)


def _buffers(node: dict[str, Any]) -> int:
    return int(node["Shared Hit Blocks"] + node["Shared Read Blocks"])


def _init_plans(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The InitPlans of a plan: the writers' horizon among them.

    Its cost follows the transactions running in the whole cluster (other tests' among
    them), not the history of the store.
    """
    found = []
    for child in node.get("Plans", []):
        if child.get("Parent Relationship") == "InitPlan":
            found.append(child)
        else:
            found += _init_plans(child)
    return found


def _outline(node: dict[str, Any]) -> str:
    name = f"{node['Node Type']} {node.get('Index Name', node.get('Relation Name', ''))}".strip()
    below = ", ".join(_outline(child) for child in node.get("Plans", []))
    return f"{name} ({below})" if below else name


def _work(store: SqlEventStore, path: Path_) -> Work:
    with _caught(store) as statements:
        path(store)
    statements = [(s, p) for s, p in statements if s.lstrip().upper().startswith("SELECT")]
    assert statements, "the path sent no query"
    url = store.engine.url
    if url.get_backend_name() == "sqlite":
        database = sqlite_path(url)
        assert database is not None
        return _sqlite_work(str(database), statements)
    return _pg_work(libpq_dsn(url), statements)


def test_each_read_path_costs_the_same_behind_ten_times_the_history(
    store: SqlEventStore,
) -> None:
    _add_window(store)
    _caught_up(store)
    paths = {**PATHS, **SERVED}
    _add_history(store, 0, HISTORY)
    small = {name: _work(store, path) for name, path in paths.items()}
    _add_history(store, HISTORY, 9 * HISTORY)
    large = {name: _work(store, path) for name, path in paths.items()}

    grown = {
        name: (small[name], large[name])
        for name in paths
        # A B-tree one level deeper costs each lookup a buffer (PostgreSQL) or nothing.
        if large[name].units > small[name].units * 1.1 + 10
        or large[name].buffers > small[name].buffers + 2 * len(large[name].plans) + 5
    }
    assert not grown, "\n".join(
        f"{name}: {a.units} -> {b.units} units, {a.buffers} -> {b.buffers} buffers; {b.plans}"
        for name, (a, b) in grown.items()
    )
    if store.engine.dialect.name == "sqlite":
        whole = {
            name: work.plans
            for name, work in large.items()
            if any(_reads_everything(name, plan) for plan in work.plans)
        }
        assert not whole, whole


SORTS_OPEN_TICKS = {"ticks_in_flight"}
"""Paths that sort what the open ticks' partial index gives: a few rows, however old the
store (the cost check above holds them to it)."""


HISTORY_TABLES = ("ticks", "events", "tick_spend")
"""Tables that grow with every tick; the others hold a few rows per level or per day."""


def _reads_everything(path: str, plan: str) -> bool:
    """A SCAN of a table itself, or a sort, where the path should walk an index in order.

    A SCAN of an index is an ordered walk that the query's LIMIT stops, or a partial
    index of open ticks; the cost check above tells whether it stopped. A served path
    also sorts and scans small read models (counters per level, spend per day): only a
    SCAN of a table that grows with every tick counts there.
    """
    steps = plan.split("; ")
    if path in SERVED:
        return any(
            step.split()[:2] == ["SCAN", table] and "INDEX" not in step
            for step in steps
            for table in HISTORY_TABLES
        )
    subqueries = {step.split()[1] for step in steps if step.startswith("CO-ROUTINE")}
    scans_table = any(
        step.startswith("SCAN")
        and "INDEX" not in step
        and step != "SCAN CONSTANT ROW"
        and step.split()[1] not in subqueries
        for step in steps
    )
    sorts = any("TEMP B-TREE" in step for step in steps) and path not in SORTS_OPEN_TICKS
    return scans_table or sorts


def test_the_paths_answer_from_the_window(store: SqlEventStore) -> None:
    _add_window(store)
    _add_history(store, 0, HISTORY)
    assert store.first_position_since(NOW - WINDOW) == 50_000_000
    first = tick_page(store, limit=3)
    second = tick_page(store, before=first.following, limit=3)
    newest = [row.tick_id for row in (*first.rows, *second.rows)]
    assert newest == [f"{LEVELS[n % 20]}-{n:08d}" for n in range(90_000_059, 90_000_053, -1)]
    with store.read_transaction() as conn:
        recent = recent_ticks(conn, ["l3", "l14"], 2)
        assert [mark.tick_id for mark in recent["l3"]] == ["l3-90000043", "l3-90000023"]
        assert [mark.status for mark in recent["l14"]] == ["scheduled", "completed"]
    assert len(open_ticks(store)) == 6
    assert previous_result_path(store, "l3") == "/r/l3-90000043.json"
    slots = last_slots(store, [*LEVELS, "never"])
    assert set(slots) == set(LEVELS) and max(slots.values()) == NOW - timedelta(minutes=1)
    assert tick_ids_starting(store, "l3-9", 10) == [
        f"l3-{n:08d}" for n in range(90_000_003, 90_000_060, 20)
    ]
    statuses = last_statuses(store, [*LEVELS, "never"])
    assert set(statuses) == set(LEVELS) and statuses["l19"] == OPEN_STATUSES[1 % 3]
    assert {t.status for t in ticks_in_flight(store)} == {"scheduled", "running"}


def test_the_timeline_draws_troubled_levels_first_and_no_more_than_its_lanes(
    store: SqlEventStore,
) -> None:
    many = [f"m{n:02d}" for n in range(dashboard.TIMELINE_LANES + 5)]
    rows = [
        {
            **_tick(n, NOW - timedelta(minutes=1), "completed"),
            "tick_id": f"{level}-1",
            "level": level,
        }
        for n, level in enumerate(many)
    ]
    rows[-1]["status"] = "failed"
    with store.write_transaction() as conn:
        conn.execute(ticks.insert(), rows)
        settle_latest(conn, many)
    _caught_up(store)
    page = dashboard.panels(Reads(_settings(store, many), store))
    timeline = page[page.index('id="timeline"') :]
    lanes = re.findall(r'<span class="level">([^<]+)</span>', timeline)
    assert lanes == [many[-1], *many[: dashboard.TIMELINE_LANES - 1], "UTC"], "then its axis"
    assert f"{dashboard.TIMELINE_LANES} of {len(many)} levels" in timeline


def _closed_ticks(store: SqlEventStore, start: int, count: int) -> None:
    """`count` ticks scheduled and ended, packed into tick rows as the service packs them."""
    for n in range(start, start + count):
        tick = f"p{n:05d}"
        store.append(
            f"tick-{tick}",
            [
                NewEvent(uuid4(), kind, 1, {"tick_id": tick, "level": "l1"}, {})
                for kind in ("TickScheduled", "TickCompleted")
            ],
        )
    _settle(store)
    compact(store)


def test_the_newest_of_a_type_packed_ticks_hold_costs_the_same_behind_ten_times_the_history(
    store: SqlEventStore,
) -> None:
    """`/metrics`' fire lags: the last slots claimed, when every tick that claimed them is packed.

    The hot events hold none of the type, so the answer is in tick rows: read back from the
    newest until nothing older can outrank it, not every row unpacked.
    """

    def newest(store: SqlEventStore) -> object:
        return store.read_last(5, types=["TickScheduled"])

    _closed_ticks(store, 0, 20)
    small = _work(store, newest)
    _closed_ticks(store, 20, 180)
    large = _work(store, newest)
    assert [e.data["tick_id"] for e in store.read_last(2, types=["TickScheduled"])] == [
        "p00199",
        "p00198",
    ]
    assert large.units <= small.units * 1.1 + 10, (small, large)


def _days_of_spend(store: SqlEventStore, first: int, days: int) -> None:
    """Every level's spend on each of `days` days, `first` days before the report's window."""
    start = NOW.date() - timedelta(days=REPORT_DAYS + first)
    with store.write_transaction() as conn:
        conn.execute(
            spend_daily.insert(),
            [
                _spent_on(level, start - timedelta(days=back), "")
                for back in range(days)
                for level in LEVELS
            ],
        )
    _settle(store)


def _reconciled_today(store: SqlEventStore) -> object:
    """`tickwork reconcile` of a bill of today's spend: it reads the bill's days alone."""
    today = NOW.date()
    bill = Bill("openai", today, today, {(today, "gpt-4o-mini"): BillRow(tokens=1)}, True)
    return reconcile(store, PriceBook(), bill, 0.005)


@pytest.mark.parametrize(
    "report",
    [lambda store: spend_route(_reads(store), Response()), _reconciled_today],
    ids=["GET /spend", "tickwork reconcile"],
)
def test_a_spend_report_not_told_its_window_costs_the_same_behind_ten_times_the_days(
    store: SqlEventStore, report: Path_
) -> None:
    """Each reads its own days however many the model keeps.

    `GET /spend` without `since`: the last REPORT_DAYS days; a reconciliation: its bill's.
    """
    with store.write_transaction() as conn:
        conn.execute(spend_daily.insert(), [_spent_on(level, NOW.date(), "") for level in LEVELS])
    _days_of_spend(store, 0, 30)
    small = _work(store, report)
    _days_of_spend(store, 30, 270)
    large = _work(store, report)

    # PostgreSQL may read the window's rows by a bitmap instead, which counts them twice;
    # the whole history would be thousands (20 levels a day, 300 days).
    assert large.units <= small.units * 2 + 10, (small, large)
    (row,) = spend_route(_reads(store), Response(), by=["model"])
    assert row.model_calls == len(LEVELS), "today's spend, none of the 300 days before the window"
