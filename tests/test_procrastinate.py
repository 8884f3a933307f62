"""The procrastinate executor against the real PostgreSQL: a scheduler and worker processes.

Each `tickwork worker` is a separate process, as a separate host would run one; ticks are
real ticks against the fake upstream. The ≥300-slot run, the load split and throughput
are `ops/bench/procrastinate_bench.py`'s, to keep the suite short.
"""

from __future__ import annotations

import itertools
import signal
import socket
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import psycopg
import pytest
from procrastinate.schema import SchemaManager

from harness.api import dashboard
from harness.api.reads import Reads
from harness.config import (
    ConfigError,
    ExecutorConfig,
    LevelConfig,
    Settings,
    StoreConfig,
    load_settings,
)
from harness.contracts.events import TERMINAL_TYPES, THROTTLE_STREAM, StartsSpaced
from harness.devtools.fake_llm import Step
from harness.execution.executors.procrastinate import (
    Locks,
    ProcrastinateExecutor,
    WorkerExecutor,
    WorkerRunner,
    defer,
    jobs_in,
)
from harness.execution.launchers.cold import ColdLauncher
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling.reconcile import reconcile
from harness.scheduling.waves import SlotClaim, claim_wave
from harness.store import (
    PROCRASTINATE_MIGRATIONS,
    SqlEventStore,
    StoredEvent,
    StoreUnavailableError,
    apply_procrastinate_schema,
    conninfo,
    migrate_store,
    open_store,
    process_name,
)
from tests import web
from tests.commands import (
    ForkedCommand,
    Output,
    environment,
    fake_server,
    forked_cli,
    write_config,
)
from tests.conftest import fresh_pg_database
from tests.procrastinate_support import EXECUTOR, Ticks, configure, level, processes
from tests.waiting import wait_until

SLOTS = 20


@contextmanager
def on_procrastinate(**levels: LevelConfig) -> Iterator[tuple[SqlEventStore, Settings]]:
    """A migrated store with procrastinate's schema, and the executor's settings on it."""
    with fresh_pg_database() as url:
        migrate_store(url)
        store = open_store(url)
        apply_procrastinate_schema(store)
        executor = ExecutorConfig(kind="procrastinate")
        yield store, Settings(store=StoreConfig(url=url), executor=executor, levels=levels)
        store.close()


def test_the_procrastinate_executor_is_refused_on_sqlite(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[executor]\nkind = "procrastinate"\n')
    with pytest.raises(ConfigError, match="needs a PostgreSQL store"):
        load_settings(config)


def _procrastinate_catalog(url: str) -> dict[str, list[tuple[str, ...]]]:
    """The functions, columns, types and indexes of procrastinate's schema, as stored."""
    queries = {
        "functions": "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p "
        "WHERE proname LIKE 'procrastinate%%'",
        "columns": "SELECT table_name::text, column_name::text, data_type::text, "
        "coalesce(column_default, '') FROM information_schema.columns "
        "WHERE table_name LIKE 'procrastinate%%'",
        "types": "SELECT t.typname::text, e.enumlabel::text FROM pg_enum e "
        "JOIN pg_type t ON t.oid = e.enumtypid WHERE t.typname LIKE 'procrastinate%%'",
        "indexes": "SELECT indexdef FROM pg_indexes WHERE tablename LIKE 'procrastinate%%'",
    }
    store = open_store(url)
    with store.read_transaction() as conn:
        catalog = {
            name: sorted(tuple(row) for row in conn.exec_driver_sql(sql))
            for name, sql in queries.items()
        }
    store.close()
    return catalog


def test_tickwork_migrate_upgrades_an_older_procrastinate_schema(tmp_path: Path) -> None:
    """An older procrastinate schema is brought to the installed version by its migrations.

    One of procrastinate 3.2 (its migrations up to 03.02), and one tickwork set up before
    it marked versions; both then equal a fresh one.
    """
    older = [m for m in PROCRASTINATE_MIGRATIONS if m.stem < "03.03"]
    latest = PROCRASTINATE_MIGRATIONS[-1].stem
    catalogs = []
    with fake_server([]) as fake:
        for name, steps in (("older", older), ("unmarked", None)):
            with fresh_pg_database() as url:
                migrate_store(url)
                store = open_store(url)
                # As procrastinate upgrades: each migration committed before the next uses
                # what it added (an enum value cannot be used in the transaction adding it).
                scripts = (
                    [SchemaManager.get_schema()]
                    if steps is None
                    else [step.read_text() for step in steps]
                )
                for script in scripts:
                    with store.read_transaction() as conn:
                        conn.exec_driver_sql(script.replace("%", "%%"))
                if steps:
                    with store.read_transaction() as conn:
                        conn.exec_driver_sql(
                            "COMMENT ON TABLE procrastinate_jobs "
                            f"IS 'procrastinate schema {steps[-1].stem}'"
                        )
                store.close()
                (tmp_path / name).mkdir()
                config = write_config(tmp_path / name, EXECUTOR.format(stalled=30), store_url=url)
                migrated = forked_cli("migrate", config, fake)
                assert migrated.returncode == 0, migrated.stderr
                was = older[-1].stem if steps else f"already at {latest}"
                expected = f"{was} -> {latest}" if steps else was
                assert f"procrastinate's schema {expected}" in migrated.stdout, migrated.stdout
                again = forked_cli("migrate", config, fake)
                assert f"schema already at {latest}" in again.stdout, again.stdout
                catalogs.append(_procrastinate_catalog(url))
        with fresh_pg_database() as url:
            migrate_store(url)
            apply_procrastinate_schema(open_store(url))
            fresh = _procrastinate_catalog(url)
    assert catalogs == [fresh, fresh]


def test_a_claim_gets_one_job_however_often_it_is_deferred_and_one_take(tmp_path: Path) -> None:
    """The claim is the outbox: deferring is keyed by tick id, taking by stream version."""
    with fresh_pg_database() as url:
        migrate_store(url)
        store = open_store(url)
        assert apply_procrastinate_schema(store) == (None, PROCRASTINATE_MIGRATIONS[-1].stem)
        settings = Settings(
            store=StoreConfig(url=url),
            executor=ExecutorConfig(kind="procrastinate"),
            levels={"capped": LevelConfig(every="1m", model="m", max_concurrent=2, priority=1)},
        )
        at = datetime(2026, 1, 1, tzinfo=UTC)
        claims = [SlotClaim(f"capped-{i}", "capped", at + timedelta(minutes=i)) for i in range(3)]
        assert claim_wave(store, settings, claims) == {c.tick_id for c in claims}
        locks = Locks(settings)
        assert defer(store, settings, locks, claims[:2]) == ["capped-0", "capped-1"]
        assert defer(store, settings, locks, claims[:2]) == [], "a retried defer"
        assert defer(store, settings, locks, claims[:1]) == []
        assert locks.next("capped") == "tickwork:capped:0", "a tick with its job took a turn"
        scheduler = ProcrastinateExecutor(settings, store, None, None, print)  # type: ignore[arg-type]
        assert scheduler.abandoned("capped-2", "capped"), "a claim whose scheduler died"
        assert scheduler.abandoned("capped-2", "capped") is None
        queued = jobs_in(store, ["todo"])
        assert [job.tick_id for job in queued] == ["capped-0", "capped-1", "capped-2"]
        with store.read_transaction() as conn:
            rows = conn.exec_driver_sql("SELECT lock, priority FROM procrastinate_jobs ORDER BY id")
            assert [tuple(row) for row in rows] == [
                ("tickwork:capped:0", -1),
                ("tickwork:capped:1", -1),
                ("tickwork:capped:0", -1),
            ]
        runner = WorkerRunner(settings, store, ColdLauncher())
        worker = WorkerExecutor(settings, store, None, runner, lambda line: None)  # type: ignore[arg-type]
        job = queued[0].job_id
        assert job is not None
        assert worker.take(job, None, "capped-0", "capped")
        assert not worker.take(job, None, "capped-0", "capped"), "a redelivery took it again"
        store.close()


def test_a_claim_a_dead_scheduler_of_another_host_left_unqueued_is_deferred_here() -> None:
    """Any live scheduler defers it; a claim of another host's live scheduler stays its own."""
    with on_procrastinate(slow=LevelConfig(every="1h", model="m")) as (store, settings):
        claims = {
            f"slow-{pid}": SlotClaim(f"slow-{pid}", "slow", None)
            .scheduled("m")
            .model_copy(update={"host": "elsewhere", "scheduler_pid": pid})
            for pid in (4242, 4243)
        }
        store.create_streams({f"tick-{t}": [claim.to_record()] for t, claim in claims.items()})
        reports: list[str] = []
        scheduler = ProcrastinateExecutor(settings, store, None, None, reports.append)  # type: ignore[arg-type]
        # 4242 lives (a connection of its own, just used); 4243 died before deferring.
        with psycopg.connect(
            conninfo(settings.store.url), application_name=process_name("elsewhere", 4242)
        ):
            reconcile(store, scheduler, projector_for(store, PriceBook()), reports.append)
        assert [job.tick_id for job in jobs_in(store, ["todo"])] == ["slow-4243"], reports
        assert reports == ["slow-4243 deferred (its scheduler died before it could)"]


def test_a_connection_lost_under_a_jobs_query_is_the_stores_error() -> None:
    """An outage under procrastinate's SQL is the store's error, and defers nothing.

    Its queries run on psycopg's connection in a store transaction (`driver_transaction`):
    a lost connection is StoreUnavailableError there as everywhere, and the next query
    gets a connection that works.
    """
    with on_procrastinate(min=LevelConfig(every="1m", model="m")) as (store, settings):
        with store.driver_transaction() as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        with psycopg.connect(conninfo(settings.store.url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        claim = SlotClaim("min-1", "min", None)
        with pytest.raises(StoreUnavailableError):
            defer(store, settings, Locks(settings), [claim])
        assert jobs_in(store, ["todo"]) == []
        assert defer(store, settings, Locks(settings), [claim]) == ["min-1"]


def test_three_workers_run_every_claimed_slot_once_within_the_level_cap(tmp_path: Path) -> None:
    """Capped jobs queue together at the start, where they would overlap without the cap.

    A service fires the slots of its last few seconds at once: more jobs than two workers
    hold, so each of the three, up before the service, takes some. Later capped slots come
    no faster than a tick runs on a quiet machine, so their backlog hardly outlasts the
    stop; two free levels bring the slot count up fast.
    """
    with fresh_pg_database() as url, fake_server([]) as fake:
        levels = level("capped", "2s", cap=1) + level("free", "1s") + level("more", "1s")
        config = configure(tmp_path, url, levels, fake)
        store = open_store(url)
        with processes(config, fake, workers=3, workers_first=True) as (service, _):
            assert service is not None
            reads = Reads(load_settings(config), store)
            announced = wait_until(
                lambda: [w for w in reads.workers() if w.host] if len(reads.workers()) == 3 else [],
                "three workers announced",
                120,
            )
            assert {(w.host, w.concurrency) for w in announced} == {(socket.gethostname(), 2)}
            assert "Workers" in dashboard.panels(reads)
            shown = forked_cli("status", config, fake)
            assert "last heartbeat" in shown.stdout, shown.stdout + shown.stderr
            wait_until(
                lambda: len(Ticks.read(store).streams) >= SLOTS,
                f"{SLOTS} slots claimed",
                120,
                interval=0.5,
            )
            service.stop()
            wait_until(
                lambda: Ticks.read(store).ended(), "every claimed tick ended", 240, interval=0.5
            )
        ticks = Ticks.read(store)
        assert len(ticks.streams) >= SLOTS
        # A scheduler starved of CPU for longer than a period rightly records the slots it
        # fell behind on as missed: those are no jobs, and every other tick ran to its end.
        missed = {
            tick
            for tick, skipped in ticks.of("TickSkipped").items()
            if [e.data["reason"] for e in skipped] == ["missed"]
        }
        for tick, kinds in ticks.terminals().items():
            assert kinds == (["TickSkipped"] if tick in missed else ["TickCompleted"]), (
                tick,
                kinds,
            )
            assert not (tick in missed and ticks.of("TickTaken")[tick]), tick
        for tick, taken in ticks.of("TickTaken").items():
            assert len(taken) == (0 if tick in missed else 1), (tick, taken)
        for tick, scheduled in ticks.of("TickScheduled").items():
            assert len(scheduled) == 1, (tick, scheduled)
        takers = Counter(e.data["worker_pid"] for t in ticks.of("TickTaken").values() for e in t)
        assert len(takers) == 3, f"not every worker took ticks: {takers}"
        spans = sorted(
            (ticks.of("TickTaken")[tick][0].recorded_at, events[-1].recorded_at)
            for tick, events in ticks.streams.items()
            if tick.startswith("capped-") and tick not in missed
        )
        assert len(spans) >= 2, spans
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, "two ticks of the capped level ran at once"
        store.close()


def test_a_worker_uses_the_schedulers_fake_and_the_scheduler_tells_the_ticks_it_ran(
    tmp_path: Path,
) -> None:
    """One script reaches a worker's tick, and the scheduler's log tells that tick's end.

    Without OPENAI_BASE_URL, the script is posted to the fake the scheduler's banner
    names; the scheduler's line of the tick is the worker's own.
    """
    with fresh_pg_database() as url, fake_server([]) as fake:
        config = configure(tmp_path, url, level("min", "2s"), fake)
        env = environment(TICKWORK_CONFIG=str(config))
        env.pop("OPENAI_BASE_URL", None)
        piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        service = Output(ForkedCommand(tmp_path, ["run"], env, **piped))
        try:
            shared = service.wait_for("  upstream  openai-chat: tickwork's fake at ")
            shared = shared.split(" at ")[1].split()[0]
            script = {"key": "default", "steps": [{"text": "One script for every host."}]}
            web.post(f"{shared.removesuffix('/v1')}/_script", json=script).raise_for_status()
            worker = Output(ForkedCommand(tmp_path, ["worker", "--concurrency", "1"], env, **piped))
            try:
                told = worker.wait_for("no OPENAI_BASE_URL set")
                assert f"the running service's fake at {shared}" in told, told
                ran = worker.wait_for('"One script for every host."')
            finally:
                worker.stop()
            tick_id = ran.split()[1]
            line = service.wait_for(f"{tick_id} completed: ")
            assert line.split(maxsplit=1)[1] == ran.split(maxsplit=1)[1], (line, ran)
        finally:
            service.stop()


@pytest.mark.long
def test_a_killed_workers_tick_ends_once_and_cancel_and_pause_reach_another_worker(
    tmp_path: Path,
) -> None:
    with fresh_pg_database() as url, fake_server([Step(text="late", delay=120)] * 10) as fake:
        config = configure(
            tmp_path,
            url,
            level("slow", "1s", timeout=120, extra='on_pause = "stop"'),
            fake,
            stalled=5,
        )
        store = open_store(url)
        with processes(config, fake, workers=2, concurrency=1) as (service, pool):
            assert service is not None
            victim, survivor = (worker.process.pid for worker in pool)
            started = wait_until(
                lambda: _started_by_each(store, [victim, survivor]),
                "a tick started on each worker",
                120,
            )
            service.stop()
            lost_tick, kept_tick = started[victim], started[survivor]
            lost_pid = Ticks.read(store).of("TickStarted")[lost_tick][0].data["pid"]
            wait_until(
                lambda: lost_tick in fake.state.first_request, "the tick's call to be sent", 60
            )
            pool[0].process.send_signal(signal.SIGKILL)
            pool[0].process.wait(30)
            # The cancel and the pause reach the survivor while its sweeper waits out the
            # dead worker's heartbeat.
            cancelled = forked_cli(f"cancel {kept_tick}", config, fake)
            assert cancelled.returncode == 0, cancelled.stderr
            wait_until(
                lambda: Ticks.read(store).terminals()[kept_tick], "the cancelled tick's end", 60
            )
            paused_tick = wait_until(
                lambda: _started_by_each(store, [survivor]), "the survivor's next tick", 60
            )[survivor]
            assert forked_cli("pause slow", config, fake).returncode == 0
            wait_until(
                lambda: Ticks.read(store).terminals()[lost_tick], "the dead worker's tick", 60
            )
            wait_until(
                lambda: not _runs(lost_pid), "the dead worker's tick process to be killed", 30
            )
            wait_until(lambda: Ticks.read(store).ended(), "every tick ended", 120)
        ticks = Ticks.read(store)
        terminals = ticks.terminals()
        assert terminals[lost_tick] == ["TickLost"]
        (begun,) = ticks.of("ModelCallStarted")[lost_tick]
        booked = [e.data for e in ticks.of("BudgetSpent")[lost_tick]]
        assert [(b["estimated"], b["source"], b["prompt_tokens"]) for b in booked] == [
            (True, "runner", begun.data["estimated_input_tokens"])
        ], "the call the sweeper's kill cut off is booked"
        assert terminals[kept_tick] == ["TickCancelled"]
        assert terminals[paused_tick] == ["TickCancelled"]
        assert ticks.of("TickCancelled")[paused_tick][0].data["reason"] == "paused"
        for tick, kinds in terminals.items():
            assert len(kinds) == 1, (tick, kinds)
        store.close()


def _runs(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _started_by_each(store: SqlEventStore, workers: list[int]) -> dict[int, str] | None:
    """Worker pid -> a tick it runs, once each of the `workers` (pids) runs one."""
    ticks = Ticks.read(store)
    by_worker: dict[int, str] = {}
    for tick, started in ticks.of("TickStarted").items():
        if started and not ticks.terminals()[tick]:
            by_worker.setdefault(started[0].data["runner_pid"], tick)
    return by_worker if all(pid in by_worker for pid in workers) else None


@pytest.mark.long
def test_the_infrastructure_throttle_spaces_the_starts_of_every_worker(tmp_path: Path) -> None:
    """A failure on one worker spaces the starts on all of them by its backoff, for a while.

    The backoff (2 s) is twice the level's period: the slots alone would start ticks a
    second apart, so a spacing of 2 s is the throttle's doing.
    """
    runner = "retry_backoff_seconds = 2\nretry_backoff_max_seconds = 2\ninfra_throttle_seconds = 30"
    steps = [Step(status=500)] + [Step(text="done")] * 100
    with fresh_pg_database() as url, fake_server(steps) as fake:
        config = configure(tmp_path, url, level("busy", "1s"), fake, runner=runner)
        store = open_store(url)

        def throttled() -> tuple[list[StoredEvent], dict[str, int]]:
            spaced = store.read_stream(THROTTLE_STREAM)
            takers = {
                tick: taken[0].data["worker_pid"]
                for tick, taken in Ticks.read(store).of("TickTaken").items()
                if taken
            }
            return spaced, takers

        def both_workers_throttled() -> bool:
            spaced, takers = throttled()
            starts = [e.data["tick_id"] for e in spaced if e.data["tick_id"]]
            return len(starts) >= 4 and len({takers[tick] for tick in starts}) == 2

        with processes(config, fake, workers=2, concurrency=1) as (service, _):
            assert service is not None
            wait_until(both_workers_throttled, "throttled starts on both workers", 120)
            service.stop()
        spaced, _ = throttled()
        failures = [
            e
            for e in store.read_all(0, 100_000, ["TickAttemptFailed"])
            if e.data["failure_class"] == "infrastructure"
        ]
        store.close()
    assert failures and failures[0].data["retry_in_seconds"] == 2, failures
    assert spaced[0].data["tick_id"] is None, "the failure opened the throttle"
    states = [StartsSpaced.model_validate(e.data) for e in spaced]
    assert {s.spacing_seconds for s in states} == {2}
    for before, after in itertools.pairwise(states):
        if after.last_start < before.until:
            assert after.last_start - before.last_start >= timedelta(seconds=2), (before, after)


@pytest.mark.long
def test_panel_members_and_hedge_twins_take_places_under_a_workers_concurrency(
    tmp_path: Path,
) -> None:
    """A worker of concurrency 2 runs a panel of two and a hedged tick, one job at a time.

    Each job takes every place its tick may need before it starts (two members; an
    original and its twin), so no more than two tick processes ever run at once here.
    """
    levels = level("duo", "3s", timeout=30, extra="panel = 2") + level(
        "hedged", "3s", timeout=10, extra="hedge_after_seconds = 1"
    )
    with fresh_pg_database() as url, fake_server([Step(text="done", delay=6)] * 200) as fake:
        config = configure(tmp_path, url, levels, fake)
        store = open_store(url)

        def decided() -> bool:
            found = store.read_all(0, 100_000, ["PanelDecided", "HedgeDecided"])
            return {e.type for e in found} == {"PanelDecided", "HedgeDecided"}

        with processes(config, fake, workers=1, concurrency=2) as (service, _):
            assert service is not None
            wait_until(decided, "a panel and a hedge decided on the worker", 240, interval=0.5)
            service.stop()
        ticks = Ticks.read(store)
        store.close()
    [panel] = [e for events in ticks.of("PanelDecided").values() for e in events][:1]
    assert [m["status"] for m in panel.data["members"]] == ["completed", "completed"]
    assert any(ticks.of("HedgeStarted").values()), "a twin started beside its original"
    changes = []
    for tick, events in ticks.streams.items():
        started = [e.recorded_at for e in events if e.type == "TickStarted"]
        ended = [e.recorded_at for e in events if e.type in TERMINAL_TYPES]
        if started:
            assert ended, f"{tick} never ended"
            changes += [(started[0], 1), (ended[0], -1)]
    running = list(itertools.accumulate(delta for _, delta in sorted(changes)))
    assert max(running) == 2, "never more tick processes at once than the worker's places"


def test_a_dead_workers_panel_members_end_with_its_job_and_are_no_jobs_of_their_own() -> None:
    with on_procrastinate(duo=LevelConfig(every="1m", model="m", panel=2)) as (store, settings):
        claim = SlotClaim("duo-1", "duo", datetime(2026, 1, 1, tzinfo=UTC))
        assert claim_wave(store, settings, [claim]) == {"duo-1"}
        assert defer(store, settings, Locks(settings), [claim]) == ["duo-1"]
        [job] = jobs_in(store, ["todo"])
        assert job.job_id is not None
        reports: list[str] = []
        worker = WorkerExecutor(
            settings, store, None, WorkerRunner(settings, store, ColdLauncher()), reports.append
        )  # type: ignore[arg-type]
        assert worker.take(job.job_id, None, "duo-1", "duo")
        # Its members as the dead worker left them: one started, one waiting for its place.
        members = {
            f"duo-1-p{i}": SlotClaim(f"duo-1-p{i}", "duo", claim.slot)
            .scheduled("m")
            .model_copy(update={"host": "elsewhere", "scheduler_pid": 4242})
            for i in (1, 2)
        }
        store.create_streams({f"tick-{t}": [c.to_record()] for t, c in members.items()})
        scheduler = ProcrastinateExecutor(settings, store, None, None, reports.append)  # type: ignore[arg-type]
        assert scheduler.abandoned("duo-1-p2", "duo") is None, "a member is no job of its own"
        assert [j.tick_id for j in jobs_in(store, ["todo"])] == ["duo-1"]
        with store.read_transaction() as conn:
            dead = conn.exec_driver_sql(
                "INSERT INTO procrastinate_workers (last_heartbeat) "
                "VALUES (now() - interval '1 hour') RETURNING id"
            ).scalar()
            conn.exec_driver_sql(
                "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %(worker)s "
                "WHERE id = %(job)s",
                {"worker": dead, "job": job.job_id},
            )
        worker.sweep_stalled()
        ends = {
            tick: [e.type for e in store.read_stream(f"tick-{tick}") if e.type in TERMINAL_TYPES]
            for tick in ("duo-1", *members)
        }
        assert ends == {tick: ["TickLost"] for tick in ends}, (ends, reports)
