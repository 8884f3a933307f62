"""`[[budgets]]` checked against the rest of the file, and the levels' old daily keys as entries.

An entry alone is validated by `harness.contracts.budgets.BudgetEntry`; what needs the
whole file lives here. The rules, each reported with the entry's path (`budgets.2.scope`):

- names are unique (alerts, the read model and `tickwork budgets` key on them);
- a `level:` scope names a configured level, a `tag:` scope a tag some level carries, a
  `target:` or `provider:` scope needs a routing catalog (whose load checks the target);
- two budgets *overlap* when they have the same scope, window and time zone: one of the
  two limits could never be the one that binds, so the file says two things at once;
- a budget is *contradictory* when a broader one (global ⊇ tag ⊇ level, same window,
  zone and unit) has a limit no larger: the narrower one can never bind and only
  pretends to be a control;
- a budget is *unpayable* when its limit is below what one tick of a level it covers
  reserves (`reserve_tokens`; in USD at the level model's price, where a price is
  known; a `usd` limit never holds a level billed on a subscription, `list_usd` does):
  every slot of that level would be skipped, at any spend.

A level's `daily_token_budget`/`daily_usd_budget` is the entry `level-<name>-daily`
(scope `level:<name>`, a UTC day, action `stop`) and obeys the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from harness.contracts import BudgetEntry, BudgetRule

if TYPE_CHECKING:
    from harness.config.settings import LevelConfig


def legacy_budgets(levels: Mapping[str, LevelConfig]) -> list[BudgetEntry]:
    """The levels' daily keys as budget entries (a UTC day, action stop)."""
    return [
        BudgetEntry(
            name=legacy_name(name),
            scope=f"level:{name}",
            window="day",
            tokens=level.daily_token_budget,
            usd=level.daily_usd_budget,
        )
        for name, level in levels.items()
        if level.daily_token_budget is not None or level.daily_usd_budget is not None
    ]


def legacy_name(level: str) -> str:
    """The budget a level's daily keys become."""
    return f"level-{level}-daily"


def host_of(url: str | None) -> str | None:
    """The host a `provider:` scope names, of an endpoint URL."""
    return urlsplit(url).hostname if url else None


def resolve_budget(
    entry: BudgetEntry, levels: Mapping[str, LevelConfig], target_hosts: Mapping[str, str]
) -> BudgetRule:
    """The entry with its scope turned into the levels and targets it holds."""
    kind, name = entry.scope_kind, entry.scope_name
    held_levels: frozenset[str] | None = None
    targets: frozenset[str] | None = None
    if kind == "level":
        held_levels = frozenset({name})
    elif kind == "tag":
        held_levels = frozenset(level for level, config in levels.items() if name in config.tags)
    elif kind == "target":
        targets = frozenset({name})
    elif kind == "provider":
        targets = frozenset(t for t, host in target_hosts.items() if host == name)
    return BudgetRule(
        name=entry.name,
        scope=entry.scope,
        window=entry.window,
        zone=entry.timezone,
        tokens=entry.tokens,
        usd=entry.usd,
        alert_at=tuple(entry.alert_at),
        action=entry.action,
        levels=held_levels,
        targets=targets,
        list_usd=entry.list_usd,
    )


def _where(index: int, entry: BudgetEntry, own: int) -> str:
    if index < own:
        return f"budgets.{index}"
    return f"levels.{entry.scope_name}.daily_*_budget"


def _limit_path(index: int, entry: BudgetEntry, own: int, unit: str) -> str:
    """Where a budget's `tokens` or `usd` limit is written (a level's old daily key)."""
    if index < own:
        return f"budgets.{index}.{unit}"
    return f"levels.{entry.scope_name}.daily_{'token' if unit == 'tokens' else unit}_budget"


PriceOf = Callable[[str, int], float | None]
"""USD of so many prompt tokens on a model (None: no price known)."""


def unpayable(
    entries: Sequence[BudgetEntry],
    levels: Mapping[str, LevelConfig],
    usd_of: PriceOf | None,
    routed: Collection[str],
) -> Iterator[str]:
    """Each budget, with its limit's path, that cannot pay one tick of a level it covers.

    Token limits always; USD limits only with `usd_of`, at the level's own model. A level
    in `routed` (a lane of the catalog in force routes it: its lane's targets run, not its
    model, maybe on a subscription) or with an unpriced model says nothing: its price is
    not known here. A `usd` limit (billed) not for a level billed on a subscription,
    which it never holds.
    """
    every = [*entries, *legacy_budgets(levels)]
    for index, entry in enumerate(every):
        rule = resolve_budget(entry, levels, {})
        if rule.targets is not None:
            continue
        for name in sorted(levels if rule.levels is None else rule.levels & levels.keys()):
            level = levels[name]
            reserve = level.reserve_tokens
            if rule.tokens is not None and rule.tokens < reserve:
                yield (
                    f"{_limit_path(index, entry, len(entries), 'tokens')}: "
                    f"budget {entry.name!r} ({rule.tokens:,} tokens) cannot pay one tick of "
                    f"level {name!r}, which reserves {reserve:,} tokens (reserve_tokens): "
                    "raise the limit or lower the reservation"
                )
            usd = (
                usd_of(level.model, reserve)
                if usd_of is not None and level.model and name not in routed
                else None
            )
            for unit, limit in rule.usd_limits(level.billing or "api"):
                if usd is not None and limit < usd:
                    yield (
                        f"{_limit_path(index, entry, len(entries), unit)}: "
                        f"budget {entry.name!r} (USD {limit:g}) cannot pay one tick of level "
                        f"{name!r}, which reserves {reserve:,} tokens, USD {usd:.6g} at "
                        f"{level.model}'s price: raise the limit or lower the reservation"
                    )


def budget_problems(
    entries: Sequence[BudgetEntry], levels: Mapping[str, LevelConfig], has_catalog: bool
) -> Iterator[str]:
    """Every problem of the file's budgets, each with its path; none when they are sound."""
    own = len(entries)
    every = [*entries, *legacy_budgets(levels)]
    tags = {tag for config in levels.values() for tag in config.tags}
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"budgets.{index}"
        if entry.name in seen:
            yield f"{where}.name: {entry.name!r} is also budgets.{seen[entry.name]}'s name"
        seen.setdefault(entry.name, index)
        if entry.scope_kind == "level" and entry.scope_name not in levels:
            known = ", ".join(levels) or "none"
            yield f"{where}.scope: no level named {entry.scope_name!r} (known: {known})"
        if entry.scope_kind in ("target", "provider") and not has_catalog:
            yield (
                f"{where}.scope: a {entry.scope_kind}: scope needs a [routing] catalog "
                "(its targets are what such a budget limits)"
            )
        if entry.scope_kind == "tag" and entry.scope_name not in tags:
            yield (
                f"{where}.scope: no level carries tag {entry.scope_name!r} "
                f"(tags = [...] on a level; known: {', '.join(sorted(tags)) or 'none'})"
            )
    yield from unpayable(entries, levels, None, ())
    rules = [resolve_budget(entry, levels, {}) for entry in every]
    for i, (a, rule_a) in enumerate(zip(every, rules, strict=True)):
        for j in range(i + 1, len(every)):
            b, rule_b = every[j], rules[j]
            if (a.window, a.timezone) != (b.window, b.timezone):
                continue
            if a.scope == b.scope:
                yield (
                    f"{_where(j, b, own)}: overlaps {_where(i, a, own)} (same scope "
                    f"{a.scope!r} and window {a.window!r}): merge them into one entry"
                )
                continue
            yield from _never_binds(i, a, rule_a, j, b, rule_b, own)


def _never_binds(
    i: int, a: BudgetEntry, rule_a: BudgetRule, j: int, b: BudgetEntry, rule_b: BudgetRule, own: int
) -> Iterator[str]:
    """A narrower budget whose limit a broader one (same window) always reaches first."""
    for narrow, n, wide, w in ((rule_a, i, rule_b, j), (rule_b, j, rule_a, i)):
        if narrow.targets is not None or wide.targets is not None:
            continue  # target scopes cross level scopes: neither holds the other
        inside = wide.levels is None or (narrow.levels is not None and narrow.levels <= wide.levels)
        if not inside or narrow.levels == wide.levels:
            continue
        for unit in ("tokens", "usd", "list_usd"):
            limit, cap = getattr(narrow, unit), getattr(wide, unit)
            if limit is not None and cap is not None and limit >= cap:
                entry_n, entry_w = (a, b) if n == i else (b, a)
                yield (
                    f"{_where(n, entry_n, own)}.{unit}: {limit:g} can never bind: "
                    f"{_where(w, entry_w, own)} ({wide.scope}, same window) stops at "
                    f"{cap:g} first; lower it or drop it"
                )
