"""A real governor proxy on a real port, and a real upstream that echoes what it got."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.config import GovernorConfig
from harness.devtools.serving import BackgroundServer
from harness.governor.alerts import Alerts
from harness.governor.proxy import ProxyGovernor, create_app, proxy_governor
from harness.store import Spool, open_store

SSE_GAP_SECONDS = 0.3


async def _echo(request: Request) -> Response:
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": [[k.decode(), v.decode()] for k, v in request.headers.raw],
            "body": (await request.body()).decode("latin-1"),
        },
        headers={"x-upstream": "echo"},
    )


async def _slow_sse(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        for index in range(4):
            if index:
                await asyncio.sleep(SSE_GAP_SECONDS)
            yield f'data: {{"n": {index}}}\n\n'.encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


def echo_app() -> Starlette:
    methods = ["GET", "POST", "PUT", "DELETE", "PATCH"]
    return Starlette(
        routes=[
            Route("/slow-sse", _slow_sse, methods=["GET", "POST"]),
            Route("/{path:path}", _echo, methods=methods),
        ]
    )


@contextmanager
def serving(app: Any, name: str) -> Iterator[str]:
    server = BackgroundServer(app, name=name)
    origin = server.start()
    try:
        yield origin
    finally:
        server.stop()


@contextmanager
def governor_proxy(
    config: GovernorConfig,
    store_url: str | None = None,
    spool: Path | None = None,
    alerts: Alerts | None = None,
) -> Iterator[tuple[str, ProxyGovernor]]:
    """The proxy app on a real socket, recording into the store at `store_url` if given."""
    store = open_store(store_url) if store_url else None
    spool_dir = spool or Path(tempfile.mkdtemp(prefix="governor-spool-"))
    try:
        with (
            proxy_governor(config, store, Spool(spool_dir), alerts or Alerts(())) as governor,
            serving(create_app(governor), "governor proxy") as origin,
        ):
            yield origin, governor
    finally:
        if store is not None:
            store.close()
