"""What the routes take from a request: the server's parts as dependencies, and parameters.

The server's parts live on `app.state` (`harness.api.app.create_app` puts them there), so
a route module holds its routes at module level and asks for what it needs by type.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi import Path as PathParam
from pydantic import AfterValidator, BeforeValidator

from harness.api.models import Problem
from harness.api.reads import Reads
from harness.config import Settings
from harness.execution import ManualTicks
from harness.projections import STATUSES
from harness.timespec import parse_since


def _reads(request: Request) -> Reads:
    reads: Reads = request.app.state.reads
    return reads.fresh()


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.reads.settings
    return settings


def _manual(request: Request) -> ManualTicks:
    manual: ManualTicks = request.app.state.manual
    return manual


def client_of(request: Request) -> str:
    """Who asked, as the ledger records an operator request made over HTTP."""
    return f"http:{request.client.host if request.client else 'unknown'}"


FreshReads = Annotated[Reads, Depends(_reads)]
"""The server's reads, their read models brought up to date for this request."""
Config = Annotated[Settings, Depends(_settings)]
Manual = Annotated[ManualTicks, Depends(_manual)]
"""The owner of the ticks the run-now button starts in this process."""

Since = Annotated[datetime, BeforeValidator(parse_since)]
"""`30m`, `12h`, `7d` ago or an ISO date/time; anything else is a 422 saying so."""


def _known_status(value: str) -> str:
    if value not in STATUSES:
        raise ValueError(f"{value!r} is not a tick status (one of: {', '.join(STATUSES)})")
    return value


TickStatus = Annotated[str, AfterValidator(_known_status)]
Level = Annotated[str, PathParam(description="A configured level.")]
Levels = Annotated[list[str] | None, Query(description="Only these levels.")]
StatusFilter = Annotated[TickStatus | None, Query(description="Only ticks in this status.")]
SinceFilter = Annotated[Since | None, Query(description="30m, 12h, 7d or an ISO time.")]
Limit = Annotated[int, Query(ge=1, le=1000)]
UNKNOWN: dict[int | str, dict[str, Any]] = {404: {"model": Problem, "description": "Not found"}}
"""The answer of a route about one tick, level or digest that is not there."""
