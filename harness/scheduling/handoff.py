"""What the scheduler hands its claimed ticks to: the executor, seen from scheduling.

Scheduling comes before execution on the data path and does not import it; the service
is given an executor by `tickwork run`'s wiring and needs no more of it than this.
`harness.execution.executors` (local threads, procrastinate jobs on any host) satisfy it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from harness.scheduling.waves import SlotClaim
from harness.store import StoredEvent

ScopeMatch = Callable[[str, str], bool]
"""(level, tick id) -> whether a cancel request's scope covers the tick."""


class RunningTick(Protocol):
    """What the service needs of a tick in flight: enough to match it against a cancel."""

    @property
    def tick_id(self) -> str:
        """The tick's id, matched against a cancel request's prefix."""

    @property
    def level(self) -> str:
        """The tick's level, matched against a cancel request's scope."""


class TickOwner(Protocol):
    """Whoever runs ticks, as the control stream's follower sees it: it stops them."""

    def cancel(self, matches: ScopeMatch, reason: str, running: bool = True) -> None:
        """Queued ticks in scope never start; running ones are stopped and end cancelled.

        `running` False: only the queued ones (a pause whose level lets running ticks end).
        """


class Handoff(TickOwner, Protocol):
    """The executor as the service sees it: submit, never-start and cancel claimed ticks."""

    def submit(self, claim: SlotClaim) -> None:
        """Queue a claimed tick to run when it gets a place; one that cannot ends cancelled."""

    def never_started(self, claim: SlotClaim, reason: str | None) -> None:
        """End a claimed tick that must not start (`TickCancelled`; None: the service stops)."""

    def running(self) -> Sequence[RunningTick]:
        """Ticks running here right now."""

    def adopt(self, started: StoredEvent, now: datetime) -> None:
        """End, or watch to its deadline, a tick a killed predecessor started on this host."""

    def record_lost(self, tick_id: str, level: str, reason: str) -> None:
        """End a tick nobody can finish any more with `TickLost`."""

    def claimer_gone(self, host: str, pid: int) -> bool:
        """Whether the process on another host that claimed a tick is gone, if it can tell.

        False when it cannot: such a tick is left to its own host's services.
        """

    def abandoned(self, tick_id: str, level: str) -> str | None:
        """A tick claimed by a process that died before starting it; says what became of it.

        None: nothing needed doing (it waits, queued, for a worker).
        """

    def wait_idle(self, timeout: float) -> None:
        """Wait until nothing is queued or running here (TimeoutError after `timeout`)."""

    def shutdown(self, grace: float) -> None:
        """Start nothing more; give running ticks `grace` seconds, then cancel them."""
