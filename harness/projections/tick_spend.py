"""The tick spend read model: each tick's tokens per model, day and price tier, and counters.

A digest reports spend, governor interventions and hedges of the ticks of its period.
Reading them from the events meant reading every event of the period (an hour of 1,000
levels a minute: 160,000 `BudgetSpent` among 816,000 events, 11 s); this model holds a
row or two per tick, joined to the period's ticks in the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from functools import cache

import sqlalchemy as sa

from harness.contracts import BudgetSpent, GovernorFired, HedgeStarted
from harness.folds import COUNTERS, merge, tick_spend_sums
from harness.prices import PriceBook
from harness.projections.base import Kernel, SumProjection, Sums, add_sums
from harness.projections.spend import SUMS
from harness.projections.ticks import IDS_PER_QUERY
from harness.store import metadata

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
