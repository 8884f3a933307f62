"""The worker's side: `tickwork worker` runs the ticks of the jobs it takes."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime

from pydantic import ValidationError

from harness.config import LevelConfig
from harness.contracts import (
    TERMINAL_TYPES,
    TickEvent,
    TickLost,
    TickStarted,
    TickTaken,
    WorkerStarted,
    tick_stream,
)
from harness.execution.adopt import started_ref
from harness.execution.executors.procrastinate.base import OnStore
from harness.execution.executors.procrastinate.jobs import stalled_ticks
from harness.execution.executors.procrastinate.spacing import SharedSpacing
from harness.execution.hedge import TWIN_SUFFIX
from harness.execution.launchers import TickProcess
from harness.execution.panels import REPLACEMENT
from harness.execution.prepare import TickRef
from harness.execution.queue import Gate
from harness.execution.runner import Runner
from harness.scheduling import RunningTick, SlotClaim, recorded_levels
from harness.store import (
    ANY,
    ConcurrencyError,
    EventStore,
    StoredEvent,
    StoreError,
    fail_job,
    retry_job,
)

TAKEN = {TickTaken.type, TickStarted.type}
KILLED_GONE_SECONDS = 5.0
"""How long a sweeper waits for a stalled tick's SIGKILLed group to be gone before it books
the call the tick may have had in flight (a SIGKILLed process is gone in milliseconds)."""
KILLED_POLL_SECONDS = 0.01
DEFAULT_CONCURRENCY = 4
"""`tickwork worker --concurrency`'s default: the places a worker has until it is seated."""


def end_once(store: EventStore, end: TickEvent) -> bool:
    """Append a tick's terminal event unless it has one; False if it had.

    Appended at the version read, again after a concurrent append (the tick's own spend
    events), so of a worker and a sweeper ending one tick only the first end lands.
    """
    stream = tick_stream(end.tick_id)
    events = store.read_stream(stream)
    while not any(e.type in TERMINAL_TYPES for e in events):
        try:
            store.append(stream, [end.to_record()], events[-1].stream_position if events else ANY)
        except ConcurrencyError:
            events = store.read_stream(stream)
            continue
        return True
    return False


class WorkerRunner(Runner):
    """A worker's runner: a tick's end lands only if nobody ended it meanwhile.

    A sweeper ends the ticks of a worker whose heartbeat it missed; a worker that was only
    slow (a loaded host) must not add a second terminal event when its tick ends after all.
    """

    def record(self, event: TickEvent) -> None:
        """Tick events as the runner records them; a terminal one once per tick."""
        if event.type not in TERMINAL_TYPES or self.store is None:
            super().record(event)
            return
        try:
            end_once(self.store, event)
        except StoreError:
            super().record(event)  # spooled: the store is out, nobody can end it meanwhile


def places_needed(level: LevelConfig | None) -> int:
    """The tick processes one tick of `level` may run at once.

    Its panel's members (a replacement runs after them), and a hedge twin beside each
    when the level hedges.
    """
    if level is None:
        return 1
    return level.panel * (2 if level.hedge_after_seconds > 0 else 1)


class Reserved:
    """Where a worker's panel members and hedge twins start: in places their job took."""

    def enter(self, level: str, stopped: threading.Event) -> bool:
        """At once, unless the tick was stopped meanwhile."""
        return not stopped.is_set()

    def release(self, level: str) -> None:
        """Nothing: the places go back with the job's."""


class WorkerExecutor(OnStore):
    """`tickwork worker`'s side: runs the ticks of the jobs it takes, here, to their end.

    Its ticks come from jobs (`run_job`), never from a scheduler: nothing is queued here
    to withdraw, and a dead worker's ticks end by `sweep_stalled`, not by adoption.
    """

    def _set_up(self) -> None:
        self.host = socket.gethostname()
        self.announced = False
        """Whether its WorkerStarted is recorded (once procrastinate registered it)."""
        self.closing = threading.Event()
        self._revisions: dict[str, dict[str, LevelConfig] | None] = {}
        """Levels of the revisions ticks were claimed under, read once each."""
        self.seat(DEFAULT_CONCURRENCY)
        self.spacing = SharedSpacing(self.store, self.settings.runner.infra_throttle_seconds)
        if self.settings.runner.infra_throttle_seconds > 0:
            self.runner.on_infrastructure_failure(self._failed_on_infrastructure)

    def seat(self, concurrency: int) -> None:
        """Places for `concurrency` ticks at once: jobs' ticks, panel members, hedge twins.

        procrastinate runs at most `--concurrency` jobs here, and a job's tick may run
        more tick processes than one: its panel's members, a twin for each. A job takes
        every place its tick may need before it starts (`places_needed`), at once, so no
        more tick processes run here than the worker's concurrency, and two jobs never
        hold part of what each needs while waiting for the rest. Its members and twins
        then start in those places (`Reserved`).
        """
        self.places: Gate[None] = Gate(concurrency, {})
        self.runner.places = Reserved()

    def _failed_on_infrastructure(self, spacing: float) -> None:
        try:
            self.spacing.failed(spacing)
        except StoreError as exc:
            self.report(f"the throttle of every worker is not widened (store out): {exc}")

    def announce(self, worker_id: int, concurrency: int, queues: list[str]) -> None:
        """Record the worker's host, pid and concurrency once procrastinate registered it."""
        started = WorkerStarted(
            worker_id=worker_id,
            host=self.host,
            pid=os.getpid(),
            concurrency=concurrency,
            queues=queues,
        )
        self.store.append(started.stream_id, [started.to_record()])
        self.announced = True

    def run_job(
        self, job_id: int, worker_id: int | None, tick_id: str, level: str, slot: str | None
    ) -> None:
        """Take the job's tick and run it to its end; a tick taken or ended already is left."""
        when = datetime.fromisoformat(slot) if slot else None
        if not self.take(job_id, worker_id, tick_id, level):
            return
        revision, config = self.claimed_config(tick_id, level)
        needed = places_needed(config or self.settings.levels.get(level))
        if not self.places.enter(level, self.closing, needed):
            self.runner.cancel_queued(tick_id, level, "worker stopped")
            return
        try:
            if self.spacing.wait_turn(tick_id, self.closing):
                claim = SlotClaim(tick_id, level, when, config=config, config_revision=revision)
                self._execute(claim)
            else:
                self.runner.cancel_queued(tick_id, level, "worker stopped")
        finally:
            self.places.release(level, needed)

    def claimed_config(self, tick_id: str, level: str) -> tuple[str | None, LevelConfig | None]:
        """The levels' revision the tick was claimed under and the level's settings in it.

        The scheduler's settings, not this worker's file: a reload on the scheduler's side
        reaches the next slot on every worker. (None, None) for a tick claimed without a
        revision (by hand, or by an older scheduler): this worker's own settings run it.
        """
        first = self.store.read_stream(tick_stream(tick_id), limit=1)
        revision = first[0].data.get("config_revision") if first else None
        if not revision:
            return None, None
        if revision not in self._revisions:
            try:
                self._revisions[revision] = recorded_levels(self.store, revision)
            except ValidationError as exc:
                self.report(f"levels revision {revision[:12]} does not load here: {exc}")
                self._revisions[revision] = None
        levels = self._revisions[revision]
        if levels is None:
            self.report(f"{tick_id}: levels revision {revision[:12]} not stored: own settings")
        return revision, None if levels is None else levels.get(level)

    def take(self, job_id: int, worker_id: int | None, tick_id: str, level: str) -> bool:
        """Append TickTaken at the version read: False if the tick was taken or ended."""
        events = self.store.read_stream(tick_stream(tick_id))
        if not events or any(e.type in TERMINAL_TYPES or e.type in TAKEN for e in events):
            self.report(f"{tick_id} of job {job_id} taken or ended already: left as it is")
            return False
        taken = TickTaken(
            tick_id=tick_id,
            level=level,
            host=self.host,
            worker_pid=os.getpid(),
            job_id=job_id,
            worker_id=worker_id,
        )
        try:
            self.store.append(tick_stream(tick_id), [taken.to_record()], events[-1].stream_position)
        except ConcurrencyError:
            self.report(f"{tick_id} of job {job_id} was taken by another delivery")
            return False
        return True

    def sweep_stalled(self) -> None:
        """End the ticks of workers whose heartbeat stopped, once, and finish their jobs."""
        for job in stalled_ticks(self.store, self.settings.executor.stalled_seconds):
            if job.job_id is not None:
                self._end_stalled(job.job_id, job.tick_id, job.level)

    def _end_stalled(self, job_id: int, tick_id: str, level: str) -> None:
        events = self.store.read_stream(tick_stream(tick_id))
        if not any(e.type in TAKEN for e in events):
            self._move_on(retry_job, job_id)
            self.report(f"{tick_id}: its worker died before taking it; job {job_id} retried")
            return
        for part, part_events in self._family(tick_id, level, events).items():
            ref = self._kill_here(part_events)
            if ref is not None:
                self.runner.book_cut_off_call(ref)
            lost = TickLost(tick_id=part, level=level, reason="its worker's heartbeat stopped")
            if end_once(self.store, lost):
                self.report(f"{part} lost (its worker's heartbeat stopped)")
        self._move_on(fail_job, job_id)

    def _family(
        self, tick_id: str, level: str, events: list[StoredEvent]
    ) -> dict[str, list[StoredEvent]]:
        """The job's tick and the panel members and hedge twin it ran, by tick id."""
        config = self.settings.levels.get(level)
        size = config.panel if config is not None else 1
        marks = [f"-p{i}" for i in range(1, size + 1)] + ["-p" + REPLACEMENT] if size > 1 else []
        parts = [tick_id + mark for mark in [*marks, TWIN_SUFFIX]]
        streams = self.store.read_streams([tick_stream(part) for part in parts])
        found = {part: streams[tick_stream(part)] for part in parts if streams[tick_stream(part)]}
        return {tick_id: events, **found}

    def _move_on(self, move: Callable[[EventStore, int], None], job_id: int) -> None:
        """Move a stalled job on; another sweeper that moved it first makes this a no-op."""
        try:
            move(self.store, job_id)
        except StoreError as exc:
            self.report(f"job {job_id} left as another sweeper moved it: {exc}")

    def _kill_here(self, events: list[StoredEvent]) -> TickRef | None:
        """Kill the group of the dead worker's tick process if it runs on this host.

        Returns the tick's ref once its group is gone, so the call its process may have
        had in flight can be booked: nothing of it can record any more. A tick started on
        another host is left alone (None): its process may still run and book its calls.
        """
        started = next((e for e in reversed(events) if e.type == TickStarted.type), None)
        if started is None or started.data.get("host") != self.host:
            return None
        group = TickProcess(int(started.data["pid"]))
        for pid in group.survivors():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + KILLED_GONE_SECONDS
        while group.survivors() and time.monotonic() < deadline:
            time.sleep(KILLED_POLL_SECONDS)
        return started_ref(started)

    def running(self) -> list[RunningTick]:
        """The ticks this worker runs now."""
        return list(self.runner.running())

    def _cancel_running(self, tick_id: str, reason: str) -> bool:
        return self.runner.cancel(tick_id, reason)

    def _close(self) -> None:
        self.closing.set()  # a tick waiting out the throttle ends cancelled, never started

    def _drain(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        while self.runner.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        for ref in self.runner.running():
            self.runner.cancel(ref.tick_id, "worker stopped")
        while self.runner.running():
            time.sleep(0.1)

    def wait_idle(self, timeout: float) -> None:
        """Wait until no tick runs here."""
        deadline = time.monotonic() + timeout
        while self.runner.running():
            if time.monotonic() > deadline:
                raise TimeoutError(f"ticks still running after {timeout} s")
            time.sleep(0.1)
