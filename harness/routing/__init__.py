"""Routing: which model a level's tick runs on, decided from the operator's catalog.

It owns the catalog (targets, a lane per level, promotions; validated whole), the
decisions made from it (the same slot routes the same way in every replica), the
promotion of a tick's target when its content retries run out, which targets recent
ticks found down (derived from `RouteFallback` events, shared through the store), every
catalog in force by revision (`history`), the prices its targets carry (`pricing`) and
the quota probes (`quota`: it pulls in an HTTP client). Every name is loaded on first
use (`harness.fronts`), so a worker that probes a quota and a command that reads the
catalog each pay only for their own part.
"""

from __future__ import annotations

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from harness.routing.availability import recently_down, vouched_for
    from harness.routing.catalog import Catalog, CatalogError, load_catalog, parse_catalog
    from harness.routing.decisions import (
        CatalogSource,
        Escalation,
        NaiveTimeError,
        Report,
        Routed,
        Router,
        configured_router,
        decide,
        decision_fields,
    )
    from harness.routing.history import RevisionError, catalog_record, recorded_catalog
    from harness.routing.pricing import (
        billing_of,
        level_billings,
        price_book,
        readable_catalog,
        target_prices,
    )
    from harness.routing.quota import QuotaExhaustedError, QuotaGate, answer_quota

__getattr__, __all__ = fronts.declared(__name__)
