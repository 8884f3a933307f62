"""Fallback inside a tick: the route's candidates in order, past the ones that are down.

It runs in the worker because only the worker sees a candidate fail (refused, 429, 5xx,
timeout) while the tick is still alive to try the next one; the runner only sees the
tick's end. Candidates a recent tick recorded down are passed over while one not known
down remains, so a dead endpoint costs one tick a timeout, not every tick. The next
candidate starts the conversation afresh (a failed call leaves no answer to build on);
the tool budget and the spend meter are the tick's, shared by all its candidates.

A candidate is chosen only when the variables it names (endpoint, key) are set in this
process and its quota is not known spent (`harness.routing.quota`): one whose variable is
unset is passed over with a reason starting `unset`, one without quota left with a reason
starting `quota`, one a `reroute` budget rules out with a reason starting `budget` (the
last candidate is kept: the budget's check before each call stops it there). All are
known without a call, so none marks the target down for later ticks. When no candidate
is left the tick fails on the last one's reason (configuration for a variable,
infrastructure for quota) instead of calling a provider that cannot answer or will
refuse.

A candidate with `selfcheck_required` is asked a one-line question before the tick runs
there, unless a passed check recorded in the store still vouches for it (none since the
target was last marked unavailable). A check that fails is the candidate failing on
infrastructure: it falls back, and marks the target down, as any such failure does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from harness.contracts import (
    FailureClass,
    QuotaObserved,
    RouteCandidate,
    RouteFallback,
    TargetSelfChecked,
    TickPayload,
    capped,
    missing_agent,
)
from harness.routing import QuotaExhaustedError, QuotaGate, answer_quota, recently_down, vouched_for
from workers.model import AgentMissingError, MissingEndpointError, unset_variables
from workers.recorder import EventRecorder

REASON_CHARS = 500
SELFCHECK_PROMPT = "This is a health check of this endpoint. Reply with the single word OK."


class BudgetReroutedError(Exception):
    """A candidate's `reroute` budget is spent (never raised: the last candidate is kept)."""


class SelfCheckFailedError(Exception):
    """A target answered its self-check with no text: it cannot run a tick."""


class CandidateWalk:
    """Where the tick stands on its route; without a route, one implicit candidate."""

    def __init__(
        self,
        payload: TickPayload,
        recorder: EventRecorder,
        rules_out: Callable[[str], str | None] = lambda target: None,
    ) -> None:
        """`rules_out`: why a `reroute` budget rules a target out now (`BudgetGuard.spent_for`)."""
        self.payload = payload
        self.recorder = recorder
        plan = payload.route
        self.candidates: list[RouteCandidate] = list(plan.candidates) if plan else []
        self.index = 0
        self.quota = QuotaGate(payload.tick_id, payload.level, recorder.store, os.environ)
        self._vouched: set[str] | None = None
        self.rules_out = rules_out
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
    def on_last(self) -> bool:
        """No candidate is left to fall back to (a `reroute` budget stops the calls here)."""
        return self.index >= len(self.candidates) - 1

    def choose(self) -> RouteCandidate | None:
        """The candidate to run on: the current one, or the next that is set and has quota.

        Raises:
            MissingEndpointError: the last candidate names a variable that is unset here.
            QuotaExhaustedError: the last candidate has no quota left.
        """
        while self.candidates:
            candidate = self.candidates[self.index]
            blocked = self._blocked(candidate)
            if blocked is None:
                return candidate
            reason, error = blocked
            following = (
                self.candidates[self.index + 1] if self.index + 1 < len(self.candidates) else None
            )
            self._moved(following, reason, cached=True)
            if following is None:
                raise error
        return None

    def _blocked(self, candidate: RouteCandidate) -> tuple[str, Exception] | None:
        """Why the candidate cannot be called now (the fallback's reason, the tick's error)."""
        missing = missing_agent(candidate.agent, self.payload.agents_dir)
        if missing is not None:
            return f"unavailable: {missing}", AgentMissingError(missing)
        unset = unset_variables(candidate)
        if unset:
            error = MissingEndpointError(candidate.target, unset)
            return f"unset: {error}", error
        if candidate is not self.candidates[-1]:
            spent = self.rules_out(candidate.target)
            if spent is not None:
                return f"budget: {spent}", BudgetReroutedError(spent)
        why, probed = self.quota.check(candidate, datetime.now(UTC))
        if probed:
            self.recorder.record(self.quota.observations[candidate.target])
        if why is None:
            return None
        return f"quota: {why}", QuotaExhaustedError(
            f"no candidate has quota left: {candidate.target}: {why}"
        )

    def self_check(self, candidate: RouteCandidate, ask: Callable[[str], str | None]) -> None:
        """Ask the candidate the self-check, unless a recorded one still vouches for it.

        `ask` sends the question on the candidate's own model (so the call is metered and
        budgeted as the tick's) and returns the answer's text, or None when the call was
        not made (the daily budget stopped it: the tick ends on that, nothing is learned).
        The outcome is recorded for every later tick; a failure is raised on, for the walk
        to fall back.
        """
        if not candidate.selfcheck_required:
            return
        if self._vouched is None:
            self._vouched = vouched_for(self.recorder.store)
        if candidate.target in self._vouched:
            return
        try:
            answer = ask(SELFCHECK_PROMPT)
            if answer is None:
                return
            if not answer.strip():
                raise SelfCheckFailedError(f"{candidate.target} answered with no text")
        except Exception as exc:
            self._checked(candidate, capped(f"{type(exc).__name__}: {exc}", REASON_CHARS)[0])
            raise
        self._checked(candidate, None)
        self._vouched.add(candidate.target)

    def _checked(self, candidate: RouteCandidate, failure: str | None) -> None:
        self.recorder.record(
            TargetSelfChecked(
                tick_id=self.payload.tick_id,
                level=self.payload.level,
                target=candidate.target,
                passed=failure is None,
                detail=failure,
            )
        )

    async def observe_answer(self, response: httpx.Response) -> None:
        """Record an answer's rate-limit headers, so the next ticks know what is left."""
        seen = answer_quota(response.headers)
        if seen is None or not self.candidates:
            return
        self.recorder.record(
            QuotaObserved(
                tick_id=self.payload.tick_id,
                level=self.payload.level,
                target=self._target,
                source="answer",
                exhausted=seen.exhausted,
                requests_left=seen.requests_left,
                tokens_left=seen.tokens_left,
                retry_after_seconds=seen.retry_after_seconds,
            )
        )

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
