"""`tickwork worker`: runs tick jobs of the procrastinate executor, on any host.

Beside procrastinate's worker (which takes jobs, within `--concurrency`, and keeps its
heartbeat), two threads: one follows the control stream, so a cancel or pause stops a
tick running here whichever host asked; one ends the ticks of workers whose heartbeat
stopped (`WorkerExecutor.sweep_stalled`). SIGTERM stops taking jobs and gives running
ticks `shutdown_grace_seconds`; a second one cancels them at once.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.app import app, fail, router_or_exit, settings, store_for, upstream_for_ticks
from harness.cli.run_command import report

if TYPE_CHECKING:
    from procrastinate import App, JobContext

    from harness.config import Settings
    from harness.execution.executors.procrastinate import WorkerExecutor
    from harness.store import EventStore

CONTROL_SECONDS = 1.0
"""How often a worker looks at the control stream for cancels and pauses."""
ANNOUNCE_SECONDS = 0.1
"""How often a starting worker looks whether procrastinate registered it yet: its host and
concurrency reach `tickwork status` a moment after it starts, not a sweep interval later."""


def conninfo(url: str) -> str:
    """The store's SQLAlchemy URL as a libpq connection string for procrastinate."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@app.command("worker")
def worker(
    concurrency: Annotated[
        int, typer.Option(min=1, help="Ticks this worker runs at once (its share of the cap).")
    ] = 4,
    queues: Annotated[
        list[str] | None, typer.Option("--queues", help="Queues to take jobs from.")
    ] = None,
) -> None:
    """Run tick jobs of the procrastinate executor until SIGTERM (any number, any host)."""
    import asyncio  # its event loop and TLS: 0.05 s that `status` and `--help` need not pay

    from harness.execution.executors.procrastinate import (
        WorkerExecutor,
        WorkerRunner,
        places_needed,
    )
    from harness.execution.prepare import Preparer
    from harness.store import Heartbeat

    config = settings(needed=True)
    if config.executor.kind != "procrastinate":
        raise fail('tickwork worker needs [executor] kind = "procrastinate" (a PostgreSQL store)')
    wide = [
        f"levels.{name} needs {places_needed(level)}"
        for name, level in config.levels.items()
        if places_needed(level) > concurrency
    ]
    if wide:
        raise fail(
            f"--concurrency {concurrency} is too few places for a tick of {', '.join(wide)} "
            "(each panel member and each hedge twin takes one)"
        )
    router = router_or_exit(config, report)
    store = store_for(config)
    try:
        with upstream_for_ticks() as upstream:
            env = upstream.env
            preparer = Preparer(config, store, env=env, router=router)
            runner = WorkerRunner(config, store, env=env)
            executor = WorkerExecutor(config, store, preparer, runner, report)
            executor.seat(concurrency)
            jobs = _app(config, executor)
            stopped = threading.Event()
            beating = threading.Thread(
                target=Heartbeat(store, "worker").run,
                args=(stopped, lambda exc: report(f"heartbeat not recorded: {exc}")),
                name="heartbeat",
                daemon=True,
            )
            beating.start()
            try:
                asyncio.run(_work(config, store, jobs, executor, concurrency, queues))
            finally:
                stopped.set()
                beating.join()
    finally:
        store.close()


def _app(config: Settings, executor: WorkerExecutor) -> App:
    """A procrastinate app whose one task runs a tick through the worker's executor."""
    from procrastinate import App, PsycopgConnector

    from harness.execution.executors.procrastinate import TASK

    jobs = App(connector=PsycopgConnector(conninfo=conninfo(config.store.url)))

    @jobs.task(name=TASK, pass_context=True)
    def run_tick(context: JobContext, tick_id: str, level: str, slot: str | None = None) -> None:
        job = context.job
        assert job.id is not None
        done = threading.Event()
        threading.Thread(target=_abort_watch, args=(context, executor, tick_id, done)).start()
        try:
            executor.run_job(job.id, job.worker_id, tick_id, level, slot)
        finally:
            done.set()

    return jobs


def _abort_watch(
    context: JobContext, executor: WorkerExecutor, tick_id: str, done: threading.Event
) -> None:
    """A job aborted in procrastinate (a scheduler's cancel, or by hand) stops its tick."""
    while not done.wait(CONTROL_SECONDS):
        if context.should_abort():
            executor.runner.cancel(tick_id, "aborted through procrastinate")
            return


async def _work(
    config: Settings,
    store: EventStore,
    jobs: App,
    executor: WorkerExecutor,
    concurrency: int,
    queues: list[str] | None,
) -> None:
    import asyncio

    from procrastinate.worker import Worker

    stalled = config.executor.stalled_seconds
    stopping = threading.Event()
    taking = queues or [config.executor.queue]
    async with jobs.open_async():
        taker = Worker(
            jobs,
            queues=taking,
            name=f"{socket.gethostname()}:{os.getpid()}",
            concurrency=concurrency,
            install_signal_handlers=False,
            update_heartbeat_interval=max(stalled / 3, 0.5),
            stalled_worker_timeout=stalled,
            fetch_job_polling_interval=1.0,
        )

        def announce() -> bool:
            if taker.worker_id is not None:
                executor.announce(taker.worker_id, concurrency, taking)
            return executor.announced

        helpers = [
            _every(ANNOUNCE_SECONDS, stopping, announce),
            _every(CONTROL_SECONDS, stopping, _follower(store, executor, config)),
            _every(max(stalled / 3, 0.5), stopping, executor.sweep_stalled),
        ]
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _stopper(config, taker.stop, executor))
        report(
            f"tickwork worker on {socket.gethostname()} (pid {os.getpid()}): "
            f"concurrency {concurrency}, queues {', '.join(taking)}"
        )
        try:
            await taker.run()  # type: ignore[no-untyped-call]
        finally:
            stopping.set()
            for helper in helpers:
                helper.join()
    report("tickwork worker stopped")


def _follower(store: EventStore, executor: WorkerExecutor, config: Settings) -> Callable[[], None]:
    from harness.scheduling.control import ControlFollower

    follower = ControlFollower(store, executor, config.levels)

    def follow() -> None:
        follower.poll()

    return follow


def _every(
    seconds: float, stopping: threading.Event, work: Callable[[], bool | None]
) -> threading.Thread:
    """Run `work` every `seconds` until `stopping`, or until it returns True (its job done).

    A store error waits a turn.
    """
    from harness.store import StoreError

    def loop() -> None:
        while not stopping.wait(seconds):
            try:
                if work():
                    return
            except StoreError as exc:
                report(f"store unreachable, trying again: {exc}")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _stopper(
    config: Settings, stop: Callable[[], None], executor: WorkerExecutor
) -> Callable[[], None]:
    """The first signal stops taking jobs and gives running ticks the grace; a second ends them."""
    grace = config.runner.shutdown_grace_seconds
    stopping = threading.Event()

    def on_signal() -> None:
        if stopping.is_set():
            report("second interrupt: cancelling the running ticks now")
            threading.Thread(target=executor.shutdown, args=(0.0,), daemon=True).start()
            return
        stopping.set()
        report(f"stopping: running ticks get {grace:.0f} s to finish")
        stop()
        threading.Thread(target=executor.shutdown, args=(grace,), daemon=True).start()

    return on_signal
