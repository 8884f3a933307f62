"""A tick's life and the decisions that may end it at any of its steps.

Every tick, scheduled or started by hand, lives claimed → queued → starting → attempt →
(backoff → attempt)* → ended, and one owner (the runner, fed by an executor) sees it
through. A decision recorded in the store while the tick lives holds at the next step,
whichever it is: a cancel scope in force, the level's pause or its spent daily budget end
the tick `TickCancelled` (with that reason) instead of starting the next attempt; a cancel
that reaches the process that owns the tick also cuts short its backoff or its attempt.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from harness.config import Settings
from harness.execution.launchers import TickProcess
from harness.execution.prepare import TickRef
from harness.prices import PriceBook
from harness.projections import cancel_scopes, level_paused, projector_for
from harness.routing import Router
from harness.scheduling import PAUSED, Budgets
from harness.store import EventStore, StoreError

BUDGET = "budget"


@dataclass
class Life:
    """A tick from the moment its owner takes it until its terminal event is recorded."""

    ref: TickRef
    forced: bool = False
    """Started by hand with `--force`: the level's pause and budget do not stop it."""
    stopped: threading.Event = field(default_factory=threading.Event)
    """Set with `reason`: wakes a backoff at once."""
    reason: str | None = None
    process: TickProcess | None = None
    """The attempt's worker while one runs."""
    may_hedge: bool = True
    """Whether a stalled attempt may still start a twin: one per tick, none for a twin."""
    hedge_won: bool = False
    """The twin gave the valid result: the tick tries no further attempt, pauses nothing."""

    def stop(self, reason: str) -> None:
        """Mark the life stopped for `reason`; the first reason given is the one kept."""
        self.reason = self.reason or reason
        self.stopped.set()

    def back_off(self, seconds: float) -> None:
        """Wait out a retry's backoff; a stop cuts it short."""
        self.stopped.wait(seconds)


class Decisions:
    """What the store says about a tick now: cancelled, paused, over budget, or none."""

    def __init__(self, settings: Settings, store: EventStore, router: Router | None) -> None:
        """`router`: its catalog in force decides how a level is billed (`Budgets`)."""
        self.settings = settings
        self.store = store
        self.prices = PriceBook(settings.prices)
        self._projector = projector_for(store, self.prices)
        self.budgets = Budgets(store, self._projector, self.prices, settings, router=router)
        self._lock = threading.Lock()
        """One fold of the spend read model at a time (ticks run in many threads)."""

    def stop_reason(self, level: str, tick_id: str, forced: bool = False) -> str | None:
        """Why the tick must not go on, or None.

        A store that cannot be read stops nothing: the decision in force before the outage
        was checked at the tick's previous step, and the service rides the outage out.
        """
        try:
            for scope in cancel_scopes(self.store):
                if scope.matches(level, tick_id):
                    return scope.reason
            if forced:
                return None
            if level_paused(self.store, level):
                return PAUSED
            if self.budgets.has_budget(level):
                with self._lock:
                    over = self.budgets.over(level)
                if over is not None:
                    return BUDGET
        except StoreError:
            return None
        return None
