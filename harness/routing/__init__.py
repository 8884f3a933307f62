"""Routing: which model a level's tick runs on, decided from the operator's catalog.

It owns the catalog (targets, a lane per level, promotions; validated whole), the
decisions made from it (the same slot routes the same way in every replica), the
promotion of a tick's target when its content retries run out, and which targets recent
ticks found down (derived from `RouteFallback` events, shared through the store).
"""

from __future__ import annotations

from harness.routing.availability import recently_down
from harness.routing.catalog import Catalog, CatalogError, load_catalog, parse_catalog
from harness.routing.decisions import (
    CatalogSource,
    Escalation,
    NaiveTimeError,
    Routed,
    Router,
    configured_router,
    decide,
    decision_fields,
)

__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogSource",
    "Escalation",
    "NaiveTimeError",
    "Routed",
    "Router",
    "configured_router",
    "decide",
    "decision_fields",
    "load_catalog",
    "parse_catalog",
    "recently_down",
]
