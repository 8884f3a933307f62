"""`/ticks`: the ticks a page at a time, one tick's events and result, and its live story."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator, StringConstraints

from harness.api import story
from harness.api.models import Tick, TickDetail
from harness.api.routes.requests import (
    UNKNOWN,
    FreshReads,
    Levels,
    Limit,
    SinceFilter,
    StatusFilter,
)
from harness.contracts import tick_stream
from harness.projections import TickCursor
from harness.store import ArchiveError

router = APIRouter(tags=["ticks"])


def _tick_cursor(value: str) -> str:
    TickCursor.parse(value)  # its ValueError, saying what is wrong, becomes a 422
    return value


TickCursorText = Annotated[
    str,
    StringConstraints(
        min_length=len("2026-01-01T00:00:00Z,x"),
        max_length=len("2026-01-01T00:00:00.000000Z,") + 200,  # tick ids have at most 200
    ),
    AfterValidator(_tick_cursor),
]
BeforeCursor = Annotated[
    TickCursorText | None,
    Query(
        description="Ticks after this cursor: the `before` of the previous page's next link "
        "(`<UTC time>,<tick id>`).",
        examples=["2026-12-01T13:05:00.123456Z,min-20261201T1305-1a2b3c"],
    ),
]
NEXT_PAGE_HEADER = {
    "Link": {
        "description": 'The next page, `<path?query&before=…>; rel="next"`; absent on the last.',
        "schema": {"type": "string"},
    }
}
MAX_POSITION = 2**63 - 1
"""The largest signed 64-bit integer: no stream position or file offset is larger."""
Position = Annotated[int, Query(ge=0, le=MAX_POSITION, description="Events up to here are known.")]
LogOffset = Annotated[int, Query(ge=0, le=MAX_POSITION, description="Log bytes already read.")]


@router.get("/ticks", responses={200: {"headers": NEXT_PAGE_HEADER}})
def list_ticks(
    request: Request,
    response: Response,
    reads: FreshReads,
    level: Levels = None,
    status: StatusFilter = None,
    since: SinceFilter = None,
    before: BeforeCursor = None,
    limit: Limit = 100,
) -> list[Tick]:
    """Ticks, newest first, a page at a time: the `Link` header names the next page.

    Each page costs what it holds, however long the history behind it.
    """
    cursor = None if before is None else TickCursor.parse(before)
    ticks, following = reads.tick_page(
        levels=level, status=status, since=since, before=cursor, limit=limit
    )
    if following is not None:
        url = request.url.include_query_params(before=str(following))
        response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'
    return ticks


@router.get("/ticks/{tick_id}", responses=UNKNOWN)
def one_tick(tick_id: str, reads: FreshReads) -> TickDetail:
    """A tick's events in order, its read model row and its result file."""
    try:
        detail = reads.tick(tick_id)
    except ArchiveError as exc:  # the archive that should hold it is damaged or gone
        raise HTTPException(500, str(exc)) from exc
    if detail is None:
        raise HTTPException(404, f"no tick {tick_id!r} in the store")
    return detail


@router.get("/ticks/{tick_id}/stream", response_class=StreamingResponse, responses=UNKNOWN)
def follow_tick(
    tick_id: str,
    reads: FreshReads,
    after: Position = 0,
    log_from: LogOffset = 0,
) -> StreamingResponse:
    """Server-sent events: `story` (a line per new event), `log` (new log text), `end`.

    The stream ends after the tick's terminal event.
    """
    if not reads.store.read_stream(tick_stream(tick_id), limit=1):
        raise HTTPException(404, f"no tick {tick_id!r} in the store")
    return StreamingResponse(
        story.follow(reads.store, tick_id, after, log_from),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
