"""One `ToolCalled` event per tool call: its name, outcome and duration."""

from __future__ import annotations

from typing import Any

from strands.hooks import AfterToolCallEvent, HookProvider, HookRegistry

from harness.contracts import TickPayload, ToolCalled
from workers.recorder import EventRecorder


class ToolTrace(HookProvider):
    """Records a `ToolCalled` for every tool call, so a tick's trace shows what it did."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Watch each finished tool call."""
        registry.add_callback(AfterToolCallEvent, self._after_call)

    def _after_call(self, event: AfterToolCallEvent) -> None:
        if event.cancel_message is not None:
            status = "cancelled"
        elif event.exception is not None or event.result.get("status") == "error":
            status = "error"
        else:
            status = "ok"
        self.recorder.record(
            ToolCalled(
                tick_id=self.payload.tick_id,
                level=self.payload.level,
                name=event.tool_use["name"],
                status=status,
                duration_ms=round((event.duration or 0.0) * 1000, 3),
            )
        )
