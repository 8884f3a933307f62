"""A tick's counts, defined once: its model calls, tool calls and tokens.

`tickwork show`, `tick`, `ticks`, the API, the tick page and the tick's terminal event
all give these numbers, so which event adds to which count is said here alone
(`counted`), and every view derives its numbers from the same events: the ticks read
model as it folds them, the others by counting the tick's stream (`count_calls`).

- A model call is a call the tick booked: one `BudgetSpent`, exact or estimated, in any
  attempt. Every call that reached the upstream is booked (one a kill cut off, by the
  runner's estimate), so a call answered in the model's place before it was sent (a cap,
  the hard ceiling) is none.
- A tool call is one that ran: a `ToolCalled` that ended ok, in error, or killed with
  its tick. One the tool cap refused never ran: it is counted apart, as refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harness.contracts import BudgetSpent, StoredEvent, ToolCalled

CountName = Literal["model_calls", "estimated_calls", "tool_calls", "tool_calls_cancelled"]


def counted(event_type: str, data: Mapping[str, Any]) -> tuple[CountName, ...]:
    """The counts one event of a tick adds one to (none for most events)."""
    if event_type == BudgetSpent.type:
        return ("model_calls", "estimated_calls") if data.get("estimated") else ("model_calls",)
    if event_type == ToolCalled.type:
        return ("tool_calls_cancelled",) if data["status"] == "cancelled" else ("tool_calls",)
    return ()


@dataclass
class CallCounts:
    """A tick's calls and tokens as every view gives them."""

    model_calls: int = 0
    estimated_calls: int = 0
    tool_calls: int = 0
    tool_calls_cancelled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, event_type: str, data: Mapping[str, Any]) -> None:
        """Count one event of the tick."""
        for name in counted(event_type, data):
            setattr(self, name, getattr(self, name) + 1)
        if event_type == BudgetSpent.type:
            self.prompt_tokens += data["prompt_tokens"]
            self.completion_tokens += data["completion_tokens"]


def count_calls(events: Iterable[StoredEvent]) -> CallCounts:
    """The counts of a tick's events (its whole stream, or what of it has been read)."""
    counts = CallCounts()
    for event in events:
        counts.add(event.type, event.data)
    return counts


def calls_said(model_calls: int, tool_calls: int, refused: int) -> str:
    """A tick's calls for people, in the words every view uses."""
    tools = f"{tool_calls} tool call(s)" + (f" (+{refused} refused)" if refused else "")
    return f"{model_calls} model call(s), {tools}"
