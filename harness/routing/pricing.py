"""The price book of a configuration: its catalog's target prices before its `[prices]`.

A tick's calls are booked at the prices of the catalog and configuration in force when
it was prepared; reports read them as booked. Spend booked without a price (before
tickwork priced as it booked) is priced under this book when read, and `tickwork
projections rebuild --reprice` prices all of history under it.
"""

from __future__ import annotations

from harness.config import Settings
from harness.prices import PriceBook, TargetPrices
from harness.routing.catalog import Catalog, load_catalog


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
