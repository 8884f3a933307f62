"""The dashboard's fragments: panels, the tick list and a tick's story, as HTML."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import HTMLResponse

from harness.api import dashboard, story
from harness.api.routes.requests import FreshReads, Levels, Limit, SinceFilter, StatusFilter
from harness.contracts import redact

router = APIRouter(include_in_schema=False)


@router.get("/dashboard/panels", response_class=HTMLResponse)
def panels(
    reads: FreshReads, chart: Annotated[Literal["tokens", "usd"], Query()] = "tokens"
) -> HTMLResponse:
    """The dashboard's panels, charting tokens or USD, as the page refreshes them."""
    return HTMLResponse(dashboard.panels(reads, chart))


@router.get("/dashboard/ticks", response_class=HTMLResponse)
def tick_list_panel(
    reads: FreshReads,
    level: Levels = None,
    status: StatusFilter = None,
    since: SinceFilter = None,
    limit: Limit = 100,
    text: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """The tick list page's table; `text` searches the page the filters chose."""
    ticks = reads.ticks(levels=level, status=status, since=since, limit=limit)
    if text:
        ticks = reads.saying(ticks, text)
    return HTMLResponse(redact(dashboard.tick_table(ticks, reads.prices)))


@router.get("/dashboard/ticks/{tick_id}", response_class=HTMLResponse)
def tick_panel(tick_id: str, reads: FreshReads) -> HTMLResponse:
    """A tick's page: its story so far (404 until its first event is folded)."""
    tick = reads.tick(tick_id)
    if tick is None:
        raise HTTPException(404, f"no tick {tick_id!r} in the store (yet)")
    return HTMLResponse(redact(story.page(tick, tick_id, reads.prices)))
