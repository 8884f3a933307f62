"""The executor contract, as a ladder: where claimed ticks run, and where they wait.

`Executor` is what runs ticks here, a procrastinate worker's included: a tick that got
its place is prepared and run, a tick in scope of a cancel is stopped, and shutting down
starts nothing more and gives running ticks their grace (the abstract `_cancel_running`,
`_close` and `_drain`). `HandoffExecutor` is what a scheduler hands its claims to
(`harness.scheduling.handoff.Handoff`): it queues them (`_submit`), withdraws queued ones
in scope of a cancel (`_withdraw`; a tick that cannot be queued, or is withdrawn, ends
`TickCancelled` without starting) and adopts or ends what a killed predecessor left
(`adopt`). Local threads (`local.py`) and the procrastinate scheduler are both; a
procrastinate worker, whose ticks come from jobs, is only the first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from harness.config import LevelConfig, Settings
from harness.contracts import TERMINAL_TYPES, TickFailed, TickLost, tick_stream
from harness.execution.panels import Panel
from harness.execution.prepare import Preparer, TickSetupError
from harness.execution.runner import Runner, TickOutcome
from harness.prices import PriceBook
from harness.projections import tick_line
from harness.scheduling import Outage, RunningTick, ScopeMatch, SlotClaim
from harness.store import StoredEvent, StoreError, StoreUnavailableError

Report = Callable[[str], None]
PREPARE_RIDE_OUT_SECONDS = 60.0
"""How long a tick that got its place waits for the store to prepare it (no connection
free, the server out), backing off, before it ends failed on infrastructure."""
Ended = Callable[[TickOutcome], None]
"""Told of every tick run here once its terminal event is recorded."""


class Executor(ABC):
    """Runs ticks here: the bookkeeping every executor shares; its `_` methods do the rest."""

    def __init__(
        self,
        settings: Settings,
        preparer: Preparer,
        runner: Runner,
        report: Report,
        ended: Ended | None = None,
    ) -> None:
        self.settings = settings
        self.preparer = preparer
        self.runner = runner
        self.report = report
        self.ended = ended
        self.prices = PriceBook(settings.prices)
        self.outage = Outage(report)
        """Said once when ticks start waiting for the store, and once when it answers."""
        self._set_up()

    @abstractmethod
    def _set_up(self) -> None:
        """The implementation's own state, made once the shared state is set."""

    def never_started(self, claim: SlotClaim, reason: str | None) -> None:
        """End a claimed tick that must not start (cancelled, or the service stops)."""
        reason = reason or "service stopped before the tick could start"
        self.runner.cancel_queued(claim.tick_id, claim.level, reason)
        self.report(f"{claim.tick_id} cancelled before it started: {reason}")

    def cancel(self, matches: ScopeMatch, reason: str, running: bool = True) -> None:
        """Running ticks in scope are stopped and end cancelled.

        `running` False: none (a pause whose level lets running ticks end).
        """
        if not running:
            return
        for ref in self.running():
            if matches(ref.level, ref.tick_id) and self._cancel_running(ref.tick_id, reason):
                self.report(f"{ref.tick_id} cancelling: {reason}")

    def shutdown(self, grace: float) -> None:
        """Start nothing more; give running ticks `grace` seconds, then cancel them."""
        self._close()
        self._drain(grace)

    def _execute(self, claim: SlotClaim) -> None:
        """Run a tick that got its place: its payload is prepared now, not when it was claimed."""
        tick_id, level, manual = claim.tick_id, claim.level, claim.manual
        waiting = Retrying(
            retry=retry_if_exception_type(StoreUnavailableError),
            wait=wait_exponential_jitter(multiplier=0.5, max=5.0, jitter=0.5),
            stop=stop_after_delay(PREPARE_RIDE_OUT_SECONDS),
            before_sleep=self._store_out,
            reraise=True,
        )
        try:
            tick = waiting(
                self.preparer.prepare,
                level,
                prompt=manual.prompt if manual else None,
                timeout=manual.timeout if manual else None,
                tick_id=tick_id,
                slot=claim.slot,
                routed=claim.routed,
                config=claim.config,
            )
            self.outage.over()
        except (TickSetupError, StoreError) as exc:
            reason = f"the tick could not be prepared: {exc}"
            failure = "infrastructure" if isinstance(exc, StoreError) else "internal"
            self.runner.record(
                TickFailed(tick_id=tick_id, level=level, reason=reason, failure_class=failure)
            )
            self.report(f"{tick_id} failed ({reason})")
            return
        forced = manual is not None and manual.forced
        size = tick.config.panel if tick.config else 1
        if size > 1 and manual is None:
            outcome = Panel(self.runner, tick, size, forced).run()
        else:
            outcome = self.runner.run(tick, claimed=True, forced=forced)
        self.report(self._ended_line(outcome))
        if self.ended is not None:
            self.ended(outcome)

    def _store_out(self, state: RetryCallState) -> None:
        """A tick backs off until the store answers (its outage said once)."""
        if state.outcome is not None and isinstance(
            failure := state.outcome.exception(), StoreError
        ):
            self.outage.failed(failure)

    def _ended_line(self, outcome: TickOutcome) -> str:
        """The tick's line for the log, from its stream; from the outcome while the store is out."""
        store = self.runner.store
        try:
            events = [] if store is None else store.read_stream(tick_stream(outcome.tick_id))
        except StoreError:
            events = []
        if events and events[-1].type in TERMINAL_TYPES:
            return tick_line(events, self.prices)
        detail = f" ({outcome.reason})" if outcome.reason else ""
        return f"{outcome.tick_id} {outcome.status}{detail}"

    @abstractmethod
    def running(self) -> Sequence[RunningTick]:
        """Ticks running here right now."""

    @abstractmethod
    def wait_idle(self, timeout: float) -> None:
        """Wait until nothing is queued or running here (TimeoutError after `timeout`)."""

    @abstractmethod
    def _cancel_running(self, tick_id: str, reason: str) -> bool:
        """Stop a running tick so that it ends cancelled; False if it is not running here."""

    @abstractmethod
    def _close(self) -> None:
        """Start nothing more; a tick still waiting here ends cancelled without starting."""

    @abstractmethod
    def _drain(self, grace: float) -> None:
        """Wait up to `grace` seconds for running ticks, cancel the rest, wait for their end."""


class HandoffExecutor(Executor):
    """Where a scheduler hands its claims: queued here until they get a place, then run."""

    def submit(self, claim: SlotClaim) -> None:
        """Queue a claimed tick to run when it gets a place; one that cannot ends cancelled."""
        if not self._submit(claim):
            self.never_started(claim, None)

    def cancel(self, matches: ScopeMatch, reason: str, running: bool = True) -> None:
        """Queued ticks in scope never start; running ones are stopped and end cancelled.

        `running` False: only the queued ones (a pause whose level lets running ticks end).
        """
        for claim in self._withdraw(lambda claim: matches(claim.level, claim.tick_id)):
            self.never_started(claim, reason)
        super().cancel(matches, reason, running)

    def levels_changed(self, levels: Mapping[str, LevelConfig]) -> None:
        """A reload put new levels in force; by default nothing to do.

        Only an executor that keeps its own copy of a level setting (the local executor's
        caps) acts: every other setting is read where it is used.
        """

    def record_lost(self, tick_id: str, level: str, reason: str) -> None:
        """End a tick nobody can finish any more with `TickLost`."""
        self.runner.record(TickLost(tick_id=tick_id, level=level, reason=reason))

    def claimer_gone(self, host: str, pid: int) -> bool:
        """Never here: a claim of another host's process is that host's to reconcile.

        Here it would end `TickLost`, and only that host can see whether the process lives.
        """
        return False

    def abandoned(self, tick_id: str, level: str) -> str | None:
        """A tick claimed by a process that died before starting it; says what became of it.

        Here it can never start: it ends `TickLost`. An executor whose queue outlives the
        scheduler (procrastinate) hands it on instead.
        """
        lost = "claimed but never started: the process that claimed it is gone"
        self.record_lost(tick_id, level, lost)
        return f"lost ({lost})"

    @abstractmethod
    def adopt(self, started: StoredEvent, now: datetime) -> None:
        """End, or watch to its deadline, a tick a killed predecessor started on this host."""

    @abstractmethod
    def _submit(self, claim: SlotClaim) -> bool:
        """Queue the tick; False when it can no longer be queued (the executor is closed)."""

    @abstractmethod
    def _withdraw(self, matches: Callable[[SlotClaim], bool]) -> list[SlotClaim]:
        """Take matching ticks out of the queue before they start; returns them."""
