"""The API's routes, a module per concern, each with its `router` at module level.

`ROUTERS` is the order they are served in (a path's first match answers, so
`/levels/{level}/tick` stands before `/levels/{level}/{action}` in `control`).
"""

from __future__ import annotations

from fastapi import APIRouter

from harness.api.routes import control, dashboard, digests, metrics, spend, status, ticks

ROUTERS: tuple[APIRouter, ...] = (
    status.router,
    ticks.router,
    spend.router,
    digests.router,
    control.router,
    metrics.router,
    dashboard.router,
)

__all__ = ["ROUTERS"]
