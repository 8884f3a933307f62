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
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl

from anyio import to_thread
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from harness.api.metrics import Exposition
from harness.api.models import Problem
from harness.api.reads import Reads
from harness.api.routes import ROUTERS
from harness.config import Settings
from harness.contracts import redact
from harness.execution import ManualTicks
from harness.store import API_THREADS, EventStore

STATIC = Path(__file__).with_name("static")

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
        # A request is a thread holding a pooled connection: as many at once as the pool has.
        to_thread.current_default_thread_limiter().total_tokens = API_THREADS
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
    app.state.manual = manual
    token = settings.api.token.get_secret_value() if settings.api.token else None
    # Each router straight into the app: every include builds its routes' schemas anew
    # (61 ms of CPU an app through a router of routers, which built them twice).
    guard = [Depends(TokenCheck(token))]
    unauthorized: dict[int | str, dict[str, Any]] = {
        401: {"model": Problem, "description": "Missing or wrong bearer token"}
    }
    for router in ROUTERS:
        app.include_router(router, dependencies=guard, responses=unauthorized)

    @app.get("/openapi.json", include_in_schema=False, dependencies=guard)
    def openapi() -> JSONResponse:
        """The schema, behind the token like the routes it describes."""
        return JSONResponse(app.openapi())

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
