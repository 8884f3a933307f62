"""The level's daily budgets (tokens and USD), checked before every model call of a tick.

The payload brings the budgets, the level's spend when the tick was prepared and the
reservations of its other ticks in flight; before each call the hook reads the log after
that position (a plain read: the worker folds no read model), adding the `BudgetSpent`
every tick of the level recorded since, and following the reservations its other ticks
make (`TickScheduled`) and release (their terminal event). Once spend plus reservations
pass a budget the call is cancelled (`BeforeModelCallEvent.cancel`), its text becomes the
tick's answer and the tick ends with stop reason `budget`: the level overshoots by at
most the calls already in flight, one per running tick.
"""

from __future__ import annotations

from typing import Any

from strands.hooks import BeforeModelCallEvent, HookProvider, HookRegistry

from harness.contracts import BudgetSpent, TickScheduled
from harness.contracts.events import TERMINAL_TYPES
from harness.contracts.payload import DailyBudget, TickPayload
from harness.contracts.records import StoredEvent
from harness.prices import format_usd
from harness.store import EventStore, StoreError
from workers.recorder import EventRecorder

BATCH = 1000
FOLLOWED = (BudgetSpent.type, TickScheduled.type, *sorted(TERMINAL_TYPES))


class DailyBudgetGuard(HookProvider):
    """Register it before the spend meter, which must see the calls this one cancels."""

    def __init__(self, payload: TickPayload, recorder: EventRecorder) -> None:
        self.payload = payload
        self.recorder = recorder
        self.budget = payload.budget
        self.position = self.budget.after_position if self.budget else 0
        self.spent = self.budget.spent_tokens if self.budget else 0
        self.spent_usd: float | None = self.budget.spent_usd if self.budget else 0.0
        """None once a call of a model without rates was counted: USD is then unknown."""
        self.reservations = dict(self.budget.reservations) if self.budget else {}
        self.stopped = False

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Check the budget before every model call."""
        registry.add_callback(BeforeModelCallEvent, self._before_call)

    def _before_call(self, event: BeforeModelCallEvent) -> None:
        if event.cancel:
            return
        stop = self.check()
        if stop is not None:
            event.cancel = stop

    def check(self) -> str | None:
        """Before a model call: None while within budget, else why no call is made (stopped)."""
        budget = self.budget
        if budget is None:
            return None
        store = self.recorder.store
        if store is None:
            return None
        try:
            self._follow(store, budget.day)
        except StoreError:
            return None  # unreadable: the runner's check before every attempt still holds
        passed = self._passed(budget)
        if passed is None:
            return None
        self.stopped = True
        return (
            f"Stopped before the next model call: level {self.payload.level} has spent "
            f"{passed} for {budget.day}."
        )

    def _passed(self, budget: DailyBudget) -> str | None:
        """What the level's spend and reservations passed, or None while within budget."""
        reserved = sum(self.reservations.values())
        if budget.tokens is not None and self.spent + reserved > budget.tokens:
            return (
                f"{self.spent:,} tokens and holds {reserved:,} more in reservations, "
                f"of its {budget.tokens:,}"
            )
        if budget.usd is None:
            return None
        rates = budget.rates.get(budget.reserve_model or "")
        if self.spent_usd is None or (reserved and rates is None):
            return f"on a model without a price: its USD {budget.usd:g} budget counts as passed"
        total = self.spent_usd + (rates.cost(reserved, 0) if rates else 0.0)
        if total > budget.usd:
            return f"USD {format_usd(total)} with its reservations, of its USD {budget.usd:g}"
        return None

    def _follow(self, store: EventStore, day: str) -> None:
        # Only what moves spend or reservations: every tick's transcript and call records
        # pass through the log too, and reading them before each call would be waste.
        while batch := store.read_all(self.position, BATCH, FOLLOWED):
            for stored in batch:
                if stored.data.get("level") == self.payload.level:
                    self._apply(stored, day)
            self.position = batch[-1].global_position

    def _apply(self, stored: StoredEvent, day: str) -> None:
        data = stored.data
        tick_id = data.get("tick_id")
        if stored.type == BudgetSpent.type and str(data.get("occurred_at", "")).startswith(day):
            prompt, completion = int(data["prompt_tokens"]), int(data["completion_tokens"])
            self.spent += prompt + completion
            rates = self.budget.rates.get(data["model"]) if self.budget else None
            if self.spent_usd is not None:
                self.spent_usd = (
                    None if rates is None else self.spent_usd + rates.cost(prompt, completion)
                )
        elif stored.type == TickScheduled.type and tick_id != self.payload.tick_id:
            self.reservations[str(tick_id)] = int(data.get("reserved_tokens", 0))
        elif stored.type in TERMINAL_TYPES:
            self.reservations.pop(str(tick_id), None)
