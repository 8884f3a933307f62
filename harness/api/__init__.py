"""`tickwork serve`: the HTTP API, Prometheus metrics and the operator dashboard.

It owns the FastAPI application (`harness.api.app.create_app`), its routes (a module
per concern in `harness.api.routes`), the API's models, the reads every request makes
(the read models, brought up to date once per request), the metrics collector and the
dashboard's panels. Every name is loaded on first use (`harness.fronts`): `create_app`
imports FastAPI, which only `tickwork serve` should pay for, and `tickwork status` needs
only the API's `Status` model (`tickwork backfill --dry-run --json` its `BackfillForecast`).
"""

from __future__ import annotations

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from harness.api.app import create_app
    from harness.api.models import BackfillForecast, Status

__getattr__, __all__ = fronts.declared(__name__)
