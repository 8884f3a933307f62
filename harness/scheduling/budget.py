"""Daily budgets per level, read from the spend projection, with reservations.

A tick about to start reserves `reserve_tokens` (priced at the level model's rates for a
USD budget) until it ends. The reservation is written into the tick's `TickScheduled`
event, so every replica on the store sees it while the tick is in flight and it ends by
itself with the tick's terminal event (a crashed scheduler leaks nothing). Within one
wave of slots, decisions taken before the claim is written are held in memory: five ticks
fired together cannot overshoot the budget by five ticks' worth.

Two replicas deciding for different slots of one level in the same few milliseconds may
each miss the other's reservation when deciding; the claim settles it. Claims are
ordered by global position: `Budgets.confirm` waits until every claim before its own is
readable (on PostgreSQL a claim with a lower position may commit after a higher one:
`EventStore.wait_settled`), counts the reservations claimed before this one, and of two
claims that together pass the budget the later one gives way (its slot is skipped
`budget`). Both replicas read the same order, so they cannot both miss each other.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from harness.config import LevelConfig
from harness.contracts import TickScheduled
from harness.contracts.events import tick_stream
from harness.prices import PriceBook
from harness.projections import Projector, spend_report
from harness.projections.ticks import TickInFlight, ticks_in_flight
from harness.store import EventStore, StoredEvent

log = logging.getLogger(__name__)


def settled_claim(store: EventStore, projector: Projector, tick_id: str) -> StoredEvent | None:
    """The tick's claim (its `TickScheduled`) once every claim before it is folded.

    Claims are ordered by global position, and on PostgreSQL a claim with a lower position
    can commit after a higher one: this waits until none can still commit below this one,
    then brings the ticks read model up to it. None when the tick holds no claim.

    A transaction the horizon cannot tell from a writer (another role's hidden session, a
    prepared transaction) can keep it from settling; after `wait_settled`'s timeout the
    decision is taken on what is readable, and the operator's log says so, rather than
    holding the tick back for as long as that transaction stays open.
    """
    ours = tick_stream(tick_id)
    found = store.read_streams([ours], types=[TickScheduled.type])[ours]
    if not found:
        return None
    if not store.wait_settled(found[0].global_position):
        log.warning(
            "tick %s: claims before position %d did not settle in time (a transaction "
            "still open looks like a writer); deciding on the claims readable now",
            tick_id,
            found[0].global_position,
        )
    projector.catch_up(["ticks"])
    return found[0]


@dataclass(frozen=True)
class BudgetCheck:
    """A budget verdict with the figures behind it, for the skip event and the operator."""

    allowed: bool
    spent_tokens: int
    spent_usd: float | None
    reserved_tokens: int


@dataclass(frozen=True)
class Spent:
    """A level's spend today, as the spend projection has it."""

    tokens: int
    usd: float


def spent_today(store: EventStore, projector: Projector, prices: PriceBook, level: str) -> Spent:
    """Tokens and USD the level spent today (UTC), after folding what is stored."""
    projector.catch_up(["spend"])
    with store.read_transaction() as conn:
        rows = spend_report(
            conn, prices, by=["level"], since=datetime.now(UTC).date(), levels=[level]
        )
    return Spent(
        sum(r.prompt_tokens + r.completion_tokens for r in rows),
        sum(r.cost_usd or 0.0 for r in rows),
    )


def within_budget(config: LevelConfig, prices: PriceBook, spent: Spent, more_tokens: int) -> bool:
    """Whether `more_tokens` on top of `spent` stay within the level's daily budgets.

    With `more_tokens` 0 this asks whether the spend has already passed them: a USD budget
    whose model has no price cannot be checked and counts as passed (fail-closed).
    """
    if config.daily_token_budget is not None and spent.tokens + more_tokens > (
        config.daily_token_budget
    ):
        return False
    if config.daily_usd_budget is not None and config.model:
        today = datetime.now(UTC).date().isoformat()
        rate = prices.cost(config.model, today, -1, more_tokens, 0)
        return rate is not None and spent.usd + rate <= config.daily_usd_budget
    return True


class Budgets:
    """Daily token and USD caps per level, counting spend and reservations of ticks in flight."""

    def __init__(self, store: EventStore, projector: Projector, prices: PriceBook) -> None:
        self.store = store
        self.projector = projector
        self.prices = prices
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, int]] = {}
        """Level -> tick id -> tokens reserved by decisions not yet claimed in the store."""

    def held(self, flying: Iterable[TickInFlight], levels: Iterable[str]) -> dict[str, int]:
        """Tokens reserved by the ticks in flight of `levels`, from their TickScheduled."""
        wanted = set(levels)
        streams = {tick_stream(t.tick_id): t.level for t in flying if t.level in wanted}
        held: dict[str, int] = {}
        found = self.store.read_streams(streams, types=[TickScheduled.type])
        for stream, scheduled in found.items():
            for event in scheduled:
                level = streams[stream]
                held[level] = held.get(level, 0) + int(event.data.get("reserved_tokens", 0))
        return held

    def try_reserve(
        self, level: str, config: LevelConfig, tick_id: str, held: int = 0
    ) -> BudgetCheck:
        """Reserve for a tick if today's spend plus reservations leave room for it.

        `held`: tokens already reserved in the store by the level's ticks in flight.
        """
        if not config.has_budget:
            return BudgetCheck(True, 0, None, 0)
        spent = spent_today(self.store, self.projector, self.prices, level)
        with self._lock:
            pending = self._pending.setdefault(level, {})
            reserved = held + sum(pending.values())
            allowed = within_budget(config, self.prices, spent, reserved + config.reserve_tokens)
            if allowed:
                pending[tick_id] = config.reserve_tokens
        return BudgetCheck(allowed, spent.tokens, spent.usd, reserved)

    def reserved(self, level: str, tick_id: str) -> int:
        """Tokens still held for a tick decided to run but not yet claimed in the store."""
        with self._lock:
            return self._pending.get(level, {}).get(tick_id, 0)

    def settle(self, level: str, tick_id: str) -> None:
        """The decision is written (the store holds the reservation now) or void."""
        with self._lock:
            self._pending.get(level, {}).pop(tick_id, None)

    def confirm(self, level: str, config: LevelConfig, tick_id: str) -> BudgetCheck:
        """Whether a claimed tick still fits, counting the reservations claimed before it."""
        if not config.has_budget:
            return BudgetCheck(True, 0, None, 0)
        claim = settled_claim(self.store, self.projector, tick_id)
        if claim is None:
            return BudgetCheck(True, 0, None, 0)  # ended already: it holds no place
        streams = [tick_stream(t.tick_id) for t in ticks_in_flight(self.store, [level])]
        claims = self.store.read_streams(streams, types=[TickScheduled.type])
        before = sum(
            int(first.data.get("reserved_tokens", 0))
            for events in claims.values()
            for first in events[:1]
            if first.global_position < claim.global_position
        )
        spent = spent_today(self.store, self.projector, self.prices, level)
        own = int(claim.data.get("reserved_tokens", 0))
        allowed = within_budget(config, self.prices, spent, before + own)
        return BudgetCheck(allowed, spent.tokens, spent.usd, before)
