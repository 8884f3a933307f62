"""The HTTP API, `/metrics` and the dashboard of `tickwork serve` (FastAPI).

Everything is read from the store, so the server can run on another host than the
scheduler; POSTs append the same operator requests as the CLI (`harness.scheduling.control`). With
a token configured (TICKWORK_API_TOKEN), every route but the dashboard's empty page and
its static files needs `Authorization: Bearer <token>`; the page's script sends it. The
OpenAPI schema is one of those routes; there is no `/docs` page (it would load its
assets from a CDN, which a machine without internet access cannot reach).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import AfterValidator, BeforeValidator, StringConstraints
from starlette.concurrency import run_in_threadpool

from harness.api import dashboard, story
from harness.api.metrics import Exposition
from harness.api.models import (
    BackfillBody,
    BackfillView,
    Cancelled,
    Cleared,
    Digest,
    Problem,
    Started,
    Status,
    Tick,
    TickDetail,
    Worker,
)
from harness.api.reads import Reads
from harness.config import Settings
from harness.contracts.events import tick_stream, utcnow
from harness.contracts.secrets import redact
from harness.execution.manual import ManualTicks
from harness.projections import SpendRow
from harness.projections.spend import ReportGroup
from harness.projections.ticks import STATUSES, TickCursor
from harness.scheduling import (
    Backfill,
    BackfillError,
    BackfillProgress,
    backfill_progress,
    cancel_backfill,
    request_backfill,
)
from harness.scheduling.budget_watch import BudgetStatus
from harness.scheduling.control import (
    ScopeError,
    Switched,
    UnknownLevelError,
    clear_cancel,
    switch_level,
)
from harness.scheduling.control import cancel as cancel_scope
from harness.scheduling.describe import LevelDescription, describe_levels
from harness.store import EventStore
from harness.timespec import parse_since

STATIC = Path(__file__).with_name("static")

Since = Annotated[datetime, BeforeValidator(parse_since)]
"""`30m`, `12h`, `7d` ago or an ISO date/time; anything else is a 422 saying so."""


def _known_status(value: str) -> str:
    if value not in STATUSES:
        raise ValueError(f"{value!r} is not a tick status (one of: {', '.join(STATUSES)})")
    return value


TickStatus = Annotated[str, AfterValidator(_known_status)]

SpendGroups = Annotated[
    list[ReportGroup] | None,
    Query(
        description="level, model, day, template (the prompt's version) and/or tag (the "
        "levels' `tags`; a level with two counts in both)."
    ),
]


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


BEARER = HTTPBearer(auto_error=False, description="TICKWORK_API_TOKEN, when it is set")


class TokenCheck:
    """The bearer check every guarded route depends on; no token configured, no check."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    def __call__(
        self, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]
    ) -> None:
        """Refuse a request whose bearer token is missing or wrong (compared in constant time)."""
        if self.token is None:
            return
        if credentials is None or not hmac.compare_digest(
            credentials.credentials.encode(), self.token.encode()
        ):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )


class RedactedJSONResponse(JSONResponse):
    """JSON answers with every secret this process knows redacted.

    A tick's events and result file quote what upstreams said, which may be an API key.
    """

    def render(self, content: Any) -> bytes:
        """The JSON answer, with every known secret redacted."""
        return redact(super().render(content).decode()).encode()


async def refuse_nul(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """A NUL byte in the path or query is refused before any route sees it.

    PostgreSQL's text cannot hold one: a tick id, level or cancel scope with a NUL would
    otherwise reach the store and answer 500 (SQLite would store it, unmatched anywhere).
    """
    query = parse_qsl(request.scope.get("query_string", b"").decode("latin-1"), True)
    where = ["path"] if "\0" in request.scope.get("path", "") else None
    for name, value in query:
        if where is None and "\0" in name + value:
            where = ["query", name]
    if where is None:
        return await call_next(request)
    detail = [{"loc": where, "msg": "a NUL byte is not allowed here", "type": "value_error"}]
    return JSONResponse({"detail": detail}, status_code=422)


def _reads(request: Request) -> Reads:
    reads: Reads = request.app.state.reads
    return reads.fresh()


def _client(request: Request) -> str:
    return f"http:{request.client.host if request.client else 'unknown'}"


FreshReads = Annotated[Reads, Depends(_reads)]
Level = Annotated[str, PathParam(description="A configured level.")]
Levels = Annotated[list[str] | None, Query(description="Only these levels.")]
StatusFilter = Annotated[TickStatus | None, Query(description="Only ticks in this status.")]
SinceFilter = Annotated[Since | None, Query(description="30m, 12h, 7d or an ISO time.")]
Limit = Annotated[int, Query(ge=1, le=1000)]
MAX_POSITION = 2**63 - 1
"""The largest signed 64-bit integer: no stream position or file offset is larger."""
MAX_NOTE = 2000
"""Characters of a pause reason or note given over HTTP."""
Position = Annotated[int, Query(ge=0, le=MAX_POSITION, description="Events up to here are known.")]
LogOffset = Annotated[int, Query(ge=0, le=MAX_POSITION, description="Log bytes already read.")]
UNKNOWN: dict[int | str, dict[str, Any]] = {404: {"model": Problem, "description": "Not found"}}
"""The answer of a route about one tick, level or digest that is not there."""
STOPPING: dict[int | str, dict[str, Any]] = {
    409: {"model": Problem, "description": "The server is stopping"}
}
UNPARSED: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "The body is not JSON"}
}
"""FastAPI's answer to a route's body that does not parse, before any field is checked."""

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
PAGES = ("dashboard", "tick", "ticks")
"""The pages: static/shell.html around each one's static/<page>.html and with its script,
which fetches the page's fragments with the token."""


def create_app(settings: Settings, store: EventStore, manual: ManualTicks) -> FastAPI:
    """The application over an open store (the caller closes it after the server stops).

    `manual` owns the ticks the run-now button starts, in this process; when the server
    stops, it ends those still running cancelled.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(manual.close)

    app = FastAPI(
        lifespan=lifespan,
        title="tickwork",
        summary="Ticks, spend, digests and control of a tickwork service.",
        default_response_class=RedactedJSONResponse,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.middleware("http")(refuse_nul)
    app.state.reads = Reads(settings, store)
    app.state.exposition = Exposition(app.state.reads)
    token = settings.api.token.get_secret_value() if settings.api.token else None
    guarded = APIRouter(
        dependencies=[Depends(TokenCheck(token))],
        responses={401: {"model": Problem, "description": "Missing or wrong bearer token"}},
    )
    _routes(guarded, settings, manual)

    @guarded.get("/openapi.json", include_in_schema=False)
    def openapi() -> JSONResponse:
        """The schema, behind the token like the routes it describes."""
        return JSONResponse(app.openapi())

    app.include_router(guarded)

    shell = (STATIC / "shell.html").read_text(encoding="utf-8")
    shells = {
        name: shell.replace("__PAGE__", name).replace(
            "__MAIN__",
            (STATIC / f"{name}.html")
            .read_text(encoding="utf-8")
            .replace("__REFRESH_SECONDS__", f"{settings.api.refresh_seconds:g}"),
        )
        for name in PAGES
    }

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(shells["dashboard"])

    @app.get("/ui/ticks", response_class=HTMLResponse, include_in_schema=False)
    def tick_list_page() -> HTMLResponse:
        return HTMLResponse(shells["ticks"])

    @app.get("/ui/ticks/{tick_id}", response_class=HTMLResponse, include_in_schema=False)
    def tick_page(tick_id: str) -> HTMLResponse:
        return HTMLResponse(shells["tick"])

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _routes(router: APIRouter, settings: Settings, manual: ManualTicks) -> None:
    @router.get("/status", tags=["status"])
    def status(reads: FreshReads) -> Status:
        """Levels and budgets, ticks running and queued, paused levels, store and lag.

        What `tickwork status` prints: running ticks with their runtime so far, the store's
        last position and how far each projection lags behind it.
        """
        return Status.of(reads.snapshot())

    @router.get("/levels", tags=["status"], responses=UNKNOWN)
    def describe(reads: FreshReads, level: Levels = None) -> list[LevelDescription]:
        """Each level's schedule in words, next 5 fire times, last runs, runs and pause.

        What `tickwork levels` prints: fire times with jitter in the level's zone and UTC,
        the pause with who, why, since when and its note.
        """
        names = list(dict.fromkeys(level)) if level else list(settings.levels)
        unknown = [name for name in names if name not in settings.levels]
        if unknown:
            raise HTTPException(404, f"no level named {unknown[0]!r}")
        return describe_levels(settings, reads.store, names, utcnow())

    @router.get("/workers", tags=["status"])
    def list_workers(reads: FreshReads) -> list[Worker]:
        """The workers of the procrastinate executor: host, concurrency, running, heartbeat.

        Empty with the local executor, whose ticks run in `tickwork run` itself.
        """
        return reads.workers()

    @router.get("/ticks", tags=["ticks"], responses={200: {"headers": NEXT_PAGE_HEADER}})
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

    @router.get("/ticks/{tick_id}", tags=["ticks"], responses=UNKNOWN)
    def one_tick(tick_id: str, reads: FreshReads) -> TickDetail:
        """A tick's events in order, its read model row and its result file."""
        detail = reads.tick(tick_id)
        if detail is None:
            raise HTTPException(404, f"no tick {tick_id!r} in the store")
        return detail

    @router.get(
        "/ticks/{tick_id}/stream",
        tags=["ticks"],
        response_class=StreamingResponse,
        responses=UNKNOWN,
    )
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

    @router.get("/spend", tags=["spend"])
    def spend(
        reads: FreshReads,
        by: SpendGroups = None,
        since: Annotated[Since | None, Query(description="7d or an ISO date (UTC days).")] = None,
    ) -> list[SpendRow]:
        """Tokens and cost grouped by level, model, UTC day and/or prompt template.

        Cost None: unpriced. A template is the hash of a level's prompt before
        substitution ("" for spend recorded without one).
        """
        return reads.spend(by or ["level"], since.date() if since else None)

    @router.get("/budgets", tags=["spend"])
    def budgets(reads: FreshReads) -> list[BudgetStatus]:
        """Each budget's window: used, reserved, remaining, window end, burn rate, run-out."""
        return reads.budgets()

    @router.get("/digests/latest", tags=["digests"], responses=UNKNOWN)
    def latest_digest(reads: FreshReads) -> Digest:
        """The last published digest and its rendered file."""
        digest = reads.latest_digest()
        if digest is None:
            raise HTTPException(404, "no digest published yet by any of [digests.<name>]")
        return digest

    @router.post(
        "/levels/{level}/tick", tags=["control"], status_code=202, responses=UNKNOWN | STOPPING
    )
    def run_now(
        level: Level,
        force: Annotated[
            bool, Query(description="Run even if the level is paused or over its budget.")
        ] = False,
    ) -> Started:
        """Start one tick now in the manual lane, as `tickwork tick LEVEL` does, owned here.

        The tick obeys pause, budget and caps unless `force`; the answer does not wait for
        it to be recorded (its page waits). A server that is stopping starts none (409).
        """
        if level not in settings.levels:
            known = ", ".join(settings.levels) or "none"
            raise HTTPException(404, f"no level named {level!r} (known: {known})")
        tick_id = manual.start(level, force=force)
        if tick_id is None:
            raise HTTPException(409, "the server is stopping: it starts no tick")
        return Started(level=level, tick_id=tick_id, page=f"/ui/ticks/{tick_id}")

    @router.post(
        "/ticks/{tick_id}/rerun", tags=["control"], status_code=202, responses=UNKNOWN | STOPPING
    )
    def rerun(tick_id: str, reads: FreshReads) -> Started:
        """Run a tick's level once more now, in the manual lane (its page's re-run button).

        The new tick is a tick of the level as it is configured now (its prompt, model
        and route), obeying pause and budget like any tick started by hand.
        """
        detail = reads.tick(tick_id)
        level = detail.tick.level if detail is not None and detail.tick is not None else None
        if level is None or level not in settings.levels:
            raise HTTPException(404, f"no tick {tick_id!r} of a configured level in the store")
        return run_now(level)

    @router.post(
        "/levels/{level}/backfill",
        tags=["control"],
        status_code=202,
        responses=UNKNOWN | UNPARSED,
    )
    def backfill(
        level: Level, body: BackfillBody, request: Request, reads: FreshReads
    ) -> BackfillView:
        """Run the level's slots in [from, to) that have no tick yet, as `tickwork backfill`.

        Recorded for the running services, which claim the slots (each once, across
        replicas) at most `max` in flight at once; its progress is in `GET /status`. An
        unknown level is a 404, a bad range a 422 naming the field (nothing recorded).
        """
        if level not in settings.levels:
            known = ", ".join(settings.levels) or "none"
            raise HTTPException(404, f"no level named {level!r} (known: {known})")
        try:
            requested = request_backfill(
                settings,
                reads.store,
                level,
                body.start,
                body.end,
                overlap=body.overlap,
                max_at_once=body.max,
                by=_client(request),
            )
        except BackfillError as exc:
            raise HTTPException(422, str(exc)) from exc
        return BackfillView.of(
            BackfillProgress(
                Backfill(requested, "open"), backfill_progress(settings, reads.store, requested)
            )
        )

    @router.post("/backfills/{backfill_id}/cancel", tags=["control"], responses=UNKNOWN)
    def cancel_backfill_route(backfill_id: str, request: Request, reads: FreshReads) -> Cancelled:
        """Cancel a backfill, as `tickwork cancel --backfill` does.

        No more of its slots are claimed and its ticks in flight are cancelled (404 for no
        open backfill of that id).
        """
        try:
            flying = cancel_backfill(reads.store, backfill_id, _client(request))
        except BackfillError as exc:
            raise HTTPException(404, str(exc)) from exc
        return Cancelled(scope=backfill_id, scopes=flying, matching=flying)

    @router.post("/levels/{level}/{action}", tags=["control"], responses=UNKNOWN)
    def switch(
        level: Level,
        action: Literal["pause", "resume"],
        request: Request,
        reads: FreshReads,
        reason: Annotated[
            str, Query(min_length=1, max_length=MAX_NOTE, description="Why, for the ledger.")
        ] = "paused by operator",
        note: Annotated[
            str | None,
            Query(max_length=MAX_NOTE, description="A note for whoever resumes the level."),
        ] = None,
    ) -> Switched:
        """Pause a level (its slots are skipped until resumed) or resume it, as the CLI does.

        A pause takes a reason and a note, as `tickwork pause --reason --note` does.
        """
        try:
            return switch_level(
                settings,
                reads.store,
                level,
                pause=action == "pause",
                by=_client(request),
                reason=reason,
                note=note,
            )
        except UnknownLevelError as exc:
            raise HTTPException(404, str(exc)) from exc

    @router.post("/cancel/{scope}", tags=["control"], responses=UNKNOWN)
    def cancel(
        scope: str,
        request: Request,
        reads: FreshReads,
        force: Annotated[
            bool, Query(description="Record a scope that matches no level and no tick.")
        ] = False,
    ) -> Cancelled:
        """Cancel a level's ticks until cleared, or the ticks in flight a tick id prefix names.

        As `tickwork cancel`: a scope matching no level and no tick in flight is a 404
        unless `force`; a tick's scope ends with its tick.
        """
        try:
            scopes, matching = cancel_scope(
                reads.store, scope, _client(request), settings.levels, force
            )
        except ScopeError as exc:
            raise HTTPException(404, str(exc)) from exc
        return Cancelled(scope=scope, scopes=scopes, matching=[t.tick_id for t in matching])

    @router.delete("/cancel/{scope}", tags=["control"])
    def clear(scope: str, request: Request, reads: FreshReads) -> Cleared:
        """End a cancel scope, as `tickwork cancel --clear`."""
        return Cleared(scope=scope, cleared=clear_cancel(reads.store, scope, by=_client(request)))

    @router.get("/metrics", tags=["metrics"], response_class=Response)
    def metrics(request: Request) -> Response:
        """Prometheus text format."""
        exposition: Exposition = request.app.state.exposition
        return Response(exposition.text(), media_type=CONTENT_TYPE_LATEST)

    @router.get("/dashboard/panels", response_class=HTMLResponse, include_in_schema=False)
    def panels(
        reads: FreshReads, chart: Annotated[Literal["tokens", "usd"], Query()] = "tokens"
    ) -> HTMLResponse:
        return HTMLResponse(dashboard.panels(reads, chart))

    @router.get("/dashboard/ticks", response_class=HTMLResponse, include_in_schema=False)
    def tick_list_panel(
        reads: FreshReads,
        level: Levels = None,
        status: StatusFilter = None,
        since: SinceFilter = None,
        limit: Limit = 100,
        text: Annotated[str | None, Query(max_length=200)] = None,
    ) -> HTMLResponse:
        ticks = reads.ticks(levels=level, status=status, since=since, limit=limit)
        if text:
            ticks = reads.saying(ticks, text)
        return HTMLResponse(redact(dashboard.tick_table(ticks, reads.prices)))

    @router.get("/dashboard/ticks/{tick_id}", response_class=HTMLResponse, include_in_schema=False)
    def tick_panel(tick_id: str, reads: FreshReads) -> HTMLResponse:
        detail = reads.tick(tick_id)
        if detail is None:
            raise HTTPException(404, f"no tick {tick_id!r} in the store (yet)")
        return HTMLResponse(redact(story.page(detail, tick_id)))
