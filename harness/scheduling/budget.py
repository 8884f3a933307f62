"""Budgets (`[[budgets]]` and the levels' daily keys), from their read model, with reservations.

A tick about to start reserves its level's `reserve_tokens` (priced at the level model's
rates for a USD budget) until it ends, against every budget holding its level. The
reservation is written into the tick's `TickScheduled` event, so every replica on the
store sees it while the tick is in flight and it ends by itself with the tick's terminal
event (a crashed scheduler leaks nothing). Within one wave of slots, decisions taken
before the claim is written are held in memory: five ticks fired together cannot
overshoot a budget by five ticks' worth.

Two replicas deciding for different slots in the same few milliseconds may each miss the
other's reservation when deciding; the claim settles it. Claims are ordered by global
position: `Budgets.confirm` waits until every claim before its own is readable (on
PostgreSQL a claim with a lower position may commit after a higher one:
`EventStore.wait_settled`), counts, for each budget holding the level, the reservations
of the ticks in its scope claimed before this one, and of two claims that together pass
a budget the later one gives way (its slot is skipped `budget`). Both replicas read the
same order, so they cannot both miss each other. A global or tag budget is one more set
of levels to count claims over: the mechanism is the per-level one, widened.

Budgets scoped to a catalog target or provider are not checked here (the target is
chosen later): the worker checks them before every call, and `reroute` ones steer the
route (`harness.routing`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from harness.config import LevelConfig, Settings, host_of
from harness.contracts import Billing, BudgetEntry, BudgetRule, TickScheduled, tick_stream
from harness.prices import PriceBook, format_usd
from harness.projections import (
    Projector,
    WindowSpend,
    budget_projector,
    ensure_folded,
    spent_in_windows,
    ticks_in_flight,
)
from harness.routing import Catalog, Router, level_billings, readable_catalog
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
    """A budget verdict with the figures behind it, for the skip event and the operator.

    The figures are those of the budget that refused (or of the first one checked).
    """

    allowed: bool
    spent_tokens: int
    spent_usd: float | None
    reserved_tokens: int
    """Held by the other ticks in flight in the budget's scope."""
    budget: str | None = None
    reserving: int = 0
    """What this tick would reserve (its level's `reserve_tokens`)."""
    limit_tokens: int | None = None
    limit_usd: float | None = None
    limit_list_usd: float | None = None
    spent_list_usd: float | None = None

    @classmethod
    def of(
        cls, allowed: bool, rule: BudgetRule, used: WindowSpend, reserved: int, own: int
    ) -> BudgetCheck:
        """The verdict of `rule` on its window's spend `used` and the reservations."""
        return cls(
            allowed,
            used.tokens,
            used.usd,
            reserved,
            rule.name,
            own,
            rule.tokens,
            rule.usd,
            rule.list_usd,
            used.list_usd,
        )

    def words(self, level: str) -> str:
        """Why a slot of `level` was skipped: the budget that stopped it and its numbers.

        An operator reading `t1 skipped: …` learns which budget, what it holds, what one
        tick would take and the limit, not only that some budget said no.
        """
        if self.budget is None:
            return f"{level}'s budgets could not be read (a stopped slot is the safe side)"
        used = f"{self.spent_tokens:,} tokens"
        if self.limit_usd is not None:
            used += f" (USD {format_usd(self.spent_usd)} billed)"
        if self.limit_list_usd is not None:
            used += f" (USD {format_usd(self.spent_list_usd)} list value)"
        limits = [
            *([f"{self.limit_tokens:,} tokens"] if self.limit_tokens is not None else []),
            *([f"USD {format_usd(self.limit_usd)} billed"] if self.limit_usd is not None else []),
            *(
                [f"USD {format_usd(self.limit_list_usd)} list value"]
                if self.limit_list_usd is not None
                else []
            ),
        ]
        return (
            f"{level} is held by budget {self.budget}: {used} used, "
            f"{self.reserved_tokens:,} reserved by ticks in flight, this tick would reserve "
            f"{self.reserving:,}; the limit is {' and '.join(limits)}"
        )


ALLOWED = BudgetCheck(True, 0, None, 0)
Reservations = Mapping[str, tuple[str, int]]
"""Tick id -> (its level, tokens it holds)."""


def held_by(rule: BudgetRule, reservations: Reservations) -> int:
    """Tokens the reservations of the ticks in the budget's scope hold."""
    return sum(tokens for level, tokens in reservations.values() if rule.covers_level(level))


def within(
    rule: BudgetRule,
    prices: PriceBook,
    spent: WindowSpend,
    more_tokens: int,
    model: str | None,
    at: datetime,
    billing: Billing = "api",
) -> bool:
    """Whether `more_tokens` on top of `spent` stay within the budget's limits.

    With `more_tokens` 0 this asks whether the spend has already passed them. Spend that
    cannot be priced, or reservations priced at a model without rates, pass a USD budget
    (fail-closed). A level billed on a subscription adds nothing to the bill: a `usd`
    limit (billed) never holds it, a `list_usd` one does.
    """
    if rule.tokens is not None and spent.tokens + more_tokens > rule.tokens:
        return False
    limits = rule.usd_limits(billing)
    if not limits:
        return True
    rate = 0.0
    if more_tokens and model:
        priced = prices.cost(model, at.date().isoformat(), -1, more_tokens, 0)
        if priced is None:
            return False
        rate = priced
    for unit, limit in limits:
        used = getattr(spent, unit)
        if used is None or used + rate > limit:
            return False
    return True


def budget_rules(settings: Settings, catalog: Catalog | None) -> list[BudgetRule]:
    """The configured budgets, `provider:` scopes resolved against `catalog`'s endpoints.

    The catalog in force, not the file: one on disk may be invalid (the router kept the
    last valid one) or newer than what routes the ticks.
    """
    hosts: dict[str, str] = {}
    if catalog is not None:
        for name, target in catalog.targets.items():
            url = target.base_url or (os.environ.get(target.base_url_env or "") or None)
            host = host_of(url)
            if host:
                hosts[name] = host
    return settings.budget_rules(hosts)


@dataclass(frozen=True)
class _Resolved:
    """The budgets as resolved from one `[[budgets]]` list, levels dict and catalog.

    A reload swaps each of the three whole (`Settings.replace_budgets`/`replace_levels`,
    `CatalogSource.poll`), so their identity tells when to resolve anew.
    """

    entries: list[BudgetEntry]
    levels: Mapping[str, LevelConfig]
    catalog: Catalog | None
    rules: list[BudgetRule]
    windows: Projector
    """Folds the budgets read model (`spent_in_windows`) for `rules`."""
    billings: dict[str, Billing]
    """How each level is billed under `catalog`."""


class Budgets:
    """Every budget holding a level, counting spend and the reservations of ticks in flight."""

    def __init__(
        self,
        store: EventStore,
        projector: Projector,
        prices: PriceBook,
        settings: Settings,
        router: Router | None = None,
    ) -> None:
        """`router`: its catalog in force bills the levels; else the settings' one, read once.

        The rules follow `settings` and that catalog by themselves (`_resolved`): the
        runner's and the preparer's budgets are told of no reload, and decide by the
        rules in force all the same.
        """
        self.store = store
        self.projector = projector
        self.prices = prices
        self.settings = settings
        if router is not None:
            source = router.source
            self._catalog: Callable[[], Catalog | None] = lambda: source.catalog
        else:
            read = readable_catalog(settings)
            self._catalog = lambda: read
        self._resolving = threading.Lock()
        self._known: _Resolved | None = None
        self._folded: Projector | None = None
        """The `windows` whose rules the read model was last found folded for."""
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[str, int]] = {}
        """Tick id -> (level, tokens) reserved by decisions not yet claimed in the store."""

    def _resolved(self) -> _Resolved:
        """The rules in force, resolved anew when the budgets, levels or catalog were replaced.

        Rules resolved the same as before keep their `windows`, found folded already;
        changed ones are refolded at their first read (`spent`).
        """
        entries, levels, catalog = self.settings.budgets, self.settings.levels, self._catalog()
        with self._resolving:
            known = self._known
            if (
                known is None
                or known.entries is not entries
                or known.levels is not levels
                or known.catalog is not catalog
            ):
                rules = budget_rules(self.settings, catalog)
                windows = (
                    known.windows
                    if known is not None and known.rules == rules
                    else budget_projector(self.store, self.prices, rules)
                )
                billings = level_billings(levels, catalog)
                known = self._known = _Resolved(entries, levels, catalog, rules, windows, billings)
            return known

    @property
    def rules(self) -> list[BudgetRule]:
        """Every budget in force, resolved to the levels and targets it holds."""
        return self._resolved().rules

    @property
    def windows(self) -> Projector:
        """Folds the budgets read model (`spent_in_windows`) for the rules in force."""
        return self._resolved().windows

    def billing(self, level: str) -> Billing:
        """How `level`'s ticks are paid for, which decides the limits that hold them.

        Follows the catalog in force and the levels: a reload may move a lane to targets
        billed otherwise.
        """
        return self._resolved().billings.get(level, "api")

    def spent(
        self, rules: Sequence[BudgetRule], at: datetime, fold: bool = True
    ) -> dict[str, WindowSpend]:
        """Each of `rules`' spend in its window holding `at`, the read model current first.

        The first read refolds the read model if the configured budgets changed since it
        was folded (`ensure_folded`). `fold` False: as folded so far (`spent_in_windows`).
        """
        resolved = self._resolved()
        if self._folded is not resolved.windows:
            archive = self.settings.retention.archive
            ensure_folded(self.store, resolved.windows, resolved.rules, at, archive)
            self._folded = resolved.windows
        return spent_in_windows(self.store, resolved.windows, self.prices, rules, at, fold)

    def rules_for(self, level: str) -> list[BudgetRule]:
        """The budgets a tick of `level` is held to before it starts (not target-scoped ones)."""
        return [rule for rule in self.rules if rule.covers_level(level)]

    def has_budget(self, level: str) -> bool:
        """Whether a budget holds the level, so spend must be checked before a claim."""
        return any(rule.covers_level(level) for rule in self.rules)

    def held(self) -> dict[str, tuple[str, int]]:
        """Tokens reserved by the ticks in flight, from their TickScheduled, by tick."""
        levels = self._levels_held()
        if levels is not None and not levels:
            return {}
        return reservations_in_flight(self.store, self.projector, levels)

    def _levels_held(self) -> set[str] | None:
        held: set[str] = set()
        for rule in self.rules:
            if rule.targets is None:
                if rule.levels is None:
                    return None
                held |= rule.levels
        return held

    def try_reserve(
        self,
        level: str,
        tick_id: str,
        held: Reservations | None = None,
        at: datetime | None = None,
    ) -> BudgetCheck:
        """Reserve for a tick if every budget holding it has room for it.

        `held`: tokens already reserved in the store by ticks in flight (`held()`).
        """
        rules = self.rules_for(level)
        if not rules:
            return ALLOWED
        at = at or datetime.now(UTC)
        config = self.settings.levels[level]
        spent = self.spent(rules, at)
        with self._lock:
            reservations = {**(held or {}), **self._pending}
            verdict = self._verdict(rules, spent, reservations, config.reserve_tokens, level, at)
            if verdict.allowed:
                self._pending[tick_id] = (level, config.reserve_tokens)
        return verdict

    def _verdict(
        self,
        rules: Sequence[BudgetRule],
        spent: Mapping[str, WindowSpend],
        reservations: Reservations,
        own: int,
        level: str,
        at: datetime,
    ) -> BudgetCheck:
        model = self.settings.levels[level].model if level in self.settings.levels else None
        billing = self.billing(level)
        first: BudgetCheck | None = None
        for rule in rules:
            reserved = held_by(rule, reservations)
            used = spent[rule.name]
            ok = within(rule, self.prices, used, reserved + own, model, at, billing)
            check = BudgetCheck.of(ok, rule, used, reserved, own)
            if not ok:
                return check
            first = first or check
        return first or ALLOWED

    def reserved(self, level: str, tick_id: str) -> int:
        """Tokens still held for a tick decided to run but not yet claimed in the store."""
        with self._lock:
            return self._pending.get(tick_id, (level, 0))[1]

    def settle(self, level: str, tick_id: str) -> None:
        """The decision is written (the store holds the reservation now) or void."""
        with self._lock:
            self._pending.pop(tick_id, None)

    def confirm(self, level: str, tick_id: str, at: datetime | None = None) -> BudgetCheck:
        """Whether a claimed tick still fits, counting the reservations claimed before it."""
        rules = self.rules_for(level)
        if not rules:
            return ALLOWED
        claim = settled_claim(self.store, self.projector, tick_id)
        if claim is None:
            return ALLOWED  # ended already: it holds no place
        before = {
            other: held
            for other, (position, held) in claims_in_flight(self.store, self._levels_held()).items()
            if position < claim.global_position
        }
        at = at or datetime.now(UTC)
        spent = self.spent(rules, at)
        own = int(claim.data.get("reserved_tokens", 0))
        return self._verdict(rules, spent, before, own, level, at)

    def over(self, level: str, at: datetime | None = None) -> BudgetCheck | None:
        """The first budget holding `level` whose window's spend has passed it, else None."""
        rules = self.rules_for(level)
        if not rules:
            return None
        at = at or datetime.now(UTC)
        spent = self.spent(rules, at)
        billing = self.billing(level)
        for rule in rules:
            used = spent[rule.name]
            if not within(rule, self.prices, used, 0, None, at, billing):
                return BudgetCheck.of(False, rule, used, 0, 0)
        return None


def claims_in_flight(
    store: EventStore, levels: Iterable[str] | None
) -> dict[str, tuple[int, tuple[str, int]]]:
    """Tick id -> (claim position, (level, reserved tokens)) of the ticks in flight."""
    flying = {tick_stream(t.tick_id): t for t in ticks_in_flight(store, levels)}
    claims = store.read_streams(flying, types=[TickScheduled.type])
    return {
        flying[stream].tick_id: (
            events[0].global_position,
            (flying[stream].level, int(events[0].data.get("reserved_tokens", 0))),
        )
        for stream, events in claims.items()
        if events
    }


def reservations_in_flight(
    store: EventStore, projector: Projector, levels: Iterable[str] | None, but: str | None = None
) -> dict[str, tuple[str, int]]:
    """Tick id -> (level, tokens reserved) of the ticks in flight (of `levels`), but `but`."""
    projector.catch_up(["ticks"])
    return {
        tick_id: held
        for tick_id, (_, held) in claims_in_flight(store, levels).items()
        if tick_id != but
    }
