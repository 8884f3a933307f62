"""The level's daily token budget, checked before every model call of a tick.

The payload brings the budget and the level's spend when the tick was prepared; before
each call the hook adds the `BudgetSpent` every tick of the level recorded since then (a
plain read of the log after a position: the worker folds no read model). Once the total
passes the budget the call is cancelled (`BeforeModelCallEvent.cancel`), its text becomes
the tick's answer and the tick ends with stop reason `budget`: the level overshoots by at
most the calls already in flight, one per running tick.
"""

from __future__ import annotations

from typing import Any

from strands.hooks import BeforeModelCallEvent, HookProvider, HookRegistry

from harness.contracts.payload import TickPayload
from harness.store import EventStore, StoreError
from workers.recorder import EventRecorder

BATCH = 1000


class DailyBudgetGuard(HookProvider):
    """Register it before the spend meter, which must see the calls this one cancels."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder
        self.budget = payload.budget
        self.position = self.budget.after_position if self.budget else 0
        self.spent = self.budget.spent_tokens if self.budget else 0
        self.stopped = False

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Check the budget before every model call."""
        registry.add_callback(BeforeModelCallEvent, self._before_call)

    def _before_call(self, event: BeforeModelCallEvent) -> None:
        if self.budget is None or event.cancel:
            return
        store = self.recorder.store
        if store is None:
            return
        try:
            self._add_recent_spend(store, self.budget.day)
        except StoreError:
            return  # unreadable: the runner's check before every attempt still holds
        if self.spent > self.budget.tokens:
            self.stopped = True
            event.cancel = (
                f"Stopped before the next model call: level {self.payload.level} has spent "
                f"{self.spent:,} of its {self.budget.tokens:,} tokens for {self.budget.day}."
            )

    def _add_recent_spend(self, store: EventStore, day: str) -> None:
        while batch := store.read_all(self.position, BATCH):
            for stored in batch:
                data = stored.data
                if (
                    stored.type == "BudgetSpent"
                    and data.get("level") == self.payload.level
                    and str(data.get("occurred_at", "")).startswith(day)
                ):
                    self.spent += int(data["prompt_tokens"]) + int(data["completion_tokens"])
            self.position = batch[-1].global_position
