"""Why a tick cost what it did: each call's tokens and cost, and what grew its context.

Each `BudgetSpent` of a tick is one call: its input (cache reads and writes among it),
its output (reasoning among it), its server tool uses, and its USD as the price book
prices it. A conversation is sent whole at every call, so what a call adds (its answer,
the tool results it asked for) is paid again by every later call of its attempt: the
input grows from call to call, and a large tool result early in a long tick can cost
more than any answer. `spend_per_call` says how the input grew and which tool results grew
it most, by the method `METHOD` states (the output's legend). It reads one tick's
stream, the events `tickwork show` and the tick page already hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel

from harness.contracts import (
    Billing,
    BudgetSpent,
    TickStarted,
    ToolCalled,
    TranscriptEntry,
    usd_sum,
)
from harness.prices import PriceBook, format_usd

METHOD = (
    "Growth is a call's input minus the input of the call before it in the same attempt. "
    "The previous call's output is the model's own answer sent back, so the rest of the "
    "growth is shared among the tool results recorded between the two calls, in proportion "
    "to each result's size in the transcript (evenly when no transcript is kept). A tool "
    "result stays in the conversation, so its share is input to every later call of its "
    "attempt: 'added' is the share times those calls. Cache reads and writes are part of "
    "input; reasoning is part of output."
)
"""How input growth is attributed, printed as the legend of every view of it."""


class Event(Protocol):
    """What this module reads of an event: a stored one, or the API's."""

    @property
    def type(self) -> str:
        """The event's type name."""
        ...

    @property
    def data(self) -> dict[str, Any]:
        """The event's fields as stored."""
        ...


SPEND_COLUMNS = (
    "call",
    "time",
    "input",
    "growth",
    "cache rd",
    "cache wr",
    "wr 1h",
    "output",
    "reasoning",
    "searches",
    "list USD",
    "billed USD",
)
"""The per-call table's columns, as every view of it heads them (`CallCost.cells`)."""


def _count(value: int | None, signed: bool = False) -> str:
    """A count as the table shows it: `-` when not reported."""
    if value is None:
        return "-"
    return f"{value:+,}" if signed else f"{value:,}"


class CallCost(BaseModel):
    """One booked call: its parts, its USD, and how its input grew over the call before."""

    call: int
    """The call's number in the tick, from 1, in booking order (attempts included)."""
    at: datetime
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    reasoning_tokens: int | None = None
    web_search_requests: int | None = None
    estimated: bool = False
    usd: float | None = None
    """The call's list value; None: the model is unpriced."""
    billing: Billing = "api"
    billed_usd: float | None = None
    """What the call was billed: `usd` on `api`, 0 on a subscription (None: unpriced)."""
    growth: int | None = None
    """Input tokens over the previous call of its attempt (None: its attempt's first)."""
    tool_results: list[str] = []
    """The tools whose results were recorded since the previous call, in order."""

    def cells(self) -> tuple[str, ...]:
        """The call's row of the table, under `SPEND_COLUMNS`."""
        return (
            str(self.call),
            f"{self.at:%H:%M:%S}",
            _count(self.prompt_tokens),
            _count(self.growth, signed=True),
            _count(self.cache_read_tokens),
            _count(self.cache_write_tokens),
            _count(self.cache_write_1h_tokens),
            _count(self.completion_tokens),
            _count(self.reasoning_tokens),
            _count(self.web_search_requests),
            format_usd(self.usd),
            format_usd(self.billed_usd),
        )


class ToolInput(BaseModel):
    """One tool result and the input it added to the calls after it."""

    tool: str
    after_call: int
    """The call whose answer asked for it."""
    share: int
    """Of the next call's input growth, the tokens attributed to this result."""
    later_calls: int = 0
    """The calls of its attempt that sent it again (the next call and each after it)."""
    added: int = 0
    """`share` times `later_calls`: the input tokens it cost the tick."""


class TickSpend(BaseModel):
    """A tick's calls and the tool results that grew its input, most input added first."""

    tick_id: str
    calls: list[CallCost]
    tool_results: list[ToolInput]
    usd: float | None
    """All calls' list value; None when any call's model is unpriced."""
    billed_usd: float | None = None
    """What all calls were billed (None when an unpriced call is billed on `api`)."""
    method: str = METHOD


@dataclass
class _Result:
    tool: str
    weight: int


@dataclass
class _Window:
    """What was recorded since the attempt's previous call."""

    transcript: list[_Result] = field(default_factory=list)
    called: list[_Result] = field(default_factory=list)

    def results(self) -> list[_Result]:
        """The transcript's tool items when kept (sized), else the tool calls (even)."""
        return self.transcript or self.called


def spend_per_call(tick_id: str, events: Iterable[Event], prices: PriceBook) -> TickSpend:
    """The tick's spend per call and the tool results that added the most input."""
    calls: list[CallCost] = []
    attempt_of: list[int] = []
    tools: list[tuple[ToolInput, int]] = []
    attempt, window, previous = 0, _Window(), None
    for event in events:
        data = event.data
        if event.type == TickStarted.type:
            attempt, window, previous = attempt + 1, _Window(), None
        elif event.type == TranscriptEntry.type and data.get("kind") == "tool":
            size = len(data.get("text") or "") + int(data.get("cut_chars") or 0)
            window.transcript.append(_Result(str(data.get("tool") or "?"), max(size, 1)))
        elif event.type == ToolCalled.type:
            window.called.append(_Result(str(data["name"]), 1))
        elif event.type == BudgetSpent.type:
            cost = _call(len(calls) + 1, data, prices, previous)
            results = window.results()
            cost.tool_results = [result.tool for result in results]
            if previous is not None and cost.growth is not None:
                shares = _shares(cost.growth - previous.completion_tokens, results)
                tools += [
                    (ToolInput(tool=tool, after_call=previous.call, share=share), attempt)
                    for tool, share in shares
                ]
            calls.append(cost)
            attempt_of.append(attempt)
            window, previous = _Window(), cost
    for tool, its_attempt in tools:
        tool.later_calls = sum(
            1
            for call, of in zip(calls, attempt_of, strict=True)
            if of == its_attempt and call.call > tool.after_call
        )
        tool.added = tool.share * tool.later_calls
    ranked = sorted((tool for tool, _ in tools), key=lambda tool: -tool.added)
    return TickSpend(
        tick_id=tick_id,
        calls=calls,
        tool_results=ranked,
        usd=_total(call.usd for call in calls),
        billed_usd=_total(call.billed_usd for call in calls),
    )


def _total(usds: Iterable[float | None]) -> float | None:
    """The calls' USD added up, None when any of them is unknown."""
    total: float | None = 0.0
    for usd in usds:
        total = usd_sum(total, usd)
    return total


def _call(
    number: int, data: dict[str, Any], prices: PriceBook, previous: CallCost | None
) -> CallCost:
    """One `BudgetSpent` as a call: its parts and USD, its growth over `previous`."""
    spent = BudgetSpent.model_validate(data)
    if spent.price_source is None:
        # Booked before tickwork recorded prices: priced as a worker books a call today.
        day = spent.occurred_at.date().isoformat()
        spent = spent.priced(prices.call_price(spent.model, day, spent.target))
    return CallCost(
        call=number,
        at=spent.occurred_at,
        model=spent.model,
        prompt_tokens=spent.prompt_tokens,
        completion_tokens=spent.completion_tokens,
        cache_read_tokens=spent.cache_read_tokens,
        cache_write_tokens=spent.cache_write_tokens,
        cache_write_1h_tokens=spent.cache_write_1h_tokens,
        reasoning_tokens=spent.reasoning_tokens,
        web_search_requests=spent.web_search_requests,
        estimated=spent.estimated,
        usd=spent.cost_usd,
        billing=spent.billing,
        billed_usd=spent.billed_usd,
        growth=None if previous is None else spent.prompt_tokens - previous.prompt_tokens,
    )


def _shares(growth: int, results: list[_Result]) -> list[tuple[str, int]]:
    """`growth` (none when it shrank) split among `results` by weight, whole tokens."""
    weights = sum(result.weight for result in results)
    if not weights:
        return []
    growth = max(growth, 0)
    return [(result.tool, growth * result.weight // weights) for result in results]


def usd_words(spent: TickSpend) -> str:
    """`USD 0.0149 list value, USD 0 billed`: a tick's two sums, as every view says them."""
    return f"USD {format_usd(spent.usd)} list value, USD {format_usd(spent.billed_usd)} billed"
