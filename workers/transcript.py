"""A tick's transcript as `TranscriptEntry` events: what it was asked, said and did.

The system text and the prompt once per tick, each answer of the model (its thinking
first, whichever protocol streamed it) when the call ends, each tool call with its
arguments and output when the tool returns, with its `ToolCalled` in the same commit: all
redacted and capped per item (`harness.contracts.events.capped`), recorded as they happen
so a running tick can be followed. A tool still running when the tick is ended (a cancel,
its deadline) is recorded as killed with it (`end`), so the story and the counts list it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Literal

import orjson
from strands.hooks import (
    AfterModelCallEvent,
    AfterToolCallEvent,
    BeforeModelCallEvent,
    BeforeToolCallEvent,
    HookProvider,
    HookRegistry,
)

from harness.contracts import TickPayload, ToolCalled, TranscriptEntry, TranscriptKind, capped
from workers.recorder import EventRecorder

ToolStatus = Literal["ok", "error", "cancelled", "killed"]
KILLED_OUTPUT = "(killed: the tick ended while the tool ran)"


class Transcript(HookProvider):
    """Register it after the hooks that may cancel a model call, to see their decision."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder
        self._cancelled = False
        self.ended_tools: set[str] = set()
        """Tool use ids whose call has its entry: ended, refused, or killed."""
        self._running: dict[str, tuple[str, Any, float]] = {}
        """Tool use id -> (name, input, start) of each Strands tool call running now."""
        self._lock = threading.Lock()
        self._ended = False

    def open(self) -> None:
        """Record what the tick is asked, once, before its first model call."""
        asked: list[tuple[TranscriptKind, str]] = [
            ("system", self.payload.instructions),
            ("prompt", self.payload.prompt),
        ]
        self.recorder.record_all([self._entry(kind, text) for kind, text in asked if text])

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Watch each model call's answer and each tool call's start and outcome."""
        registry.add_callback(BeforeModelCallEvent, self._before_model)
        registry.add_callback(AfterModelCallEvent, self._after_model)
        registry.add_callback(BeforeToolCallEvent, self._before_tool)
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

    def _before_tool(self, event: BeforeToolCallEvent) -> None:
        if event.cancel_tool:
            return  # refused (the tool cap): it never runs, its end says so
        use = event.tool_use
        with self._lock:
            self._running[use["toolUseId"]] = (use["name"], use.get("input"), time.monotonic())

    def _after_tool(self, event: AfterToolCallEvent) -> None:
        status: ToolStatus
        if event.cancel_message is not None:
            status, output = "cancelled", event.cancel_message
        else:
            status = "error" if event.result.get("status") == "error" else "ok"
            if event.exception is not None:
                status = "error"
            output = _tool_output(event.result.get("content", []))
        use = event.tool_use
        duration_ms = round((event.duration or 0.0) * 1000, 3)
        with self._lock:
            self._running.pop(use.get("toolUseId"), None)
            if not self._ended:  # else recorded killed: the tick ended while it ran
                self.tool(
                    use["name"], use.get("toolUseId"), use.get("input"), output, status, duration_ms
                )

    def end(self) -> None:
        """The tick ends here (the runner's SIGTERM): each tool still running ended with it."""
        with self._lock:
            self._ended = True
            running, self._running = self._running, {}
        now = time.monotonic()
        for use_id, (name, arguments, started) in running.items():
            duration_ms = round((now - started) * 1000, 3)
            self.tool(name, use_id, arguments, KILLED_OUTPUT, "killed", duration_ms)

    def tool(
        self,
        name: str,
        tool_use_id: str | None,
        arguments: Any,
        output: str,
        status: ToolStatus,
        duration_ms: float = 0.0,
    ) -> None:
        """A finished (or refused, or killed) tool call: its transcript entry and `ToolCalled`."""
        if tool_use_id is not None:
            self.ended_tools.add(tool_use_id)
        shown, cut = capped(_json(arguments))
        entry = self._entry(
            "tool",
            output,
            tool=name,
            tool_use_id=tool_use_id,
            arguments=shown,
            arguments_cut_chars=cut,
            status=status,
        )
        called = ToolCalled(
            tick_id=self.payload.tick_id,
            level=self.payload.level,
            name=name,
            status=status,
            duration_ms=duration_ms,
        )
        self.recorder.record_all([entry, called])

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
