"""A model call's events, built in one place for every agent kind and whoever books the call.

Whoever watches a call says what it saw as `CallFacts`: the Strands spend hook from the
SDK's events, an agent CLI's tick governor from the answer it relays, the runner from the
start a killed worker left (`cut_off`). `CallBooking` turns them into the tick's
`ModelCallStarted` (before the call is sent), `BudgetSpent` and `ModelCalled` (one commit,
when it ended), so a call reads the same in the ledger and the story whichever kind made it.
A call refused before any answer began produced nothing to bill: it gets a `ModelCalled`
with its error and no `BudgetSpent`. Any other call is booked, estimated when the upstream
reported no usage: the upstream may bill an answer that began, even one cut off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid5

from harness.contracts import (
    Billing,
    BudgetSpent,
    CallPrice,
    FailureClass,
    ModelCalled,
    ModelCallStarted,
    StoredEvent,
    TickEvent,
    TickPayload,
    capped,
)

Source = Literal["worker", "runner"]
"""Who booked a tick's call: its worker, or the runner for a call the worker left in flight."""
ERROR_CHARS = 300
"""A model call's error text is a hint for the reader; the tick's result keeps the whole."""
CUT_OFF_NAMESPACE = UUID("5a4f3c0e-9d1b-4c55-8a57-0c7d2b1e6f12")
"""Namespace of the ids of cut-off bookings, derived from the id of the call's start: the
runner and a reconciling service that both book one call record it once."""


@dataclass(frozen=True)
class Refusal:
    """Why a call failed: its error's class, the tick's failure class and a short message."""

    error_class: str
    failure_class: FailureClass
    message: str


@dataclass(frozen=True)
class CallFacts:
    """What one model call came to, as whoever watched it saw it."""

    model: str
    call: int
    """The call's number in its worker process, from 1: its `ModelCallStarted`'s."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    web_search_requests: int | None = None
    estimated: bool = False
    """The upstream reported no usage: the tokens are estimated from sizes."""
    billed: bool = True
    """False for a call refused before any answer began (nothing to bill)."""
    stop_reason: str | None = None
    first_token_ms: float | None = None
    duration_ms: float = 0.0
    wait_ms: float = 0.0
    attempt: int = 1
    target: str | None = None
    provider: str | None = None
    refusal: Refusal | None = None


@dataclass(frozen=True)
class CallBooking:
    """The calls of one tick, booked as its events."""

    tick_id: str
    level: str
    template_hash: str | None = None
    prices: Mapping[tuple[str, str | None], CallPrice] = field(default_factory=dict)
    """The tick's prices by (model, target), looked up when it was prepared: a call books
    its USD and their source with a dictionary lookup and a few multiplications."""
    billing: Mapping[str | None, Billing] = field(default_factory=dict)
    """How the tick's calls on each target are paid for, whatever model a call names (an
    agent CLI may call a model the payload has no price for): `api` for one not named."""

    @classmethod
    def of(cls, payload: TickPayload) -> CallBooking:
        """The booking of the tick `payload` runs, at the prices and billing it carries."""
        prices = {(price.model, price.target): price for price in payload.prices}
        billings = payload.billings()
        return cls(payload.tick_id, payload.level, payload.template_hash, prices, billings)

    def started(
        self, call: int, model: str, estimated_input_tokens: int, target: str | None = None
    ) -> ModelCallStarted:
        """The call to `target` about to be sent, recorded before it is (`cut_off` books it)."""
        return ModelCallStarted(
            tick_id=self.tick_id,
            level=self.level,
            call=call,
            model=model,
            estimated_input_tokens=estimated_input_tokens,
            template_hash=self.template_hash,
            billing=self.billing.get(target, "api"),
        )

    def ended(self, facts: CallFacts) -> list[TickEvent]:
        """The call's spend (unless it was refused) and its record, for one commit."""
        if not facts.billed:
            return [self._called(facts, None)]
        spent = self.spent(facts)
        return [spent, self._called(facts, spent)]

    def spent(self, facts: CallFacts, source: Source = "worker", **identity: Any) -> BudgetSpent:
        """The call's spend as `source` books it; `identity`: a fixed `event_id`, `occurred_at`.

        Priced at the tick's price of its model and target; a call of neither (a target
        whose prices the payload does not carry) is booked without and priced when read.
        """
        spent = BudgetSpent(
            **identity,
            tick_id=self.tick_id,
            level=self.level,
            model=facts.model,
            prompt_tokens=facts.prompt_tokens,
            completion_tokens=facts.completion_tokens,
            cache_read_tokens=facts.cache_read_tokens,
            cache_write_tokens=facts.cache_write_tokens,
            reasoning_tokens=facts.reasoning_tokens,
            cache_write_1h_tokens=facts.cache_write_1h_tokens,
            web_search_requests=facts.web_search_requests,
            estimated=facts.estimated,
            source=source,
            template_hash=self.template_hash,
            target=facts.target,
            billing=self.billing.get(facts.target, "api"),
        )
        return spent.priced(self.prices.get((facts.model, facts.target)))

    def _called(self, facts: CallFacts, spent: BudgetSpent | None) -> ModelCalled:
        refusal = facts.refusal
        return ModelCalled(
            tick_id=self.tick_id,
            level=self.level,
            model=facts.model,
            target=facts.target,
            provider=facts.provider,
            call=facts.call,
            attempt=facts.attempt,
            duration_ms=facts.duration_ms,
            wait_ms=facts.wait_ms,
            first_token_ms=facts.first_token_ms,
            stop_reason=facts.stop_reason,
            error_class=refusal.error_class if refusal else None,
            failure_class=refusal.failure_class if refusal else None,
            error=capped(refusal.message, ERROR_CHARS)[0] if refusal else None,
            prompt_tokens=spent.prompt_tokens if spent else 0,
            completion_tokens=spent.completion_tokens if spent else 0,
            estimated=spent.estimated if spent else False,
            budget_event_id=spent.event_id if spent else None,
            template_hash=self.template_hash,
        )


def cut_off(start: StoredEvent, price: CallPrice | None = None) -> BudgetSpent:
    """The estimated spend of a call a killed worker left in flight, from its start.

    Its input as the worker estimated it, no output (nothing of it was seen), booked by
    the runner (`harness.execution.cutoff` says which calls) under an id derived from the
    start's, at `price` (the start names no target: its model's price without one),
    billed as the start says its target bills.
    """
    data = start.data
    prices: dict[tuple[str, str | None], CallPrice] = {}
    if price is not None:
        prices[price.model, None] = price
    billing: dict[str | None, Billing] = {None: data.get("billing", "api")}
    booking = CallBooking(
        data["tick_id"], data["level"], data.get("template_hash"), prices, billing
    )
    facts = CallFacts(
        model=data["model"],
        call=data["call"],
        prompt_tokens=data["estimated_input_tokens"],
        estimated=True,
    )
    return booking.spent(
        facts,
        "runner",
        event_id=uuid5(CUT_OFF_NAMESPACE, str(start.event_id)),
        occurred_at=datetime.fromisoformat(data["occurred_at"]),
    )
