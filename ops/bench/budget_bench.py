"""Budgets: a global USD budget crossed by 20 parallel ticks, and the cost of the checks.

1. Overshoot: 20 ticks of 20 levels start at once (warm launcher, local executor, one
   SQLite store) under one global USD budget; each asks the fake upstream for up to
   `--calls` model calls (tool calls in between). The budget is crossed mid-wave; every
   tick checks it before each call. Printed: spend against the limit, the overshoot in
   tokens and USD, and the bound (one call per running tick: the largest call times the
   ticks running).
2. Check cost: what the worker's check adds to each model call with 10 budgets in scope
   (`workers.budget_guard.BudgetGuard`: read the log since its last position, fold what
   is new, weigh 10 budgets), while another writer books one `BudgetSpent` between calls
   as other ticks would. p50 and p99 over `--samples` calls, on SQLite and (if reachable)
   PostgreSQL, beside one plain store round trip (the machine's load in the figure); the
   scheduler's check of a slot of a wave against the same 10 budgets
   (`Budgets.try_reserve`: one query), and the budgets read model's fold of one new call.

    .venv/bin/python ops/bench/budget_bench.py [--calls 6] [--samples 500] [--pg URL]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
from machine import describe
from sqlalchemy.engine import make_url

from harness.config import (
    LevelConfig,
    PathsConfig,
    PriceOverride,
    RunnerConfig,
    Settings,
    StoreConfig,
)
from harness.contracts import BudgetSpent, TickStarted
from harness.contracts.budgets import BudgetEntry
from harness.contracts.events import TERMINAL_TYPES, tick_stream
from harness.devtools.fake_llm import Step, ToolCallSpec, fake_upstream
from harness.execution.executors import LocalExecutor
from harness.execution.launchers import WarmLauncher
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling.budget import Budgets
from harness.scheduling.waves import SlotClaim, claim_wave
from harness.store import migrate_store, open_store
from workers.budget_guard import BudgetGuard
from workers.recorder import EventRecorder

PRICE = PriceOverride(input_per_mtok=3.0, output_per_mtok=15.0)
TICKS = 20


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def settings_for(folder: Path, url: str, budgets: list[BudgetEntry], levels: int) -> Settings:
    level = LevelConfig(
        every="1m",
        prompt="Look twice.",
        model="bench-model",
        timeout_seconds=120,
        reserve_tokens=0,
        tags=["bench"],
    )
    return Settings(
        store=StoreConfig(url=url),
        paths=PathsConfig(results=folder / "results", spool=folder / "spool"),
        runner=RunnerConfig(max_concurrent=TICKS, start_spacing_seconds=0, grace_seconds=1),
        prices={"bench-model": PRICE},
        levels={f"l{n:02d}": level for n in range(levels)},
        budgets=budgets,
    )


def overshoot(calls: int) -> None:
    """Part 1: 20 parallel ticks under one global USD budget."""
    steps = [
        *(Step(tool_calls=[ToolCallSpec(name="nothing", arguments={})]) for _ in range(calls - 1)),
        Step(text="done"),
    ]
    with tempfile.TemporaryDirectory() as name, fake_upstream() as fake:
        folder = Path(name)
        url = f"sqlite:///{folder}/events.db"
        migrate_store(url)
        # Price of one call of this prompt is about USD 0.0005: 20 ticks x `calls` calls
        # would cost about 0.06; the budget stops them near half of that.
        limit = 0.0003 * TICKS * calls / 2
        budget = BudgetEntry(name="all", scope="global", usd=limit)
        settings = settings_for(folder, url, [budget], TICKS)
        store = open_store(url)
        env = {**os.environ, "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "bench"}
        launcher = WarmLauncher()
        preparer = Preparer(settings, store, env=env)
        runner = Runner(settings, store, launcher, env=env)
        executor = LocalExecutor(settings, preparer, runner, lambda line: None)
        claims = [SlotClaim(f"{level}-wave", level, None) for level in settings.levels]
        for claim in claims:
            fake.script(claim.tick_id, list(steps))
        claim_wave(store, settings, claims)
        began, cpu0 = time.monotonic(), cpu()
        for claim in claims:
            executor.submit(claim)
        executor.wait_idle(600)
        wall, used = time.monotonic() - began, cpu() - cpu0
        executor.shutdown(grace=0)
        launcher.close()
        prices = PriceBook(settings.prices)
        day = datetime.now(UTC).date().isoformat()
        booked, ends = [], []
        for claim in claims:
            for event in store.read_stream(tick_stream(claim.tick_id)):
                if event.type == BudgetSpent.type:
                    booked.append((event.data["prompt_tokens"], event.data["completion_tokens"]))
                elif event.type in TERMINAL_TYPES:
                    ends.append(event.data.get("stop_reason") or event.type)
        costs = [prices.cost("bench-model", day, -1, p, c) or 0.0 for p, c in booked]
        tokens = [p + c for p, c in booked]
        total_usd, total_tokens = sum(costs), sum(tokens)
        # The tokens the budget's limit is worth at the calls' own mix of prices.
        limit_tokens = limit / (total_usd / total_tokens) if total_usd else 0.0
        stopped = sum(end == "budget" for end in ends)
        print(f"\n1. global USD budget {limit:.4f}, {TICKS} parallel ticks of {calls} calls")
        print(f"   calls made {len(booked)} of {TICKS * calls}; ticks stopped by budget {stopped}")
        print(f"   spent USD {total_usd:.6f} ({total_tokens:,} tokens)")
        print(
            f"   overshoot USD {total_usd - limit:.6f}, about {total_tokens - limit_tokens:,.0f}"
            f" tokens (bound: one call per running tick = {TICKS} x max call "
            f"USD {max(costs):.6f} = {TICKS * max(costs):.6f}, {TICKS * max(tokens):,} tokens)"
        )
        print(f"   wall {wall:.1f} s, CPU (this process + ticks) {used:.1f} s")
        store.close()


def check_cost(url: str, samples: int, label: str) -> None:
    """Part 2: the worker's and the scheduler's checks with 10 budgets in scope."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        migrate_store(url)
        windows = ("day", "week", "month", "24h")
        budgets = [
            *(BudgetEntry(name=f"g-{w}", scope="global", window=w, tokens=10**12) for w in windows),
            *(
                BudgetEntry(name=f"l-{w}", scope="level:l00", window=w, tokens=10**11)
                for w in windows
            ),
            *(
                BudgetEntry(
                    name=f"t-{w}", scope="tag:bench", window=w, timezone="Europe/Berlin", usd=10**9
                )
                for w in ("day", "week")
            ),
        ]
        settings = settings_for(folder, url, budgets, 10)
        store = open_store(url)
        prices = PriceBook(settings.prices)
        scheduler = Budgets(store, projector_for(store, prices), prices, settings)
        now = datetime.now(UTC)
        other = 0

        def spend() -> None:
            nonlocal other
            other += 1
            event = BudgetSpent(
                tick_id=f"l01-other-{other}",
                level="l01",
                model="bench-model",
                prompt_tokens=900,
                completion_tokens=100,
            )
            store.append(event.stream_id, [event.to_record()])

        for _ in range(200):  # some history
            spend()
        preparer = Preparer(settings, store, env={**os.environ, "OPENAI_BASE_URL": "http://x"})
        payload = preparer.prepare("l00", tick_id="l00-bench").payload
        assert payload.budget is not None and len(payload.budget.budgets) == 10
        started = TickStarted(tick_id="l00-bench", level="l00", pid=os.getpid(), host="bench")
        store.append(tick_stream("l00-bench"), [started.to_record()])
        guard = BudgetGuard(payload, EventRecorder(payload))
        worker_ms: list[float] = []
        for _ in range(samples):
            spend()
            event: Any = SimpleNamespace(cancel=False)
            began = time.perf_counter()
            guard._before_call(event)
            worker_ms.append((time.perf_counter() - began) * 1000)
            assert event.cancel is False
        scheduler_ms: list[float] = []
        for n in range(min(samples, 200)):  # the slots of a wave: no spend in between
            began = time.perf_counter()
            check = scheduler.try_reserve("l00", f"l00-slot-{n}", {}, now)
            scheduler_ms.append((time.perf_counter() - began) * 1000)
            scheduler.settle("l00", f"l00-slot-{n}")
            assert check.allowed
        fold_ms: list[float] = []
        for _ in range(min(samples, 100)):  # a new call booked, then folded for the next wave
            spend()
            began = time.perf_counter()
            scheduler.windows.catch_up()
            fold_ms.append((time.perf_counter() - began) * 1000)
        trip_ms: list[float] = []
        for _ in range(samples):
            began = time.perf_counter()
            store.last_position()
            trip_ms.append((time.perf_counter() - began) * 1000)
        for name, values in (
            ("one store round trip", trip_ms),
            ("worker, per model call", worker_ms),
            ("scheduler, per slot", scheduler_ms),
            ("read model fold, a call", fold_ms),
        ):
            values.sort()
            p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
            print(
                f"   {label:10s} {name:24s} p50 {statistics.median(values):6.3f} ms"
                f"  p99 {p99:6.3f} ms  ({len(values)} samples)"
            )
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--skip-overshoot", action="store_true")
    args = parser.parse_args()
    print(describe())
    if not args.skip_overshoot:
        overshoot(args.calls)
    print("\n2. cost of the checks with 10 budgets in scope")
    with tempfile.TemporaryDirectory() as name:
        check_cost(f"sqlite:///{name}/events.db", args.samples, "SQLite")
    dsn = make_url(args.pg_admin).set(drivername="postgresql")
    admin = dsn.render_as_string(hide_password=False)
    name = f"budget_bench_{os.getpid()}"
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        print(f"   PostgreSQL skipped: {exc}")
        return
    try:
        url = make_url(args.pg_admin).set(drivername="postgresql+psycopg", database=name)
        check_cost(url.render_as_string(hide_password=False), args.samples, "PostgreSQL")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
