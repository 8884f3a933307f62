"""A tick's transcript as `TranscriptEntry` events: what it was asked, said and did.

The system text and the prompt once per tick, each answer of the model (its thinking
first, whichever protocol streamed it) when the call ends, each tool call with its
arguments and output when the tool returns: all redacted and capped per item
(`harness.contracts.events.capped`), recorded as they happen so a running tick can be
followed.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from strands.hooks import (
    AfterModelCallEvent,
    AfterToolCallEvent,
    BeforeModelCallEvent,
    HookProvider,
    HookRegistry,
)

from harness.contracts import TickPayload, TranscriptEntry, TranscriptKind, capped
from workers.recorder import EventRecorder


class Transcript(HookProvider):
    """Register it after the hooks that may cancel a model call, to see their decision."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder
        self._cancelled = False

    def open(self) -> None:
        """Record what the tick is asked, once, before its first model call."""
        asked: list[tuple[TranscriptKind, str]] = [
            ("system", self.payload.instructions),
            ("prompt", self.payload.prompt),
        ]
        self.recorder.record_all([self._entry(kind, text) for kind, text in asked if text])

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Watch each model call's answer and each tool call's outcome."""
        registry.add_callback(BeforeModelCallEvent, self._before_model)
        registry.add_callback(AfterModelCallEvent, self._after_model)
        registry.add_callback(AfterToolCallEvent, self._after_tool)

    def _before_model(self, event: BeforeModelCallEvent) -> None:
        self._cancelled = bool(event.cancel)

    def _after_model(self, event: AfterModelCallEvent) -> None:
        if event.stop_response is None:
            return  # a failed call said nothing; its `ModelCalled` holds the error
        content = event.stop_response.message.get("content", [])
        thoughts = [
            str(block["reasoningContent"].get("reasoningText", {}).get("text") or "")
            for block in content
            if "reasoningContent" in block
        ]
        if any(thoughts):
            self._record("thinking", "\n".join(filter(None, thoughts)))
        texts = [block["text"] for block in content if block.get("text")]
        if texts:
            self._record("stopped" if self._cancelled else "assistant", "\n".join(texts))

    def _after_tool(self, event: AfterToolCallEvent) -> None:
        status: Literal["ok", "error", "cancelled"]
        if event.cancel_message is not None:
            status, output = "cancelled", event.cancel_message
        else:
            status = "error" if event.result.get("status") == "error" else "ok"
            if event.exception is not None:
                status = "error"
            output = _tool_output(event.result.get("content", []))
        arguments, arguments_cut = capped(_json(event.tool_use.get("input")))
        self._record(
            "tool",
            output,
            tool=event.tool_use["name"],
            tool_use_id=event.tool_use.get("toolUseId"),
            arguments=arguments,
            arguments_cut_chars=arguments_cut,
            status=status,
        )

    def _record(self, kind: TranscriptKind, text: str, **fields: Any) -> None:
        self.recorder.record(self._entry(kind, text, **fields))

    def _entry(self, kind: TranscriptKind, text: str, **fields: Any) -> TranscriptEntry:
        text, cut = capped(text)
        return TranscriptEntry(
            tick_id=self.payload.tick_id,
            level=self.payload.level,
            kind=kind,
            text=text,
            cut_chars=cut,
            **fields,
        )


def _tool_output(content: list[Any]) -> str:
    """A tool result's content blocks as text: text as it is, anything else as JSON."""
    parts = []
    for block in content:
        if isinstance(block, dict) and "text" in block:
            parts.append(str(block["text"]))
        elif isinstance(block, dict) and "json" in block:
            parts.append(_json(block["json"]))
        else:
            parts.append(
                f"[{', '.join(block) if isinstance(block, dict) else type(block).__name__}]"
            )
    return "\n".join(parts)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()
