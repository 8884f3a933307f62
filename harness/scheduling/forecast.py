"""What a run of slots will cost before it runs: a level's tick cost and the budgets it crosses.

A level's tick is forecast at the median of its ticks that ran over the last
`HISTORY` (tokens and USD each their own median, from the ticks and tick_spend read
models, read along the level's index: the cost of those days, not of the history); a
level with none costs its reservation (`reserve_tokens`, priced at its model), and the
forecast says so. Every budget holding the level is then walked slot by slot from its
current window's spend and the reservations of the ticks in flight in its scope: the
slot whose tick would pass its limit is where the run crosses it.

The spend of a run lands in the windows it runs in, which a long run may outlast; the
forecast counts it all in the current windows, the side that stops sooner.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from harness.contracts import Billing, BudgetRule
from harness.prices import PriceBook, format_usd
from harness.projections import TickCost, WindowSpend, tick_costs_since
from harness.scheduling.budget import Budgets, held_by
from harness.store import EventStore

HISTORY = timedelta(days=7)
"""How far back a level's ticks set its forecast."""
REFUSING = ("stop", "pause")
"""Actions of a budget that stop the slots it is crossed at (`pause` pauses the level too):
a run forecast to cross one is refused unless forced."""


@dataclass(frozen=True)
class TickForecast:
    """What one tick of a level is forecast to cost, and from what."""

    tokens: int
    usd: float | None
    """None: the level's spend, or its model, has no price."""
    ticks: int
    """Ticks of the last HISTORY it is the median of; 0: the level's reservation."""

    @property
    def source(self) -> str:
        """Where the figure comes from, in words."""
        if self.ticks:
            return f"median of {self.ticks} tick(s) over the last {HISTORY.days} days"
        return "the level's reservation (no tick in the last 7 days)"


@dataclass(frozen=True)
class Crossing:
    """A budget the run would pass: at which slot, and its figures."""

    budget: str
    action: str
    window_start: datetime
    window_end: datetime
    spent_tokens: int
    spent_usd: float | None
    reserved_tokens: int
    """Held by the ticks in flight in its scope."""
    limit_tokens: int | None
    limit_usd: float | None
    fits: int
    """Slots of the run the budget can still pay for."""
    slot: datetime
    """The first slot whose tick would pass the limit."""

    def words(self) -> str:
        """The crossing in one line, for people: `crosses ` goes before it."""
        limits = [
            *([f"{self.limit_tokens:,} tokens"] if self.limit_tokens is not None else []),
            *([f"USD {format_usd(self.limit_usd)}"] if self.limit_usd is not None else []),
        ]
        used = f"{self.spent_tokens:,} tokens"
        if self.limit_usd is not None:
            used += f" (USD {format_usd(self.spent_usd)})"
        return (
            f"budget {self.budget} ({self.action}, window {self.window_start:%Y-%m-%d %H:%M}"
            f" to {self.window_end:%Y-%m-%d %H:%M} UTC) at slot {self.slot:%Y-%m-%d %H:%M:%S}"
            f" UTC, after {self.fits:,} slot(s) it can pay for: {used} used, "
            f"{self.reserved_tokens:,} reserved by ticks in flight, the limit "
            f"{' and '.join(limits)}"
        )


@dataclass(frozen=True)
class RunForecast:
    """The slots a run would take, what they are forecast to cost, the budgets they cross."""

    level: str
    slots: list[datetime]
    tick: TickForecast
    crossings: list[Crossing]
    left_alone: int = 0
    """Slots of the range that have a tick already (a backfill does not run them)."""

    @property
    def tokens(self) -> int:
        """Tokens of the whole run."""
        return self.tick.tokens * len(self.slots)

    @property
    def usd(self) -> float | None:
        """USD of the whole run (None: not priced)."""
        return None if self.tick.usd is None else self.tick.usd * len(self.slots)

    @property
    def refusing(self) -> Crossing | None:
        """The first crossed budget that would stop the run's slots, if any."""
        return next((c for c in self.crossings if c.action in REFUSING), None)

    @property
    def fits(self) -> int:
        """Slots of the run every budget holding the level can pay for."""
        return min((c.fits for c in self.crossings), default=len(self.slots))


def tick_forecast(
    store: EventStore,
    prices: PriceBook,
    level: str,
    reserve_tokens: int,
    model: str | None,
    at: datetime,
) -> TickForecast:
    """The level's median tick over the HISTORY before `at`, else its reservation."""
    costs = tick_costs_since(store, prices, level, at - HISTORY)
    if costs:
        return TickForecast(_median_tokens(costs), _median_usd(costs), len(costs))
    usd = prices.cost(model, at.date().isoformat(), -1, reserve_tokens, 0) if model else None
    return TickForecast(reserve_tokens, usd, 0)


def _median_tokens(costs: Sequence[TickCost]) -> int:
    return round(statistics.median(cost.tokens for cost in costs))


def _median_usd(costs: Sequence[TickCost]) -> float | None:
    priced = [cost.usd for cost in costs if cost.usd is not None]
    return statistics.median(priced) if len(priced) == len(costs) else None


def run_forecast(budgets: Budgets, level: str, slots: list[datetime], at: datetime) -> RunForecast:
    """The forecast of running `slots` of `level` from `at`, against its budgets' windows."""
    config = budgets.settings.levels[level]
    tick = tick_forecast(
        budgets.store, budgets.prices, level, config.reserve_tokens, config.model, at
    )
    rules = budgets.rules_for(level)
    if not rules:
        return RunForecast(level, slots, tick, [])
    spent = budgets.spent(rules, at)
    held = budgets.held()
    crossings = []
    billing = budgets.billing(level)
    for rule in rules:
        reserved = held_by(rule, held)
        used = spent[rule.name]
        fits = _slots_paid(rule, budgets.prices, used, billing, reserved, config.model, tick, at)
        if fits < len(slots):
            first = int(fits)
            window = rule.window_at(at)
            crossings.append(
                Crossing(
                    rule.name,
                    rule.action,
                    window.start,
                    window.end,
                    used.tokens,
                    used.usd,
                    reserved,
                    rule.tokens,
                    rule.usd,
                    first,
                    slots[first],
                )
            )
    return RunForecast(level, slots, tick, crossings)


def _slots_paid(
    rule: BudgetRule,
    prices: PriceBook,
    used: WindowSpend,
    billing: Billing,
    reserved: int,
    model: str | None,
    tick: TickForecast,
    at: datetime,
) -> float:
    """How many forecast ticks the budget's window can still pay (inf: no limit binds).

    A USD budget with spend, reservations or a tick it cannot price pays none (the side
    a budget check errs to, `harness.scheduling.budget.within`); a `usd` limit (billed)
    does not hold a level billed on a subscription, a `list_usd` one does.
    """
    fits: float = math.inf
    if rule.tokens is not None:
        room = rule.tokens - used.tokens - reserved
        fits = max(0, room // tick.tokens) if tick.tokens > 0 else (math.inf if room >= 0 else 0)
    limits = rule.usd_limits(billing)
    if not limits:
        return fits
    day = at.date().isoformat()
    held = (prices.cost(model, day, -1, reserved, 0) if model else None) if reserved else 0.0
    for unit, limit in limits:
        usd = getattr(used, unit)
        if usd is None or held is None or tick.usd is None:
            return 0
        room_usd = limit - usd - held
        paid = (
            math.floor(room_usd / tick.usd + 1e-9)
            if tick.usd > 0
            else (math.inf if room_usd >= 0 else 0)
        )
        fits = min(fits, max(0, paid))
    return fits
