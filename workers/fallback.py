"""Fallback inside a tick: the route's candidates in order, past the ones that are down.

It runs in the worker because only the worker sees a candidate fail (refused, 429, 5xx,
timeout) while the tick is still alive to try the next one; the runner only sees the
tick's end. Candidates a recent tick recorded down are passed over while one not known
down remains, so a dead endpoint costs one tick a timeout, not every tick. The next
candidate starts the conversation afresh (a failed call leaves no answer to build on);
the tool budget and the spend meter are the tick's, shared by all its candidates.
"""

from __future__ import annotations

from datetime import UTC, datetime

from harness.contracts.events import RouteFallback
from harness.contracts.payload import RouteCandidate, TickPayload
from harness.contracts.result import FailureClass
from harness.routing.availability import recently_down
from workers.recorder import EventRecorder

REASON_CHARS = 500


class CandidateWalk:
    """Where the tick stands on its route; without a route, one implicit candidate."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder
        plan = payload.route
        self.candidates: list[RouteCandidate] = list(plan.candidates) if plan else []
        self.index = 0
        if plan is not None:
            down = recently_down(recorder.store, plan.availability_ttl_seconds, datetime.now(UTC))
            while self.index < len(self.candidates) - 1 and self._known_down(down):
                following = self.candidates[self.index + 1]
                self._moved(following, f"unavailable: {down[self._target]}", cached=True)

    @property
    def current(self) -> RouteCandidate | None:
        """The candidate being tried (None: no route, the payload's own model runs)."""
        return self.candidates[self.index] if self.candidates else None

    @property
    def _target(self) -> str:
        return self.candidates[self.index].target

    def _known_down(self, down: dict[str, str]) -> bool:
        later = self.candidates[self.index + 1 :]
        return self._target in down and any(c.target not in down for c in later)

    def move_on(self, exc: BaseException, failure_class: FailureClass) -> bool:
        """After a candidate failed: whether there is a next one to try (now current).

        Every infrastructure failure of a routed candidate is recorded, the last one too
        (with no `to_target`), so later ticks know the endpoint is down.
        """
        if not self.candidates or failure_class != "infrastructure":
            return False
        following = (
            self.candidates[self.index + 1] if self.index + 1 < len(self.candidates) else None
        )
        self._moved(following, f"{type(exc).__name__}: {exc}"[:REASON_CHARS], cached=False)
        return following is not None

    def _moved(self, following: RouteCandidate | None, reason: str, cached: bool) -> None:
        self.recorder.record(
            RouteFallback(
                tick_id=self.payload.tick_id,
                level=self.payload.level,
                from_target=self._target,
                to_target=following.target if following else None,
                reason=reason,
                cached=cached,
            )
        )
        if following is not None:
            self.index += 1
