"""The tick spend read model: each tick's tokens per model, day and price tier, and counters.

A digest reports spend, governor interventions and hedges of the ticks of its period.
Reading them from the events meant reading every event of the period (an hour of 1,000
levels a minute: 160,000 `BudgetSpent` among 816,000 events, 11 s); this model holds a
row or two per tick, joined to the period's ticks in the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache

import sqlalchemy as sa

from harness.contracts import BudgetSpent, GovernorFired, HedgeStarted
from harness.folds import COUNTERS, merge, tick_spend_sums
from harness.prices import PriceBook
from harness.projections.base import Kernel, SumProjection, Sums, add_sums
from harness.projections.spend import SUMS
from harness.projections.ticks import IDS_PER_QUERY, OPEN_SQL, ticks
from harness.store import EventStore, metadata

tick_spend = sa.Table(
    "tick_spend",
    metadata,
    sa.Column("tick_id", sa.String(200), primary_key=True),
    sa.Column("model", sa.String(200), primary_key=True),
    sa.Column("day", sa.Date(), primary_key=True),
    sa.Column("price_tier", sa.BigInteger(), primary_key=True),
    *(
        sa.Column(name, sa.BigInteger(), nullable=False)
        for name in (*SUMS, "governor_fired", "hedges", "twin")
    ),
)
"""Migration 0011. A tick's spend rows have its model; its row of counters (governor
interventions, twins it started, whether it is a twin) has model "" and tier -1."""

_KEYS = ("tick_id", "model", "day", "price_tier")


class TickSpendProjection(SumProjection):
    """Tokens per tick, model, day and price tier; governor and hedge counters per tick."""

    name = "tick_spend"
    types = frozenset({BudgetSpent.type, GovernorFired.type, HedgeStarted.type})
    tables = (tick_spend,)

    def __init__(self, prices: PriceBook) -> None:
        self.prices = prices

    def kernel(self) -> Kernel:
        """Sums per tick, model, day and prompt-size bucket (`harness.folds.tick_spend`)."""
        return Kernel(tick_spend_sums, (self.prices.tier_bounds(),))

    def write(self, conn: sa.Connection, sums: Sums) -> None:
        """Buckets mapped onto price tiers (counters keep -1), then each row's sums added."""
        tier_of = cache(self.prices.bucket_tier)
        rows = merge(
            {},
            (
                ((tick_id, model, day, -1 if model == COUNTERS else tier_of(model, day, bucket)), v)
                for (tick_id, model, day, bucket), v in sums.items()
            ),
        )
        add_sums(conn, tick_spend, _KEYS, [(*key, *values) for key, values in rows.items()])

    def archived(self, conn: sa.Connection, day: date, tick_ids: Iterable[str]) -> None:
        """Archived ticks' rows leave with them.

        Spend per level, model and day stays in `spend_daily`, so this table holds the hot
        store's ticks only.
        """
        wanted = list(tick_ids)
        for start in range(0, len(wanted), IDS_PER_QUERY):
            chunk = wanted[start : start + IDS_PER_QUERY]
            conn.execute(tick_spend.delete().where(tick_spend.c.tick_id.in_(chunk)))


@dataclass(frozen=True)
class TickCost:
    """What one tick spent: its tokens (prompt and completion, as budgets count them) and USD.

    `usd` None: some of its spend has no price.
    """

    tokens: int
    usd: float | None


_RAN = sa.text(
    "SELECT t.tick_id, s.model, s.day, s.price_tier, s.prompt_tokens, s.completion_tokens"
    " FROM ticks t LEFT JOIN tick_spend s ON s.tick_id = t.tick_id AND s.model != ''"
    f" WHERE t.level = :level AND t.sort_at >= :since AND NOT ({OPEN_SQL})"
    " AND t.started_at IS NOT NULL"
).bindparams(sa.bindparam("since", type_=ticks.c.sort_at.type))
"""The level's ticks that ran and ended since `since`, with their spend rows: it walks the
ticks' (level, sort_at) index, so it costs the level's ticks of the period, not the
history nor the other levels."""


def tick_costs_since(
    store: EventStore, prices: PriceBook, level: str, since: datetime
) -> list[TickCost]:
    """The cost of each of the level's ticks that ran and ended since `since`, any order.

    A tick that ran without spending (it failed before its first call) costs 0: it is one
    of the level's ticks as a forecast must count them.
    """
    tokens: dict[str, int] = {}
    usd: dict[str, float | None] = {}
    with store.read_transaction() as conn:
        rows = conn.execute(_RAN, {"level": level, "since": since.astimezone(UTC)})
        for tick_id, model, day, tier, prompt, completion in rows:
            tokens.setdefault(tick_id, 0)
            usd.setdefault(tick_id, 0.0)
            if model is None:
                continue
            tokens[tick_id] += int(prompt) + int(completion)
            cost = prices.cost(model, str(day)[:10], int(tier), int(prompt), int(completion))
            before = usd[tick_id]
            usd[tick_id] = None if cost is None or before is None else before + cost
    return [TickCost(tokens[tick_id], usd[tick_id]) for tick_id in tokens]
