"""The worker process of `tickwork worker`: takes tick jobs and runs them, on any host.

Beside procrastinate's worker (which takes jobs, within `--concurrency`, and keeps its
heartbeat), two threads: one follows the control stream, so a cancel or pause stops a
tick running here whichever host asked; one ends the ticks of workers whose heartbeat
stopped (`WorkerExecutor.sweep_stalled`). SIGTERM stops taking jobs and gives running
ticks `shutdown_grace_seconds`; a second one cancels them at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping

from procrastinate import App, JobContext, PsycopgConnector
from procrastinate.worker import Worker

from harness.config import Settings
from harness.execution.executors.base import Report
from harness.execution.executors.procrastinate.jobs import TASK
from harness.execution.executors.procrastinate.worker import WorkerExecutor, WorkerRunner
from harness.execution.prepare import Preparer
from harness.routing import Router
from harness.scheduling import ControlFollower
from harness.store import SqlEventStore, StoreError, conninfo

CONTROL_SECONDS = 1.0
"""How often a worker looks at the control stream for cancels and pauses."""
ANNOUNCE_SECONDS = 0.1
"""How often a starting worker looks whether procrastinate registered it yet: its host and
concurrency reach `tickwork status` a moment after it starts, not a sweep interval later."""


class WorkerLoop:
    """One worker process: procrastinate's worker taking jobs, and the threads beside it."""

    def __init__(
        self,
        settings: Settings,
        store: SqlEventStore,
        env: Mapping[str, str],
        router: Router | None,
        report: Report,
        concurrency: int,
        queues: list[str] | None,
    ) -> None:
        self.settings = settings
        self.store = store
        preparer = Preparer(settings, store, env=env, router=router)
        runner = WorkerRunner(settings, store, env=env, router=router)
        self.executor = WorkerExecutor(settings, store, preparer, runner, report)
        self.executor.seat(concurrency)
        self.report = report
        self.concurrency = concurrency
        self.queues = queues or [settings.executor.queue]

    def run(self) -> None:
        """Take and run tick jobs until SIGTERM or SIGINT (a second one cancels the ticks)."""
        asyncio.run(self._work())

    def _app(self) -> App:
        """A procrastinate app whose one task runs a tick through the worker's executor."""
        jobs = App(connector=PsycopgConnector(conninfo=conninfo(self.settings.store.url)))

        @jobs.task(name=TASK, pass_context=True)
        def run_tick(
            context: JobContext, tick_id: str, level: str, slot: str | None = None
        ) -> None:
            job = context.job
            assert job.id is not None
            done = threading.Event()
            threading.Thread(target=self._abort_watch, args=(context, tick_id, done)).start()
            try:
                self.executor.run_job(job.id, job.worker_id, tick_id, level, slot)
            finally:
                done.set()

        return jobs

    def _abort_watch(self, context: JobContext, tick_id: str, done: threading.Event) -> None:
        """A job aborted in procrastinate (a scheduler's cancel, or by hand) stops its tick."""
        while not done.wait(CONTROL_SECONDS):
            if context.should_abort():
                self.executor.runner.cancel(tick_id, "aborted through procrastinate")
                return

    async def _work(self) -> None:
        executor, concurrency = self.executor, self.concurrency
        stalled = self.settings.executor.stalled_seconds
        stopping = threading.Event()
        jobs = self._app()
        async with jobs.open_async():
            taker = Worker(
                jobs,
                queues=self.queues,
                name=f"{socket.gethostname()}:{os.getpid()}",
                concurrency=concurrency,
                install_signal_handlers=False,
                update_heartbeat_interval=max(stalled / 3, 0.5),
                stalled_worker_timeout=stalled,
                fetch_job_polling_interval=1.0,
            )

            def announce() -> bool:
                if taker.worker_id is not None:
                    executor.announce(taker.worker_id, concurrency, self.queues)
                return executor.announced

            follower = ControlFollower(self.store, executor, self.settings.levels)
            helpers = [
                self._every(ANNOUNCE_SECONDS, stopping, announce),
                self._every(CONTROL_SECONDS, stopping, follower.poll),
                self._every(max(stalled / 3, 0.5), stopping, executor.sweep_stalled),
            ]
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._stopper(taker.stop))
            self.report(
                f"tickwork worker on {socket.gethostname()} (pid {os.getpid()}): "
                f"concurrency {concurrency}, queues {', '.join(self.queues)}"
            )
            try:
                await taker.run()  # type: ignore[no-untyped-call]
            finally:
                stopping.set()
                for helper in helpers:
                    helper.join()
        self.report("tickwork worker stopped")

    def _every(
        self, seconds: float, stopping: threading.Event, work: Callable[[], object]
    ) -> threading.Thread:
        """Run `work` every `seconds` until `stopping`, or until it returns True (its job done).

        A store error waits a turn.
        """

        def loop() -> None:
            while not stopping.wait(seconds):
                try:
                    if work() is True:
                        return
                except StoreError as exc:
                    self.report(f"store unreachable, trying again: {exc}")

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread

    def _stopper(self, stop: Callable[[], None]) -> Callable[[], None]:
        """The first signal stops taking jobs, running ticks get the grace; a second ends them."""
        grace = self.settings.runner.shutdown_grace_seconds
        stopping = threading.Event()
        executor, report = self.executor, self.report

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
