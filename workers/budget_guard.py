"""The budgets holding a tick (tokens and USD, any scope and window), checked before every call.

The payload brings the budgets, each with its window's spend when the tick was prepared,
and the reservations of the other ticks in flight; before each call the hook reads the
log after that position (a plain read: the worker folds no read model), adding every
`BudgetSpent` recorded since to each budget whose scope holds the call's level and
target and whose window holds it, and following the reservations other ticks make
(`TickScheduled`) and release (their terminal event). Once a budget's spend plus the
reservations of the ticks in its scope pass it, the call is cancelled
(`BeforeModelCallEvent.cancel`), its text becomes the tick's answer and the tick ends
with stop reason `budget`: a budget is overshot by at most the calls already in flight,
one per running tick, whichever process or host runs them.

A budget scoped to a catalog target or provider stops only calls to its targets; one
whose window ended while the tick ran starts the next window from zero. A call billed on
a subscription (the payload's prices say so per target) adds nothing billed: a `usd`
limit never stops it, a `list_usd` one (the spend's list value) does. A `reroute`
budget does not stop a call while the route has another candidate: the lane passes its
targets over when it chooses (`spent_for`), and only its last candidate is stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from strands.hooks import BeforeModelCallEvent, HookProvider, HookRegistry

from harness.contracts import (
    TERMINAL_TYPES,
    Billing,
    BudgetRule,
    BudgetSpent,
    StoredEvent,
    TickBudgets,
    TickPayload,
    TickScheduled,
    billed,
    usd_sum,
)
from harness.prices import format_usd
from harness.store import EventStore, StoreError
from workers.recorder import EventRecorder

BATCH = 1000
FOLLOWED = (BudgetSpent.type, TickScheduled.type, *sorted(TERMINAL_TYPES))


@dataclass
class _Tally:
    """One budget's window and what it has spent in it, as far as the worker has read."""

    rule: BudgetRule
    start: datetime
    end: datetime
    tokens: int
    usd: float | None
    """Billed; None once a call of a model without rates was counted: USD is then unknown."""
    list_usd: float | None
    """The list value, billed or not; None as `usd`."""

    def roll(self, now: datetime) -> None:
        """A window that ended while the tick ran: the next one starts from zero."""
        if now >= self.end:
            window = self.rule.window_at(now)
            self.start, self.end, self.tokens = window.start, window.end, 0
            self.usd = self.list_usd = 0.0


class BudgetGuard(HookProvider):
    """Register it before the spend meter, which must see the calls this one cancels.

    `target`: the catalog target the next call goes to (None without a route).
    """

    def __init__(
        self,
        payload: TickPayload,
        recorder: EventRecorder,
        target: Callable[[], str | None] = lambda: None,
        last_candidate: Callable[[], bool] = lambda: True,
    ) -> None:
        self.payload = payload
        self.recorder = recorder
        self.target = target
        self.last_candidate = last_candidate
        """Whether the walk has no candidate left to reroute to (`reroute` budgets stop it)."""
        self.budget: TickBudgets | None = payload.budget
        self.position = self.budget.after_position if self.budget else 0
        self.tallies = [
            _Tally(
                data.rule(),
                data.window_start,
                data.window_end,
                data.spent_tokens,
                data.spent_usd,
                data.spent_list_usd,
            )
            for data in (self.budget.budgets if self.budget else [])
        ]
        self.billing = payload.billings()
        """How the tick's calls on each target are paid for (`api` for one not named)."""
        self.reservations = dict(self.budget.reservations) if self.budget else {}
        self.stopped = False

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Check the budgets before every model call."""
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
        now = datetime.now(UTC)
        for tally in self.tallies:
            tally.roll(now)
        try:
            self._follow(store)
        except StoreError:
            return None  # unreadable: the runner's check before every attempt still holds
        target = self.target()
        for tally in self.tallies:
            if not tally.rule.covers(self.payload.level, target):
                continue
            if tally.rule.action == "reroute" and not self.last_candidate():
                continue  # the walk passes the target over at its next choice
            passed = self._passed(budget, tally, self.billing.get(target, "api"))
            if passed is not None:
                self.stopped = True
                return (
                    f"Stopped before the next model call: budget {tally.rule.name} "
                    f"({tally.rule.scope}, {tally.rule.window}) has {passed}."
                )
        return None

    def spent_for(self, target: str) -> str | None:
        """Why a `reroute` budget holding `target` rules it out now, or None.

        The lane passes such a candidate over (`RouteFallback` reason `budget: …`); an
        unreadable store rules nothing out (the call's own check still holds).
        """
        budget, store = self.budget, self.recorder.store
        if budget is None or store is None:
            return None
        try:
            self._follow(store)
        except StoreError:
            return None
        for tally in self.tallies:
            if tally.rule.action == "reroute" and tally.rule.covers(self.payload.level, target):
                passed = self._passed(budget, tally, self.billing.get(target, "api"))
                if passed is not None:
                    return f"budget {tally.rule.name} ({tally.rule.scope}) has {passed}"
        return None

    def _passed(self, budget: TickBudgets, tally: _Tally, billing: Billing) -> str | None:
        """What the budget's spend and reservations passed, or None while within it.

        A call billed on a subscription is held by the list value, not by what is billed.
        """
        rule = tally.rule
        reserved = sum(
            tokens for level, tokens in self.reservations.values() if rule.covers_level(level)
        )
        if rule.tokens is not None and tally.tokens + reserved > rule.tokens:
            return (
                f"spent {tally.tokens:,} tokens and holds {reserved:,} more in reservations, "
                f"of its {rule.tokens:,}"
            )
        rates = budget.rates.get(budget.reserve_model or "")
        held = rates.cost(reserved, 0) if rates else 0.0
        for kind, limit in rule.usd_limits(billing):
            spent: float | None = getattr(tally, kind)
            unit = "billed USD" if kind == "usd" else "list value USD"
            if spent is None or (reserved and rates is None):
                return f"spent on a model without a price: its {unit} {limit:g} counts as passed"
            total = spent + held
            if total > limit:
                return (
                    f"reached {unit} {format_usd(total)} with its reservations, "
                    f"of its {unit} {limit:g}"
                )
        return None

    def _follow(self, store: EventStore) -> None:
        # Only what moves spend or reservations: every tick's transcript and call records
        # pass through the log too, and reading them before each call would be waste.
        while batch := store.read_all(self.position, BATCH, FOLLOWED):
            for stored in batch:
                self._apply(stored)
            self.position = batch[-1].global_position
            if len(batch) < BATCH:
                return  # a short batch is the end: no second query to learn it

    def _apply(self, stored: StoredEvent) -> None:
        data = stored.data
        tick_id = data.get("tick_id")
        if stored.type == BudgetSpent.type:
            self._spent(data)
        elif stored.type == TickScheduled.type and tick_id != self.payload.tick_id:
            self.reservations[str(tick_id)] = (
                str(data.get("level")),
                int(data.get("reserved_tokens", 0)),
            )
        elif stored.type in TERMINAL_TYPES:
            self.reservations.pop(str(tick_id), None)

    def _spent(self, data: dict[str, Any]) -> None:
        level, target = str(data.get("level")), data.get("target")
        at = datetime.fromisoformat(str(data["occurred_at"]).replace("Z", "+00:00"))
        prompt, completion = int(data["prompt_tokens"]), int(data["completion_tokens"])
        rates = self.budget.rates.get(data["model"]) if self.budget else None
        cost = None if rates is None else rates.cost(prompt, completion)
        on_the_bill = billed(cost, data.get("billing"))
        for tally in self.tallies:
            if not (tally.start <= at < tally.end and tally.rule.covers(level, target)):
                continue
            tally.tokens += prompt + completion
            tally.usd = usd_sum(tally.usd, on_the_bill)
            tally.list_usd = usd_sum(tally.list_usd, cost)
