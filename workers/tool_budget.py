"""The tool-call cap: real executions never exceed it, and the tick still ends with text.

Calls over the cap are cancelled (`cancel_tool`) and cost nothing; after the batch that
reaches the cap the loop ends (`end_turn`) with a text saying so. The SDK's own turn limit
is not used: it stops on a tool result and leaves the answer empty.
"""

from __future__ import annotations

from typing import Any

from strands.hooks import AfterToolsEvent, BeforeToolCallEvent, HookProvider, HookRegistry


class ToolBudget(HookProvider):
    """Caps a tick's tool calls: past the cap, calls are cancelled and counted, not run."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.executed = 0
        self.cancelled = 0
        self.exhausted = False

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Count every tool call before it runs and note when a batch met the cap."""
        registry.add_callback(BeforeToolCallEvent, self._before_call)
        registry.add_callback(AfterToolsEvent, self._after_batch)

    def _before_call(self, event: BeforeToolCallEvent) -> None:
        if event.cancel_tool:
            return  # another hook cancelled it: not an execution, not ours to count
        if self.executed >= self.cap:
            self.cancelled += 1
            event.cancel_tool = (
                f"Not run: this tick's tool budget of {self.cap} calls is used up. "
                "Answer with what you have."
            )
        else:
            self.executed += 1

    def _after_batch(self, event: AfterToolsEvent) -> None:
        if self.executed >= self.cap:
            self.exhausted = True
            event.end_turn = (
                f"Stopped: the tool budget of {self.cap} calls for this tick is used up "
                f"({self.executed} run, {self.cancelled} refused)."
            )
