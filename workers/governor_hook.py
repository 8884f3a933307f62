"""The context-size guard inside a tick: measure every request before the model sees it.

The request is measured in the OpenAI form the tick's provider sends (`format_request`),
as the proxy measures what it forwards, so both learn one ratio per model. Above the soft
threshold the wrap-up directive joins the conversation once, where the chain allows a
user message; above the hard ceiling the call is cancelled (`BeforeModelCallEvent.cancel`)
and the stop text becomes the tick's answer, so the tick still ends with text. Each
response's `metadata.usage` is a calibration sample, recorded for the ticks that follow.
The operator hears of a decision from the runner once the tick has ended: alert URLs are
secrets, and a tick's environment holds none but its own API keys.
"""

from __future__ import annotations

import logging
from typing import Any

from strands.hooks import BeforeModelCallEvent, HookProvider, HookRegistry, MessageAddedEvent
from strands.types.content import Message, Messages

from harness.contracts import Sample, TickPayload
from harness.governor import Calibrations, Tail, decide, request_chars, wire_request_chars
from workers.providers import Metered
from workers.recorder import EventRecorder

log = logging.getLogger(__name__)


def strands_tail(messages: Messages) -> Tail:
    """How the Strands conversation ends, in the governor's terms, to place a directive."""
    if not messages:
        return "empty"
    last = messages[-1]
    blocks = last.get("content") or []
    if last["role"] == "assistant":
        return "open_tool_calls" if any("toolUse" in block for block in blocks) else "assistant"
    return "tool_result" if any("toolResult" in block for block in blocks) else "user"


class ContextGovernor(HookProvider):
    """Register it before the spend meter, which must see the calls this one cancels."""

    def __init__(
        self,
        payload: TickPayload,
        recorder: EventRecorder,
        calibrations: Calibrations,
    ) -> None:
        self.payload = payload
        self.limits = payload.governor
        self.recorder = recorder
        self.model: Metered | None = None
        """The model of the candidate being tried; a fallback sets the next one."""
        self.calibrations = calibrations
        self.directed = False
        self.stopped = False
        self._chars = 0

    def _model_id(self) -> str:
        """The model answering now (after a fallback, not the payload's first)."""
        if self.model is None:
            return self.payload.model
        return str(self.model.get_config().get("model_id") or self.payload.model)

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Judge each request before its model call; learn the ratio from each answer's usage."""
        registry.add_callback(BeforeModelCallEvent, self._before_call)
        registry.add_callback(MessageAddedEvent, self._message_added)

    def _measure(self, event: BeforeModelCallEvent) -> int:
        """The size in the protocol's form; the SDK's own if the provider cannot format it."""
        agent = event.agent
        specs = agent.tool_registry.get_all_tool_specs()
        if self.model is None:
            return request_chars(agent.system_prompt, agent.messages, specs)
        try:
            request = self.model.request_form(agent.messages, specs, agent.system_prompt)
        except (TypeError, ValueError) as exc:
            log.warning("measuring the request unformatted: %s", exc)
            return request_chars(agent.system_prompt, agent.messages, specs)
        return wire_request_chars(self.model.api, request)

    def _before_call(self, event: BeforeModelCallEvent) -> None:
        if event.cancel:
            return
        model = self._model_id()
        self._chars = self._measure(event)
        messages = event.agent.messages
        verdict = decide(
            self.limits,
            model,
            self._chars,
            self.calibrations.ratio(model),
            strands_tail(messages),
        )
        if verdict.decision in ("soft", "defer") and self.directed:
            return  # told once already; the directive stays in the conversation
        if verdict.decision == "pass":
            return
        self.recorder.record(verdict.event("worker", self.payload.tick_id))
        if verdict.decision == "hard":
            self.stopped = True
            event.cancel = verdict.text(self.limits)
        elif verdict.decision == "soft":
            self.directed = True
            _append_directive(messages, verdict.text(self.limits))
            self._chars = self._measure(event)

    def _message_added(self, event: MessageAddedEvent) -> None:
        message = event.message
        usage: dict[str, Any] = dict(message.get("metadata", {}).get("usage") or {})
        prompt = int(usage.get("inputTokens") or 0)
        if message["role"] != "assistant" or prompt <= 0 or self._chars <= 0:
            return
        sample = Sample(self._chars, prompt, usage.get("cacheReadInputTokens"))
        if not sample.tiny:
            model = self._model_id()
            self.calibrations.learn(model, sample)
            self.recorder.record(sample.event(model, "worker", self.payload.tick_id))
        self._chars = 0


def _append_directive(messages: Messages, text: str) -> None:
    """As the last user message: joined to a final user message, else a new one."""
    if messages and messages[-1]["role"] == "user":
        last = messages[-1]
        messages[-1] = Message(role="user", content=[*last["content"], {"text": text}])
    else:
        messages.append(Message(role="user", content=[{"text": text}]))
