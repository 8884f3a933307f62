"""A Strands tick's model calls, booked (`workers.call_booking`) each before the next is sent.

A call's `BudgetSpent` and `ModelCalled` are appended in one commit. Each call's start is
recorded too (`ModelCallStarted`, with its estimated input size) before it is sent: a
call a kill cuts off is then booked, estimated, by whoever ends the attempt
(`harness.execution.cutoff`), never lost.

Hooks run inline in the agent loop, so the appends complete before the loop can ask the
model again: a tick killed at any moment loses at most the call in flight. A tick ended
from outside (a cancel, its deadline: `workers.tick_end`) books that call itself (`end`),
estimated, with what of its answer had arrived.
A call that returns without usage is recorded with tokens estimated from the request and
response sizes and `estimated: true`, never as zero. The SDK's usage gives the tokens; the
parts it drops (reasoning, hour-long cache writes, web searches) come from the answer's
bytes as `workers.wire` read them. A call the upstream refused before
its answer began (429, 5xx, refused connection) produced no tokens: it has a `ModelCalled`
with its error and no `BudgetSpent`. One whose answer began and then broke off is booked,
estimated, even when nothing of it reached the meter (the SDK holds a tool call's pieces
until the stream ends): the upstream may bill it. Both events come from this one hook
because the call's record links its spend, and the SDK calls `AfterModelCallEvent` hooks
in reverse order.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from strands.hooks import AfterModelCallEvent, BeforeModelCallEvent, HookProvider, HookRegistry

from harness.contracts import TickPayload
from harness.governor import priced_apart, request_chars, tokens_from_chars
from workers.call_booking import CallBooking, CallFacts, Refusal
from workers.failures import failure_class, failure_message
from workers.providers import Metered
from workers.recorder import EventRecorder


class SpendMeter(HookProvider):
    """Register it after any hook that may cancel a model call (a cancelled call is free)."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.booking = CallBooking.of(payload)
        self.recorder = recorder
        self.model: Metered | None = None
        """The model of the candidate being tried; a fallback sets the next one."""
        self.target: str | None = None
        """The catalog target of that candidate (None without a route)."""
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.model_calls = 0
        self.estimated_calls = 0
        self.calls_started = 0
        """Calls sent to the upstream, refused ones too: the `call` of `ModelCallStarted` and
        of its `ModelCalled`."""
        self._attempt = 1
        self._request_chars = 0
        self._started_at = 0.0
        self._ended_at = 0.0
        self._wait_ms = 0.0
        self._cancelled = False
        self._in_flight = False
        """A call is sent and has not ended."""
        self._lock = threading.Lock()
        self._ended = False

    def use(self, model: Metered, target: str | None) -> Metered:
        """Meter the calls of the next candidate; its first call is a first attempt again."""
        self.model, self.target, self._attempt = model, target, 1
        return model

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Size and record each call before it is sent; record its spend after it."""
        registry.add_callback(BeforeModelCallEvent, self._before_call)
        registry.add_callback(AfterModelCallEvent, self._after_call)

    def _before_call(self, event: BeforeModelCallEvent) -> None:
        self._cancelled = bool(event.cancel)
        agent = event.agent
        self._request_chars = request_chars(
            agent.system_prompt, agent.messages, agent.tool_registry.get_all_tool_specs()
        )
        self._started_at = time.monotonic()
        # A retry is sent after the SDK's backoff, which sleeps between the tries' hooks.
        retry = self._attempt > 1
        self._wait_ms = round((self._started_at - self._ended_at) * 1000, 3) if retry else 0.0
        if self._cancelled or self.model is None:
            return
        self.calls_started += 1
        model_id = self.model.get_config()["model_id"]
        estimate = tokens_from_chars(self._request_chars)
        self.recorder.record(
            self.booking.started(self.calls_started, model_id, estimate, self.target)
        )
        self._in_flight = True

    def _after_call(self, event: AfterModelCallEvent) -> None:
        model = self.model
        if self._cancelled or model is None:
            return
        self._book(self._facts(model, event))

    def end(self) -> None:
        """The tick ends here (the runner's SIGTERM): the call in flight, booked estimated.

        It reached the upstream, which may bill it; what of its answer had arrived is
        its output's estimate.
        """
        model = self.model
        if model is None or not self._in_flight:
            return
        now = time.monotonic()
        first = model.first_token_at
        self._book(
            CallFacts(
                model=model.get_config()["model_id"],
                call=self.calls_started,
                prompt_tokens=tokens_from_chars(self._request_chars),
                completion_tokens=tokens_from_chars(model.response_chars),
                estimated=True,
                first_token_ms=None
                if first is None
                else round((first - self._started_at) * 1000, 3),
                duration_ms=round((now - self._started_at) * 1000, 3),
                attempt=self._attempt,
                target=self.target,
                provider=model.provider,
                refusal=Refusal("TickEnded", "infrastructure", "the tick ended during the call"),
            ),
            ending=True,
        )

    def _book(self, facts: CallFacts, ending: bool = False) -> None:
        """Count and record the call once: by its end, or by the tick's if that came first."""
        with self._lock:
            if self._ended or not self._in_flight:
                return
            self._in_flight, self._ended = False, ending
            if facts.billed:
                self.model_calls += 1
                self.estimated_calls += facts.estimated
                self.prompt_tokens += facts.prompt_tokens
                self.completion_tokens += facts.completion_tokens
            self.recorder.record_all(self.booking.ended(facts))

    def _facts(self, model: Metered, event: AfterModelCallEvent) -> CallFacts:
        """What the SDK's events and the metered stream tell of the call that just ended."""
        usage: dict[str, Any] = {}
        if event.stop_response is not None:
            usage = dict(event.stop_response.message.get("metadata", {}).get("usage") or {})
        prompt = int(usage.get("inputTokens") or 0)
        completion = int(usage.get("outputTokens") or 0)
        estimated = prompt == 0 and completion == 0
        exc = event.exception
        wire = None if estimated else model.watch.usage()
        if estimated:
            prompt = tokens_from_chars(self._request_chars)
            completion = tokens_from_chars(model.response_chars)
        now = self._ended_at = time.monotonic()
        attempt, self._attempt = self._attempt, self._attempt + 1 if exc is not None else 1
        refusal = None
        if exc is not None:
            refusal = Refusal(type(exc).__name__, failure_class(exc), failure_message(exc))
        return CallFacts(
            model=model.get_config()["model_id"],
            call=self.calls_started,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cache_read_tokens=usage.get("cacheReadInputTokens"),
            cache_write_tokens=usage.get("cacheWriteInputTokens"),
            **priced_apart(wire),
            estimated=estimated,
            # A refusal produced nothing and was not billed; an answer that began may be.
            billed=not (estimated and exc is not None and not model.answered),
            stop_reason=str(event.stop_response.stop_reason) if event.stop_response else None,
            first_token_ms=self._first_token_ms(model),
            duration_ms=round((now - self._started_at) * 1000, 3),
            wait_ms=self._wait_ms,
            attempt=attempt,
            target=self.target,
            provider=model.provider,
            refusal=refusal,
        )

    def _first_token_ms(self, model: Metered) -> float | None:
        """Milliseconds from the call's send to its first token (None: none arrived)."""
        first = model.first_token_at
        return None if first is None else round((first - self._started_at) * 1000, 3)
