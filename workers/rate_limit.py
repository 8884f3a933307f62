"""Shared rate limits inside a tick: wait for each model call's turn before it is sent.

Before every call the hook takes the call's share from each bucket in scope of the
candidate it goes to (its level's, its catalog target's, its provider host's; see
`harness.governor.rate_limit`): one request, its tokens as estimated from the request
(corrected with the answer's usage once the call ends), and a parallel slot held until
then. A call that has to wait records a `RateLimited` with the wait; one whose turn lies
past the tick's remaining time (less a fifth, kept for the call) is cancelled
(`BeforeModelCallEvent.cancel`), its text becomes the tick's answer and the tick ends
with stop reason `rate_limit`. A provider's 429 with `retry-after` (seen on the wire,
before the SDK turns it into an exception) blocks the call's target and provider
buckets for that long, for every tick.

A store out of reach lets the call go unlimited: the provider's own limits still hold,
and a tick never fails for its store.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

import httpx
from strands.hooks import AfterModelCallEvent, BeforeModelCallEvent, HookProvider, HookRegistry

from harness.contracts import RateLimited, Scope, TickPayload, provider_key, target_key
from harness.governor import await_turn, hold_back, refused_for, request_chars, tokens_from_chars
from harness.store import Call, StoreError, settle
from workers.providers import Metered
from workers.recorder import EventRecorder

log = logging.getLogger(__name__)

SHARED_BY_PROVIDER = (target_key(""), provider_key(""))
"""The kinds of bucket a provider's 429 holds back."""
WAIT_SHARE = 0.8
"""Of the tick's time, the part a call may spend waiting for its turn: the rest is the
call's own, and the runner's clock started before this process did."""
LEASE_MARGIN_SECONDS = 30.0
"""A parallel slot outlives its call's timeout by this much before it counts as abandoned."""


class RateLimitGate(HookProvider):
    """Register it after the hooks that may cancel a call, before the spend meter."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder
        self.plan = payload.rate_limits
        wait = self.plan.max_wait_seconds if self.plan else 0.0
        self.deadline = time.time() + wait * WAIT_SHARE
        self.model: Metered | None = None
        self.target: str | None = None
        self.stopped = False
        self._calls = itertools.count(1)
        self._call: Call | None = None
        self._scopes: list[Scope] = []

    def use(self, model: Metered, target: str | None) -> None:
        """Calls go to this candidate now (a fallback moves to the next one)."""
        self.model, self.target = model, target

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Wait for the turn before each call; settle what it took after it."""
        registry.add_callback(BeforeModelCallEvent, self._before_call)
        registry.add_callback(AfterModelCallEvent, self._after_call)

    def _before_call(self, event: BeforeModelCallEvent) -> None:
        if event.cancel or self.plan is None or self.model is None:
            return
        number = next(self._calls)
        self._scopes = self.plan.scope(self.payload.level, self.target, self.model.provider or "")
        store = self.recorder.store if self._scopes else None
        if store is None:
            return
        agent = event.agent
        chars = request_chars(
            agent.system_prompt, agent.messages, agent.tool_registry.get_all_tool_specs()
        )
        call = Call(
            call_id=f"{self.payload.tick_id}:{number}",
            tokens=tokens_from_chars(chars),
            lease_seconds=self.payload.model_timeout_seconds + LEASE_MARGIN_SECONDS,
            tick_id=self.payload.tick_id,
        )
        try:
            outcome = await_turn(store, self._scopes, call, self.deadline)
        except StoreError as exc:
            log.warning("rate limits unchecked, the store is out of reach: %s", exc)
            return
        if outcome.bucket is not None and outcome.reason is not None:
            self.recorder.record(
                RateLimited(
                    tick_id=self.payload.tick_id,
                    level=self.payload.level,
                    call=number,
                    bucket=outcome.bucket,
                    reason=outcome.reason,
                    waited_ms=round(outcome.waited * 1000, 3),
                    taken=outcome.taken,
                )
            )
        if outcome.taken:
            self._call = call
            return
        self.stopped = True
        event.cancel = (
            f"Stopped before the next model call: the rate limit of {outcome.bucket} "
            f"({outcome.reason}) gives it a turn in {outcome.turn:.1f} s, past the tick's "
            "remaining time."
        )

    def _after_call(self, event: AfterModelCallEvent) -> None:
        call, self._call = self._call, None
        store = self.recorder.store if call is not None else None
        if call is None or store is None:
            return
        tokens = None
        if event.stop_response is not None:
            usage: dict[str, Any] = dict(
                event.stop_response.message.get("metadata", {}).get("usage") or {}
            )
            total = int(usage.get("inputTokens") or 0) + int(usage.get("outputTokens") or 0)
            tokens = total or None
        try:
            settle(store, call.call_id, tokens)
        except StoreError as exc:
            log.warning("a rate-limit lease is left to expire: %s", exc)

    async def observe_answer(self, response: httpx.Response) -> None:
        """A provider's 429 with `retry-after` holds back its target and provider buckets."""
        seconds = refused_for(response.status_code, response.headers)
        store = self.recorder.store if seconds and self._scopes else None
        if seconds is None or store is None:
            return
        # The buckets the call was sent under, but its level's: the provider refused the
        # endpoint, not the level.
        keys = [key for key, _ in self._scopes if key.startswith(SHARED_BY_PROVIDER)]
        try:
            hold_back(store, keys, seconds)
        except StoreError as exc:
            log.warning("a provider's retry-after is not shared: %s", exc)
