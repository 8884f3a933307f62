"""The spend read model: tokens and calls per level, model, UTC day, tier, template, target.

Rows hold exact integer sums, so a rebuild equals the incrementally kept model to the
token; cost in USD is computed when a report asks (see `harness.prices`), each row under
its target's prices where the catalog gives the target some, and every report row says
which sources priced it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from functools import cache
from typing import Any, Literal, get_args

import sqlalchemy as sa

from harness.contracts import BudgetSpent, billed, usd_sum
from harness.folds import NANO, merge, spend_sums
from harness.prices import UNPRICED, PriceBook
from harness.projections.base import Kernel, SumProjection, Sums, add_sums
from harness.store import EventStore, metadata

spend_daily = sa.Table(
    "spend_daily",
    metadata,
    sa.Column("level", sa.String(100), primary_key=True),
    sa.Column("model", sa.String(200), primary_key=True),
    sa.Column("day", sa.Date(), primary_key=True),
    sa.Column("price_tier", sa.BigInteger(), primary_key=True),
    sa.Column("template_hash", sa.String(64), primary_key=True),
    sa.Column("target", sa.String(64), primary_key=True),
    sa.Column("price_source", sa.String(100), primary_key=True),
    sa.Column("billing", sa.String(16), primary_key=True),
    sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
    sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
    sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
    sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
    sa.Column("model_calls", sa.BigInteger(), nullable=False),
    sa.Column("estimated_calls", sa.BigInteger(), nullable=False),
    sa.Column("cache_write_1h_tokens", sa.BigInteger(), nullable=False),
    sa.Column("web_search_requests", sa.BigInteger(), nullable=False),
    sa.Column("booked_nusd", sa.BigInteger(), nullable=False),
    sa.Index("ix_spend_daily_day", "day"),
)
"""`template_hash` (migration 0009): the hash of the prompt template the spend's tick ran,
"" for spend with none (recorded before tickwork kept it, or the proxy's). `target`
(migration 0029): the catalog target the calls were booked on, "" for none (no catalog,
a call the runner booked for a cut-off tick, or a row folded before 0029).
`price_source` (migration 0031): who priced the calls as they were booked, and
`booked_nusd` the USD they were booked at in nano-dollars; "" and 0 for spend booked
without a price (recorded before tickwork priced as it booked, or a row folded before
0031), which a report prices when it reads it. `billing` (migration 0033): how the
calls are paid for, `api` or `subscription` (worth their cost, billed nothing)."""

_KEYS = (
    "level",
    "model",
    "day",
    "price_tier",
    "template_hash",
    "target",
    "price_source",
    "billing",
)
SUMS = (
    "prompt_tokens",
    "completion_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "model_calls",
    "estimated_calls",
)
BOOKED = ("cache_write_1h_tokens", "web_search_requests", "booked_nusd")
"""The spend read model's sums beyond those it shares with the tick spend model."""

GroupBy = Literal["level", "model", "day", "template", "target", "billing"]
"""What a spend report groups by; `template` is the prompt template's hash."""
GROUPS: tuple[GroupBy, ...] = get_args(GroupBy)
_COLUMN_OF = {"template": "template_hash"}


class SpendProjection(SumProjection):
    """Tokens per day, level, model, price tier, template and target (priced when read).

    What budgets count, and what `tickwork spend` reports.
    """

    name = "spend"
    types = frozenset({BudgetSpent.type})
    tables = (spend_daily,)

    def __init__(self, prices: PriceBook, reprice: bool = False) -> None:
        self.prices = prices
        self.reprice = reprice
        """Price every row under `prices` as it is written, whatever its calls were booked
        at (`tickwork projections rebuild --reprice`): the read model then holds history
        under today's card, and the events stay as they were booked."""

    def kernel(self) -> Kernel:
        """Sums per level, model, day, prompt size, template, target, price source, billing."""
        return Kernel(spend_sums, (self.prices.tier_bounds(),))

    def write(self, conn: sa.Connection, sums: Sums) -> None:
        """Buckets mapped onto price tiers (repriced if asked), then each row's sums added."""
        tier_of = cache(self.prices.bucket_tier)
        rows = merge(
            {},
            (
                ((level, model, day, tier_of(model, day, bucket), *rest), values)
                for (level, model, day, bucket, *rest), values in sums.items()
            ),
        )
        if self.reprice:
            rows = merge({}, (self._repriced(key, values) for key, values in rows.items()))
        add_sums(conn, spend_daily, _KEYS, [(*key, *values) for key, values in rows.items()])

    def _repriced(
        self, key: tuple[Any, ...], values: list[int]
    ) -> tuple[tuple[Any, ...], list[int]]:
        """A row's key and sums as if its calls had been booked under `prices`."""
        level, model, day, tier, template, target, _booked_by, billing = key
        cost, source = _priced(self.prices, model, day, tier, target or None, values)
        nano = 0 if cost is None else round(cost * NANO)
        return (level, model, day, tier, template, target, source, billing), [*values[:-1], nano]


@dataclass(frozen=True)
class SpendRow:
    """One line of a spend report: what its calls are worth, and what they are billed.

    `cost_usd` is their list value (each call at its price, however it is paid for),
    `billed_usd` what they add to the bill (a call on a subscription adds 0); either is
    None when a call it counts has no price. `price_sources`: who priced its calls
    (`PriceBook.source`), `unpriced` among them when some had no price.
    """

    group: dict[str, str]
    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    model_calls: int
    estimated_calls: int
    cache_write_1h_tokens: int
    web_search_requests: int
    cost_usd: float | None
    unpriced_calls: int
    price_sources: tuple[str, ...]
    priced_when_read: int = 0
    """Calls booked without a price (before tickwork priced as it booked): this report
    priced them under the current prices, as reports did before."""
    billed_usd: float | None = None
    subscription_calls: int = 0
    """Calls paid for by a subscription: in `cost_usd`, billed nothing."""


def spend_report(
    conn: sa.Connection,
    prices: PriceBook,
    by: Sequence[GroupBy] = ("level",),
    since: date | None = None,
    until: date | None = None,
    levels: Sequence[str] | None = None,
    card: PriceBook | None = None,
) -> list[SpendRow]:
    """Spend grouped by any of level, model, day, template and target, as it was booked.

    Each call costs what it was booked at (its `BudgetSpent`'s USD and source); a call
    booked without a price is priced under `prices` now, as before, and counted in
    `priced_when_read`. `card`: price every call under it instead (`PriceBook.under`),
    what the period would have cost. A call on a subscription is billed 0 whatever its
    price.

    The database sums the rows first, by the groups asked for and what a price depends
    on (model, day, price tier, target and booked source), so each aggregate is priced
    once: prices are linear within a tier. A report by model prices one row per model,
    day, tier and target, however many levels spent.
    """
    priced_by = ("model", "day", "price_tier", "target", "price_source", "billing")
    columns = (*(_COLUMN_OF.get(name, name) for name in by), *priced_by)
    keys = [spend_daily.c[name] for name in dict.fromkeys(columns)]
    query = sa.select(
        *keys, *(sa.func.sum(spend_daily.c[name]).label(name) for name in (*SUMS, *BOOKED))
    ).group_by(*keys)
    if since is not None:
        # Closed on both sides: given `day >= ?` alone, SQLite walks the whole primary key
        # (the GROUP BY's order) rather than sort the days asked for, so a status, a scrape
        # or a dashboard refresh read every day ever kept.
        query = query.where(spend_daily.c.day.between(since, until or date.max))
    elif until is not None:
        query = query.where(spend_daily.c.day <= until)
    if levels:
        query = query.where(spend_daily.c.level.in_(list(levels)))

    names = [key.name for key in keys]
    at = {name: names.index(_COLUMN_OF.get(name, name)) for name in (*by, *priced_by)}
    day_at, group_at = at["day"], [at[name] for name in by]
    groups: dict[tuple[str, ...], _Totals] = {}
    for row in conn.execute(query):
        # By position, not by name: a report of 1,000 levels reads a row per level, model
        # and day at every dashboard refresh and scrape.
        values = list(row)
        values[day_at] = day = values[day_at].isoformat()
        totals = groups.setdefault(tuple(values[i] for i in group_at), _Totals())
        sums = [int(value) for value in values[len(keys) :]]
        totals.sums = [a + b for a, b in zip(totals.sums, sums, strict=True)]
        model, target = values[at["model"]], values[at["target"]] or None
        tier, booked_by = values[at["price_tier"]], values[at["price_source"]]
        if card is not None or not booked_by:
            cost, source = _priced(card or prices, model, day, tier, target, sums)
            totals.priced_when_read += 0 if card else sums[4]
        else:
            cost, source = (None if booked_by == UNPRICED else sums[-1] / NANO), booked_by
        totals.sources.add(source)
        subscription = values[at["billing"]] == "subscription"
        totals.subscription_calls += sums[4] if subscription else 0
        if cost is None:
            totals.unpriced_calls += sums[4]
            totals.unbilled_calls += 0 if subscription else sums[4]
        else:
            totals.cost_usd += cost
            totals.billed_usd += billed(cost, values[at["billing"]]) or 0.0
    return [
        SpendRow(
            group=dict(zip(by, key, strict=True)),
            **dict(zip((*SUMS, *BOOKED[:-1]), totals.sums, strict=False)),
            cost_usd=None if totals.unpriced_calls else totals.cost_usd,
            unpriced_calls=totals.unpriced_calls,
            price_sources=tuple(sorted(totals.sources)),
            priced_when_read=totals.priced_when_read,
            billed_usd=None if totals.unbilled_calls else totals.billed_usd,
            subscription_calls=totals.subscription_calls,
        )
        for key, totals in sorted(groups.items())
    ]


def _priced(
    prices: PriceBook, model: str, day: str, tier: int, target: str | None, sums: Sequence[int]
) -> tuple[float | None, str]:
    """USD of a spend row's sums (`SUMS` then `BOOKED`) under `prices`, and their source."""
    cost = prices.cost(
        model,
        day,
        tier,
        *sums[:4],
        requests=sums[4],
        target=target,
        cache_write_1h_tokens=sums[6],
        web_searches=sums[7],
    )
    return cost, prices.source(model, day, target)


REPORT_DAYS = 30
"""UTC days a spend report covers unless told otherwise (today and the 29 before it).

The read model keeps every day (it is what survives archiving), and a report of all of
them priced a row per level, model and day ever kept: its cost grew with the history. A
longer window is asked for by its first day (`since`)."""


def report_since(since: date | None, today: date) -> date:
    """The first day of a spend report: the one asked for, else REPORT_DAYS back."""
    return since if since is not None else today - timedelta(days=REPORT_DAYS - 1)


ReportGroup = Literal["level", "model", "day", "template", "target", "billing", "tag"]
"""What `tickwork spend --by` and `GET /spend?by=` take: the read model's groups (`GroupBy`,
tests/test_repricing.py holds the two together), and `tag`. One Literal, not a union of two,
so a refused value is answered with every name."""
REPORT_GROUPS: tuple[ReportGroup, ...] = get_args(ReportGroup)


def spend_by(
    store: EventStore,
    prices: PriceBook,
    by: Sequence[ReportGroup],
    tags_of: Mapping[str, Sequence[str]],
    since: date | None = None,
    levels: Sequence[str] | None = None,
    card: PriceBook | None = None,
) -> list[SpendRow]:
    """A spend report whose groups may include `tag`: the levels' `tags`, priced per row.

    `card`: every call priced under it, not as booked (`spend_report`).

    Grouped by level in the database (with the other groups asked), then each level's
    row is counted under each of its tags ("" for a level with none, or one no longer
    configured): a level with two tags counts in both, as LiteLLM's tag reports do.
    """
    inner: list[GroupBy] = [g for g in by if g != "tag"]
    if "tag" in by and "level" not in inner:
        inner.append("level")
    with store.read_transaction() as conn:
        rows = spend_report(conn, prices, inner, since, levels=levels, card=card)
    if "tag" not in by:
        return rows
    merged: dict[tuple[str, ...], SpendRow] = {}
    for row in rows:
        for tag in tags_of.get(row.group["level"], ()) or ("",):
            group: dict[str, str] = {name: tag if name == "tag" else row.group[name] for name in by}
            key = tuple(group.values())
            total = merged.get(key)
            merged[key] = replace(row, group=group) if total is None else _added(total, row)
    return [merged[key] for key in sorted(merged)]


def top_spenders(store: EventStore, since: date, n: int) -> list[str]:
    """The `n` levels that spent the most tokens from `since` on, most first.

    Summed by the database over the days asked for alone (the day range closed, as in
    `spend_report`): a chart of a few levels need not price a row per level and day.
    """
    tokens = sa.func.sum(spend_daily.c.prompt_tokens + spend_daily.c.completion_tokens)
    query = (
        sa.select(spend_daily.c.level)
        .where(spend_daily.c.day.between(since, date.max))
        .group_by(spend_daily.c.level)
        .order_by(tokens.desc(), spend_daily.c.level)
        .limit(n)
    )
    with store.read_transaction() as conn:
        return list(conn.execute(query).scalars())


def _added(a: SpendRow, b: SpendRow) -> SpendRow:
    counts = (*SUMS, *BOOKED[:-1], "unpriced_calls", "priced_when_read", "subscription_calls")
    return SpendRow(
        group=a.group,
        **{name: getattr(a, name) + getattr(b, name) for name in counts},
        cost_usd=usd_sum(a.cost_usd, b.cost_usd),
        price_sources=tuple(sorted({*a.price_sources, *b.price_sources})),
        billed_usd=usd_sum(a.billed_usd, b.billed_usd),
    )


@dataclass
class _Totals:
    sums: list[int] = field(default_factory=lambda: [0] * (len(SUMS) + len(BOOKED)))
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    sources: set[str] = field(default_factory=set)
    priced_when_read: int = 0
    billed_usd: float = 0.0
    unbilled_calls: int = 0
    """Calls billed on `api` without a price: the bill is unknown while there are some."""
    subscription_calls: int = 0
