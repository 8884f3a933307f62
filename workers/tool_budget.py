"""The tool-call cap: real executions never exceed it, and the tick still ends with text.

Calls over the cap are cancelled (`cancel_tool`) and cost nothing; after the batch that
reaches the cap the loop ends (`end_turn`) with a text saying so. The SDK's own turn limit
is not used: it stops on a tool result and leaves the answer empty.
"""

from __future__ import annotations

import threading
from typing import Any

from strands.hooks import AfterToolsEvent, BeforeToolCallEvent, HookProvider, HookRegistry


class ToolBudget(HookProvider):
    """Caps a tick's tool calls: past the cap, calls are cancelled and counted, not run.

    `admit` is the one decision, shared by the Strands hook and an agent CLI's
    `PreToolUse` hook (whose calls may arrive from parallel tool runs: hence the lock).
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.executed = 0
        self.cancelled = 0
        self.exhausted = False
        self._lock = threading.Lock()

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Count every tool call before it runs and note when a batch met the cap."""
        registry.add_callback(BeforeToolCallEvent, self._before_call)
        registry.add_callback(AfterToolsEvent, self._after_batch)

    def admit(self) -> str | None:
        """Count one tool call: None when it may run, else why it is refused (past the cap)."""
        with self._lock:
            if self.executed >= self.cap:
                self.cancelled += 1
                return (
                    f"Not run: this tick's tool budget of {self.cap} calls is used up. "
                    "Answer with what you have."
                )
            self.executed += 1
            return None

    @property
    def met(self) -> bool:
        """A tool call was asked for, and the cap is reached: the tick's turn ends now."""
        return self.executed + self.cancelled > 0 and self.executed >= self.cap

    def stop_text(self) -> str:
        """The tick's answer when the cap ended it."""
        return (
            f"Stopped: the tool budget of {self.cap} calls for this tick is used up "
            f"({self.executed} run, {self.cancelled} refused)."
        )

    def _before_call(self, event: BeforeToolCallEvent) -> None:
        if event.cancel_tool:
            return  # another hook cancelled it: not an execution, not ours to count
        refused = self.admit()
        if refused is not None:
            event.cancel_tool = refused

    def _after_batch(self, event: AfterToolsEvent) -> None:
        if self.executed >= self.cap:
            self.exhausted = True
            event.end_turn = self.stop_text()
