"""A model's prices as plain data, and the arithmetic of a call's USD from its usage parts.

The one arithmetic both sides use: the worker books a call at the price its payload
carries (`CallPrice`, resolved by `harness.prices.PriceBook` when the tick is prepared,
so the worker never loads genai-prices), and the spend read models price summed tokens
the same way when a report or a rebuild asks for another card. Prices are linear within
a tier, so a sum of calls of one tier costs the sum of their costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

Billing = Literal["api", "subscription"]
"""How a call is paid for: `api` bills its list value (its tokens at its price);
`subscription` (an agent CLI on a plan) books its tokens and list value and bills 0."""


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens while a request's input tokens exceed `above`."""

    above: int
    input: float
    output: float
    cache_read: float | None
    cache_write: float | None
    per_request: float = 0.0
    """USD per call, on top of its tokens."""
    cache_write_1h: float | None = None
    """The rate of cache written for an hour (None: billed as any cache write)."""
    web_search: float | None = None
    """USD per server-side web search (None: searches are not billed apart)."""


@dataclass(frozen=True, slots=True)
class UsageParts:
    """What a call (or a sum of calls of one tier) is billed on.

    `prompt` includes the cached tokens, as OpenAI-compatible servers report it, and
    `cache_write_1h` is the part of `cache_write` written for an hour.
    """

    prompt: int
    completion: int
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    web_searches: int = 0
    requests: int = 0


def billed(list_usd: float | None, billing: str | None) -> float | None:
    """What a call worth `list_usd` adds to the bill: all of it on `api`, none on a plan.

    None stays None (unpriced) on `api`; `billing` None is spend booked before tickwork
    kept it, which was `api`.
    """
    return 0.0 if billing == "subscription" else list_usd


def usd_sum(total: float | None, more: float | None) -> float | None:
    """Two amounts of USD added: unknown (None) when either is, as a sum with an unpriced part."""
    return None if total is None or more is None else total + more


def rates_at(ladder: tuple[Rates, ...], tier: int) -> Rates:
    """The rates of a tier (the highest threshold its prompts pass, -1 below them all)."""
    rates = ladder[0]
    for step in ladder[1:]:
        if tier >= step.above:
            rates = step
    return rates


def usd(rates: Rates, usage: UsageParts) -> float:
    """USD of `usage` at `rates`: a cache price left out bills those tokens as input."""
    uncached = usage.prompt
    total = usage.completion * rates.output
    if rates.cache_read is not None:
        uncached -= usage.cache_read
        total += usage.cache_read * rates.cache_read
    if rates.cache_write is not None:
        uncached -= usage.cache_write
        hour = usage.cache_write_1h if rates.cache_write_1h is not None else 0
        total += (usage.cache_write - hour) * rates.cache_write
        total += hour * (rates.cache_write_1h or 0.0)
    searches = usage.web_searches * rates.web_search if rates.web_search is not None else 0.0
    return (
        (total + max(uncached, 0) * rates.input) / 1_000_000
        + usage.requests * rates.per_request
        + searches
    )


class CallPrice(BaseModel):
    """A model's prices for a tick's calls on one target, as looked up when it was prepared.

    `source` says who set them (`catalog:<target>`, `config`, `genai-prices@<version>`,
    `unpriced`); `ladder` is None when nothing prices the model. `billing`: how the tick's
    calls on the target are paid for (the level's setting, else the target's).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    target: str | None = None
    source: str
    ladder: tuple[Rates, ...] | None = None
    billing: Billing = "api"

    def cost(self, usage: UsageParts) -> float | None:
        """USD of one call at its own tier (its prompt's), None when unpriced."""
        if self.ladder is None:
            return None
        rates = self.ladder[0]
        for step in self.ladder[1:]:
            if usage.prompt > step.above:
                rates = step
        return usd(rates, usage)
