"""The budgets read model: spend per `[[budgets]]` entry and window, per model and price tier.

A `BudgetSpent` counts once for every budget whose scope holds its level and target, in the
row of the window it occurred in (a rolling `24h` budget: its UTC hour). So a check of a
budget sums a row per model of one window (24 hourly rows for a rolling budget): its cost
does not grow with the history, nor with the levels in scope. Rows keep integer sums and
are priced when read, a price per aggregate row (prices are linear within a tier); a
row of calls billed on a subscription counts at its list value, billed nothing.

The rows depend on the budgets configured: each is folded under its rule's fingerprint
(name, window, zone, levels and targets held), and `ensure_folded` refolds the read model
from the log when a process starts with a budget it has not been folded for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import sqlalchemy as sa

from harness.contracts import BudgetRule, BudgetSpent, Window, billed, bucket_of, usd_sum
from harness.prices import PriceBook
from harness.projections.base import EventData, Projection, add_sums, upsert
from harness.projections.projector import Projector
from harness.store import EventStore, clear_tables, metadata, recorded_archives

budget_window_spend = sa.Table(
    "budget_window_spend",
    metadata,
    sa.Column("budget", sa.String(100), primary_key=True),
    sa.Column("fingerprint", sa.String(16), primary_key=True),
    sa.Column("bucket", sa.String(32), primary_key=True),
    sa.Column("model", sa.String(200), primary_key=True),
    sa.Column("price_tier", sa.BigInteger(), primary_key=True),
    sa.Column("billing", sa.String(16), primary_key=True),
    sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
    sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
    sa.Column("model_calls", sa.BigInteger(), nullable=False),
)
"""`bucket`: the window's start (a rolling budget: the UTC hour), ISO UTC, sortable.
`billing` (migration 0033): how the calls were paid for, `api` or `subscription`."""

budget_folds = sa.Table(
    "budget_folds",
    metadata,
    sa.Column("fingerprint", sa.String(16), primary_key=True),
)
"""The rule fingerprints the read model holds rows for (cleared with it)."""

_KEYS = ("budget", "fingerprint", "bucket", "model", "price_tier", "billing")
BUDGET_WINDOWS = "budget_windows"


def bucket_key(at: datetime) -> str:
    """A bucket's start as the read model keys it."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BudgetWindowsProjection(Projection):
    """Spend per budget, window, model and tier, for the budgets configured (see module)."""

    name = BUDGET_WINDOWS
    types = frozenset({BudgetSpent.type})
    tables = (budget_window_spend, budget_folds)

    def __init__(self, rules: Sequence[BudgetRule], prices: PriceBook) -> None:
        self.rules = list(rules)
        self.prices = prices

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """Each call's tokens added to the current window of every budget holding it."""
        sums: dict[tuple[str, str, str, str, int, str], list[int]] = {}
        tier = cache(self.prices.tier)
        for _, _, data in batch:
            level, target = str(data.get("level", "")), data.get("target")
            rules = [rule for rule in self.rules if rule.covers(level, target)]
            if not rules:
                continue
            at = _instant(data["occurred_at"])
            model = str(data["model"])
            prompt, completion = int(data["prompt_tokens"]), int(data["completion_tokens"])
            price_tier = tier(model, at.date().isoformat(), prompt)
            billing = str(data.get("billing") or "api")
            for rule in rules:
                key = (
                    rule.name,
                    rule.fingerprint,
                    bucket_key(bucket_of(rule.window, rule.zone, at)),
                    model,
                    price_tier,
                    billing,
                )
                row = sums.setdefault(key, [0, 0, 0])
                row[0] += prompt
                row[1] += completion
                row[2] += 1
        add_sums(conn, budget_window_spend, _KEYS, [(*k, *v) for k, v in sums.items()])


def _instant(value: object) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)


def ensure_folded(
    store: EventStore,
    projector: Projector,
    rules: Sequence[BudgetRule],
    at: datetime,
    archive_root: Path | None = None,
) -> bool:
    """Refold the read model if a configured budget is new or changed; True when it did.

    A budget added to the file must count the spend of its current window that happened
    before it was added, so the read model is folded again, once per change. Only the
    current windows are ever read, so the fold starts a day before the earliest of them
    holding `at` (a call is bucketed by when it occurred, recorded a moment later), with
    the archives of those days: it costs the longest window, not the history.

    Clearing, folding and marking the rules folded are one transaction under the read
    model's checkpoint lock: a budget check elsewhere reads the old rows or the new,
    never a half-folded window, and a second process starting with the same new budget
    waits, then finds it folded.
    """
    wanted = {rule.fingerprint for rule in rules}
    with store.read_transaction() as conn:
        if wanted <= _folded_for(conn):
            return False
    since = min((rule.window_at(at).start for rule in rules), default=at) - timedelta(days=1)
    archives = recorded_archives(store, archive_root, since.date()) if archive_root else []
    projection = projector.get(BUDGET_WINDOWS)
    with store.tracking(BUDGET_WINDOWS) as locked:
        if wanted <= _folded_for(locked.conn):
            return False
        clear_tables(locked.conn, projection.tables)
        start = replace(locked, position=store.first_position_since(since) - 1)
        projector.fold_archived(projection, start, archives, locked.horizon)
        locked.conn.execute(
            upsert(locked.conn, budget_folds).on_conflict_do_nothing(),
            [{"fingerprint": fingerprint} for fingerprint in wanted],
        )
        store.save_checkpoint(locked, locked.horizon)
    return True


def _folded_for(conn: sa.Connection) -> set[str]:
    return {row[0] for row in conn.execute(sa.select(budget_folds.c.fingerprint))}


@dataclass(frozen=True)
class WindowSpend:
    """What a budget's window has spent: tokens, calls, and USD (None if some is unpriced).

    `usd` is what the spend is billed, `list_usd` what it is worth at list prices: they
    differ by the calls billed on a subscription (worth their tokens, billed nothing).
    """

    tokens: int
    usd: float | None
    calls: int
    list_usd: float | None = 0.0


_WINDOW_ROWS = sa.text(
    "SELECT budget, fingerprint, bucket, model, price_tier, billing, prompt_tokens,"
    " completion_tokens, model_calls FROM budget_window_spend"
    " WHERE budget IN :names AND bucket >= :since"
).bindparams(sa.bindparam("names", expanding=True))
"""One statement, compiled once: a check runs before every slot, and building an
expression per budget cost more than the database's answer."""


def window_spend(
    conn: sa.Connection,
    prices: PriceBook,
    rules: Sequence[BudgetRule],
    windows: dict[str, Window],
) -> dict[str, WindowSpend]:
    """Each rule's spend in its window (`windows`: rule name -> window), in one query.

    The rows of the budgets' current windows (a handful per budget: its models and tiers,
    24 hours of them for a rolling one) are read in one range and sorted out here.
    """
    if not rules:
        return {}
    wanted = {
        rule.name: (
            rule.fingerprint,
            bucket_key(windows[rule.name].start),
            bucket_key(windows[rule.name].end - timedelta(seconds=1)),
        )
        for rule in rules
    }
    since = min(first for _, first, _ in wanted.values())
    rows = conn.execute(_WINDOW_ROWS, {"names": list(wanted), "since": since})
    tokens = dict.fromkeys((rule.name for rule in rules), 0)
    calls_of = dict.fromkeys((rule.name for rule in rules), 0)
    on_the_bill: dict[str, float | None] = dict.fromkeys((rule.name for rule in rules), 0.0)
    listed: dict[str, float | None] = dict.fromkeys((rule.name for rule in rules), 0.0)
    for name, fingerprint, bucket, model, tier, billing, prompt, completion, calls in rows:
        own, first, last = wanted[name]
        if fingerprint != own or not first <= bucket <= last:
            continue
        tokens[name] += int(prompt) + int(completion)
        calls_of[name] += int(calls)
        cost = prices.cost(model, bucket[:10], int(tier), int(prompt), int(completion))
        listed[name] = usd_sum(listed[name], cost)
        on_the_bill[name] = usd_sum(on_the_bill[name], billed(cost, billing))
    return {
        name: WindowSpend(tokens[name], on_the_bill[name], calls_of[name], listed[name])
        for name in tokens
    }


def budget_projector(
    store: EventStore, prices: PriceBook, rules: Sequence[BudgetRule]
) -> Projector:
    """A projector of the budgets read model alone, for the budgets `rules` configure.

    Kept apart from `projector_for`'s read models, which do not depend on the
    configuration: a process that knows no budgets must never advance this one's
    checkpoint past spend it did not fold.
    """
    return Projector(store, [BudgetWindowsProjection(rules, prices)])


def spent_in_windows(
    store: EventStore,
    projector: Projector,
    prices: PriceBook,
    rules: Sequence[BudgetRule],
    at: datetime,
    fold: bool = True,
) -> dict[str, WindowSpend]:
    """Each budget's spend in its window holding `at`, after folding what is stored.

    `fold` False: as the read model has it, without taking the write lock a fold needs
    (a tick's preparation: its worker reads the log after the read model's checkpoint).
    """
    if not rules:
        return {}
    if fold:
        projector.catch_up([BUDGET_WINDOWS])
    windows: dict[str, Window] = {rule.name: rule.window_at(at) for rule in rules}
    with store.read_transaction() as conn:
        return window_spend(conn, prices, rules, windows)
