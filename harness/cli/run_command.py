"""`tickwork run`: the scheduler service in the foreground, wired to its executor."""

from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import UTC, datetime
from functools import cache, partial
from typing import TYPE_CHECKING

import typer

from harness import __version__
from harness.cli.app import (
    app,
    router_or_exit,
    settings,
    state,
    store_for,
    upstream_for_ticks,
)
from harness.cli.thread_crashes import ThreadCrashes

if TYPE_CHECKING:
    from rich.console import Console

    from harness.config import Settings
    from harness.contracts import Api
    from harness.devtools import TickUpstream
    from harness.execution import HandoffExecutor, Preparer
    from harness.routing import Router
    from harness.scheduling import LevelsReload, Service
    from harness.store import EventStore, Heartbeat, StoreError


@app.command("run")
def run_service() -> None:
    """Run the scheduler in the foreground: every level on its schedule (SIGTERM stops it).

    SIGHUP (or an edit of the file) reloads tickwork.toml's levels and the routing
    catalog; an invalid file is reported and what is in force stays.
    """
    from harness.cli.answered import command_answers
    from harness.config import config_path
    from harness.contracts import APIS
    from harness.digests import DigestScheduler, Publisher
    from harness.execution import Preparer
    from harness.prices import PriceBook
    from harness.projections import projector_for
    from harness.scheduling import (
        Alerter,
        Archiver,
        Budgets,
        BudgetWatch,
        Compactor,
        Companion,
        LevelsReload,
        Service,
    )
    from harness.store import Heartbeat, run_connections

    config = settings(needed=True)
    path = config_path(state.config)
    assert path is not None  # `needed`: there is a file
    router = router_or_exit(config, report)
    crashes = ThreadCrashes(report)
    crashes.install()
    store = store_for(config, run_connections(config))
    try:
        with upstream_for_ticks() as upstream:
            env = upstream.env
            wires: dict[str, str] = {api: upstream.describe(api) for api in APIS}
            heartbeat = Heartbeat(store, "scheduler", upstream.fake, wires)
            _banner(config, store, upstream, heartbeat)
            preparer = Preparer(config, store, env=env, router=router)
            executor = executor_for(config, store, preparer, env)
            companions: list[Companion] = []
            if config.digests:
                # A projector of its own: the digest thread folds while the service fires.
                prices = PriceBook(config.prices)
                publisher = Publisher(config, store, projector_for(store, prices), prices, report)
                companions.append(DigestScheduler(config, publisher, report).run)
            companions.append(Alerter(config, store).run)
            budgets = Budgets(
                store,
                projector_for(store, PriceBook(config.prices)),
                PriceBook(config.prices),
                config,
                router=router,
            )
            companions.append(BudgetWatch(config, store, budgets).run)
            companions.append(Archiver(config, store, report).run)
            companions.append(Compactor(store, report).run)
            companions.append(partial(heartbeat.run, failed=_beat_failed))
            companions.append(command_answers(config, path, store, report))
            service = Service(config, store, executor, report, router, companions, budgets)
            levels = service.reload = LevelsReload(service, path, report, [executor.levels_changed])
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, partial(_stop, service, executor))
            signal.signal(signal.SIGHUP, partial(_reload, levels, router))
            levels.watch(service.stopping)
            if router is not None:
                router.source.watch(service.stopping)
            service.serve()
            executor.runner.launcher.close()  # a fork server still warming up is not waited for
    finally:
        store.close()
    if service.crashed or crashes.happened.is_set():
        raise typer.Exit(1)


def _banner(
    config: Settings, store: EventStore, upstream: TickUpstream, heartbeat: Heartbeat
) -> None:
    """What runs where, said once at start: a new operator's first question.

    The first beat is recorded before the banner, so a `tickwork tick` started from it
    already finds this service's fake upstream; the other live schedulers, read before
    it, are the replicas this one joins.
    """
    from harness.store import StoreError, beats, safe_url

    now = datetime.now(UTC)
    try:
        others = [b for b in beats(store) if b.role == "scheduler" and b.live(now)]
        heartbeat.beat()
    except StoreError as exc:
        others = []
        report(f"heartbeat not recorded yet: {exc}")
    api = config.api
    report(f"tickwork {__version__}, pid {heartbeat.pid} on {heartbeat.host}")
    report(f"  store     {safe_url(config.store.url)}")
    report(f"  results   {config.paths.results.resolve()}")
    in_use: set[Api] = {level.api for level in config.levels.values()} or {"openai-chat"}
    for wire in sorted(in_use):
        report(f"  upstream  {wire}: {upstream.describe(wire)}")
    report(f"  dashboard `tickwork serve` in another shell, then http://{api.host}:{api.port}/")
    report("  follow    `tickwork ticks` lists ticks, `tickwork show TICK --follow` follows one")
    report("  log       this output, one line per tick (redirect it to keep it)")
    for other in others:
        report(
            f"joining as a replica: scheduler pid {other.pid} on {other.host} runs on this "
            f"store since {other.started_at:%Y-%m-%d %H:%M:%S} UTC; each slot still runs once"
        )


def _beat_failed(exc: StoreError) -> None:
    report(f"heartbeat not recorded: {exc}")


def executor_for(
    config: Settings, store: EventStore, preparer: Preparer, env: dict[str, str]
) -> HandoffExecutor:
    """The executor `[executor] kind` names: threads here, or procrastinate jobs.

    With procrastinate, workers launch the ticks and this runner only records ends, so it
    gets the cold launcher, which starts nothing until asked: the warm one would spawn a
    fork server at once, seconds of CPU spent on imports for nothing, and a server still
    warming up keeps the stopped service's output open until it is done.
    """
    from harness.execution import Runner

    if config.executor.kind == "procrastinate":
        from harness.execution import ColdLauncher, ProcrastinateExecutor

        runner = Runner(config, store, launcher=ColdLauncher(), env=env, router=preparer.router)
        return ProcrastinateExecutor(config, store, preparer, runner, report)
    from harness.execution import LocalExecutor

    runner = Runner(config, store, env=env, router=preparer.router)
    return LocalExecutor(config, preparer, runner, report)


def _reload(levels: LevelsReload, router: Router | None, *_: object) -> None:
    """SIGHUP: the levels and the catalog are read again at their next look (flags only)."""
    levels.request()
    if router is not None:
        router.source.request_reload()


def _stop(service: Service, executor: HandoffExecutor, *_: object) -> None:
    """The first SIGINT or SIGTERM stops gracefully; a second one cancels running ticks now."""
    if not service.stopping.is_set():
        service.stopping.set()
        return
    # Not in the handler itself, the line included: the handler may have interrupted this
    # thread inside a lock, or inside a write to stdout (a print here raised "reentrant
    # call inside <_io.BufferedWriter name=1>").
    threading.Thread(target=_cancel_now, args=(executor,)).start()


def _cancel_now(executor: HandoffExecutor) -> None:
    report("second interrupt: cancelling the running ticks now")
    executor.cancel(lambda level, tick_id: True, "service stopped (forced)")


@cache
def _lines() -> Console:
    """The service's report lines: with stdout gone (`| tee` closed), it runs on without them.

    Rich's default raises SystemExit on a broken pipe, which would end whichever thread
    reported (a tick's, leaving it open) or the service itself. Made on the first line:
    the other commands do not pay for Rich's console.
    """
    from rich.console import Console

    class Lines(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            devnull = os.open(os.devnull, os.O_WRONLY)  # the flush at exit must not fail either
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    return Lines(soft_wrap=True)


def report(line: str) -> None:
    """A service line for the foreground log: timestamped, printed as is (no Rich markup)."""
    _lines().print(f"{datetime.now(UTC):%H:%M:%S} {line}", highlight=False, markup=False)
