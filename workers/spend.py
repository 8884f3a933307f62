"""One `BudgetSpent` per finished model call, committed before the next call starts.

Each call's start is recorded too (`ModelCallStarted`, with its estimated input size)
before it is sent: a call a kill cuts off is then booked, estimated, by whoever ends the
attempt (`harness.execution.cutoff`), never lost.

Hooks run inline in the agent loop, so the append below completes before the loop can
ask the model again: a tick killed at any moment loses at most the call in flight.
A call that returns without usage is recorded with tokens estimated from the request and
response sizes and `estimated: true`, never as zero. A call the upstream refused before
answering (429, 5xx, refused connection) produced no tokens and is not recorded.
"""

from __future__ import annotations

from typing import Any

from strands.hooks import AfterModelCallEvent, BeforeModelCallEvent, HookProvider, HookRegistry

from harness.contracts.events import BudgetSpent, ModelCallStarted
from harness.contracts.payload import TickPayload
from harness.governor.estimate import request_chars, tokens_from_chars
from workers.model import MeteredOpenAIModel
from workers.recorder import EventRecorder


class SpendMeter(HookProvider):
    """Register it after any hook that may cancel a model call (a cancelled call is free)."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder
        self.model: MeteredOpenAIModel | None = None
        """The model of the candidate being tried; a fallback sets the next one."""
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.model_calls = 0
        self.estimated_calls = 0
        self.calls_started = 0
        self._request_chars = 0
        self._cancelled = False

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
        if self._cancelled or self.model is None:
            return
        self.calls_started += 1
        self.recorder.record(
            ModelCallStarted(
                tick_id=self.payload.tick_id,
                level=self.payload.level,
                call=self.calls_started,
                model=self.model.get_config()["model_id"],
                estimated_input_tokens=tokens_from_chars(self._request_chars),
            )
        )

    def _after_call(self, event: AfterModelCallEvent) -> None:
        model = self.model
        if self._cancelled or model is None:
            return
        usage: dict[str, Any] = {}
        if event.stop_response is not None:
            usage = dict(event.stop_response.message.get("metadata", {}).get("usage") or {})
        prompt = int(usage.get("inputTokens") or 0)
        completion = int(usage.get("outputTokens") or 0)
        estimated = prompt == 0 and completion == 0
        if estimated:
            if event.exception is not None and model.response_chars == 0:
                return  # refused before any answer: nothing was produced or billed
            prompt = tokens_from_chars(self._request_chars)
            completion = tokens_from_chars(model.response_chars)
        self.model_calls += 1
        self.estimated_calls += estimated
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.recorder.record(
            BudgetSpent(
                tick_id=self.payload.tick_id,
                level=self.payload.level,
                model=model.get_config()["model_id"],
                prompt_tokens=prompt,
                completion_tokens=completion,
                cache_read_tokens=usage.get("cacheReadInputTokens"),
                cache_write_tokens=usage.get("cacheWriteInputTokens"),
                estimated=estimated,
                source="worker",
            )
        )
