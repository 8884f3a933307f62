"""A configuration's price book (catalog target prices, then `[prices]`) and billing.

A call's `billing` is its level's, else its catalog target's, else `api`. A tick's calls
are booked at the prices of the catalog and configuration in force when it was prepared;
reports read them as booked. Spend booked without a price (before tickwork priced as it
booked) is priced under this book when read, and `tickwork projections rebuild
--reprice` prices all of history under it.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.config import LevelConfig, Settings
from harness.contracts import Billing
from harness.prices import PriceBook, TargetPrices
from harness.routing.catalog import Catalog, CatalogError, Target, load_catalog


def target_prices(catalog: Catalog) -> dict[str, TargetPrices]:
    """The catalog's targets that carry `prices`, by id."""
    return {
        target_id: TargetPrices(target.model, target.prices)
        for target_id, target in catalog.targets.items()
        if target.prices is not None
    }


def price_book(settings: Settings) -> PriceBook:
    """Prices for `settings`: its catalog's targets (when it names a catalog), then `[prices]`.

    Raises:
        CatalogError: the catalog the configuration names cannot be read or is invalid.
    """
    path = settings.routing.catalog
    targets = target_prices(load_catalog(path)) if path is not None else {}
    return PriceBook(settings.prices, targets)


def billing_of(level: LevelConfig, target: Target | None) -> Billing:
    """How a level's calls to `target` are paid for: the level's own setting wins."""
    if level.billing is not None:
        return level.billing
    return target.billing if target is not None else "api"


def readable_catalog(settings: Settings) -> Catalog | None:
    """The catalog `settings` names, for a reader without a router: None when it names none.

    One that cannot be read is None too: every level then bills as its own `billing`
    says, else `api` (the safe side for a budget).
    """
    path = settings.routing.catalog
    try:
        return load_catalog(path) if path is not None else None
    except CatalogError:
        return None


def level_billings(
    levels: Mapping[str, LevelConfig], catalog: Catalog | None
) -> dict[str, Billing]:
    """How each of `levels`' ticks is paid for under `catalog`, before a route picks a target.

    A level billed on a subscription only when it says so, or when every target its lane
    may choose, and every target a content failure may promote those to, is: a lane
    that may end on an `api` target may bill, so budgets of billed USD hold it. Without a
    catalog (or a lane) a level bills as its own `billing` says, else `api`.
    """
    found: dict[str, Billing] = {}
    for name, level in levels.items():
        lane = catalog.lanes.get(name) if catalog is not None else None
        if level.billing is not None or catalog is None or lane is None:
            found[name] = billing_of(level, None)
            continue
        targets = [catalog.targets[target] for target in catalog.with_promotions(lane.targets())]
        paid = {billing_of(level, target) for target in targets}
        found[name] = "subscription" if paid == {"subscription"} else "api"
    return found
