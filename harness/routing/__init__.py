"""Routing: which model a level's tick runs on, decided from the operator's catalog.

It owns the catalog (targets, a lane per level, promotions; validated whole), the
decisions made from it (the same slot routes the same way in every replica), the
promotion of a tick's target when its content retries run out, which targets recent
ticks found down (derived from `RouteFallback` events, shared through the store), every
catalog in force by revision (`history`) and the quota probes (`quota`, imported by the
worker on its own: it pulls in an HTTP client).
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
from harness.routing.history import RevisionError, catalog_record, recorded_catalog

__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogSource",
    "Escalation",
    "NaiveTimeError",
    "RevisionError",
    "Routed",
    "Router",
    "catalog_record",
    "configured_router",
    "decide",
    "decision_fields",
    "load_catalog",
    "parse_catalog",
    "recently_down",
    "recorded_catalog",
]
