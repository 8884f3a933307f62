"""Daily budgets per level, read from the spend projection, with reservations.

A tick about to start holds `reserve_tokens` (priced at the level model's rates for a USD
budget) until it ends and its spend is in the projection: ticks starting together see each
other's reservations, so five of them cannot overshoot the budget by five ticks' worth.
Reservations live in the scheduler that starts the ticks; replicas see each other's spend
once it is recorded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from harness.config import LevelConfig
from harness.prices import PriceBook
from harness.projections import Projector, spend_report
from harness.store import SqlEventStore


@dataclass(frozen=True)
class BudgetCheck:
    allowed: bool
    spent_tokens: int
    spent_usd: float | None
    reserved_tokens: int


class Budgets:
    def __init__(self, store: SqlEventStore, projector: Projector, prices: PriceBook) -> None:
        self.store = store
        self.projector = projector
        self.prices = prices
        self._lock = threading.Lock()
        self._reserved: dict[str, dict[str, int]] = {}

    def try_reserve(self, level: str, config: LevelConfig, tick_id: str) -> BudgetCheck:
        """Reserve for a tick if today's spend plus reservations leave room for it."""
        if config.daily_token_budget is None and config.daily_usd_budget is None:
            return BudgetCheck(True, 0, None, 0)
        today = datetime.now(UTC).date()
        self.projector.catch_up(["spend"])
        with self.store.read_transaction() as conn:
            rows = spend_report(conn, self.prices, by=["level"], since=today, levels=[level])
        spent_tokens = sum(r.prompt_tokens + r.completion_tokens for r in rows)
        spent_usd = sum(r.cost_usd or 0.0 for r in rows) if rows else 0.0
        with self._lock:
            held = self._reserved.setdefault(level, {})
            reserved = sum(held.values())
            want = reserved + config.reserve_tokens
            allowed = True
            if config.daily_token_budget is not None:
                allowed = spent_tokens + want <= config.daily_token_budget
            if allowed and config.daily_usd_budget is not None and config.model:
                rate = self.prices.cost(config.model, today.isoformat(), -1, want, 0)
                allowed = rate is not None and spent_usd + rate <= config.daily_usd_budget
            if allowed:
                held[tick_id] = config.reserve_tokens
        return BudgetCheck(allowed, spent_tokens, spent_usd, reserved)

    def settle(self, level: str, tick_id: str) -> None:
        """The tick ended: its real spend is in the store, its reservation goes."""
        with self._lock:
            self._reserved.get(level, {}).pop(tick_id, None)
