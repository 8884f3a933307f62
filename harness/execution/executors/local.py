"""The local executor: ticks wait in the gate's queue and run in threads of this process.

Queued ticks are plain items in the gate (global and per-level caps, priorities, spaced
starts); one dispatcher thread takes each when it gets a place and runs it in a thread
of its own, so a wave of a thousand ticks costs a thousand list insertions, not a
thousand waiting threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from harness import interruptible
from harness.config import LevelConfig
from harness.execution.adopt import adopt
from harness.execution.executors.base import HandoffExecutor
from harness.execution.prepare import TickRef
from harness.execution.queue import Gate
from harness.scheduling import SlotClaim
from harness.store import StoredEvent

MANUAL_LANE = "(manual)"
"""The gate's lane of ticks started by hand: a name no level can have."""


def lane(claim: SlotClaim) -> str:
    """The queue lane a claim waits in: manual ticks share one lane with its own cap."""
    return MANUAL_LANE if claim.manual else claim.level


class LocalExecutor(HandoffExecutor):
    """Runs claimed ticks in threads of this process, within the gate's caps and priorities."""

    def _set_up(self) -> None:
        settings, runner = self.settings, self.runner
        caps = {name: level.max_concurrent for name, level in settings.levels.items()}
        self.gate: Gate[SlotClaim] = Gate(
            settings.runner.max_concurrent,
            {**caps, MANUAL_LANE: settings.runner.manual_max_concurrent},
            settings.runner.start_spacing_seconds,
        )
        runner.places = self.gate
        throttle_for = settings.runner.infra_throttle_seconds
        if throttle_for > 0:
            runner.on_infrastructure_failure(
                lambda spacing: self.gate.throttle(spacing, throttle_for)
            )
        self.threads: set[threading.Thread] = set()
        """Running ticks and adopted workers being watched."""
        self._threads_lock = threading.Lock()
        self._dispatcher = threading.Thread(target=self._dispatch, name="dispatch", daemon=True)

    def running(self) -> list[TickRef]:
        """The ticks the runner has started and not ended."""
        return self.runner.running()

    def _submit(self, claim: SlotClaim) -> bool:
        with self._threads_lock:
            if self._dispatcher.ident is None:
                self._dispatcher.start()
        config = claim.config or self.settings.levels[claim.level]
        priority = 0 if claim.manual else config.priority
        return self.gate.put(lane(claim), priority, claim)

    def levels_changed(self, levels: Mapping[str, LevelConfig]) -> None:
        """A reload's per-level caps hold from the next start; running ticks keep their place."""
        caps = {name: level.max_concurrent for name, level in levels.items()}
        self.gate.set_caps({**caps, MANUAL_LANE: self.settings.runner.manual_max_concurrent})

    def _withdraw(self, matches: Callable[[SlotClaim], bool]) -> list[SlotClaim]:
        return self.gate.withdraw(matches)

    def _cancel_running(self, tick_id: str, reason: str) -> bool:
        return self.runner.cancel(tick_id, reason)

    def adopt(self, started: StoredEvent, now: datetime) -> None:
        """End, or watch to its deadline in a thread, a tick a killed predecessor started here."""
        adoption = adopt(self.runner, started, now, self.report)
        if adoption is None:
            return
        watcher = threading.Thread(
            target=self.runner.watch,
            args=(adoption.ref, adoption.process, adoption.remaining),
            name=adoption.ref.tick_id,
            daemon=True,
        )
        self._track(watcher)

    def _dispatch(self) -> None:
        """Start each queued tick when the gate gives it a place, until the gate closes."""
        while (taken := self.gate.take()) is not None:
            _, tick = taken
            self._track(threading.Thread(target=self._run, args=(tick,), daemon=True))

    def _track(self, thread: threading.Thread) -> None:
        """Start and track a thread; it is never seen tracked but unstarted."""
        with self._threads_lock:
            self.threads.add(thread)
            thread.start()

    def _run(self, claim: SlotClaim) -> None:
        try:
            self._execute(claim)
        finally:
            self.gate.release(lane(claim))
            with self._threads_lock:
                self.threads.discard(threading.current_thread())

    def wait_idle(self, timeout: float) -> None:
        """Wait until nothing is queued or running (for tests and callers that drive `fire`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._threads_lock:
                pending = [t for t in self.threads if t.is_alive()]
            if not pending and not self.gate.queued() and not self.gate.running():
                return
            for thread in pending:
                interruptible.join(thread, max(0.0, deadline - time.monotonic()))
            time.sleep(0.05)
        raise TimeoutError(f"ticks still queued or running after {timeout} s")

    def _close(self) -> None:
        for claim in self.gate.close():
            self.never_started(claim, None)

    def _drain(self, grace: float) -> None:
        if self._dispatcher.ident is not None:
            # Its last tick, if any, is tracked before it returns.
            interruptible.join(self._dispatcher)
        with self._threads_lock:
            pending = [thread for thread in self.threads if thread.is_alive()]
        if pending:
            self.report(f"stopping: {len(pending)} tick(s) get {grace:.0f} s to finish")
        deadline = time.monotonic() + grace
        for thread in pending:
            interruptible.join(thread, max(0.0, deadline - time.monotonic()))
        for ref in self.runner.running():
            self.runner.cancel(ref.tick_id, "service stopped")
        for thread in pending:
            interruptible.join(thread)
