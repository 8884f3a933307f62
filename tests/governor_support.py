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
from harness.devtools.fake_llm import FakeUpstream
from harness.devtools.serving import BackgroundServer
from harness.governor.alerts import Alerts
from harness.governor.proxy import ProxyGovernor, create_app, proxy_governor
from harness.store import Spool, open_store

SSE_GAP_SECONDS = 0.3
SOFT, HARD = 1000, 2000
"""Tokens; at 3.2 chars per token: soft from 3,200 characters, hard from 6,400."""


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


def origin_of(fake: FakeUpstream) -> str:
    return fake.url.removesuffix("/v1")


def config(upstream: str, **changes: Any) -> GovernorConfig:
    fields: dict[str, Any] = {
        "upstream": upstream,
        "soft_tokens": SOFT,
        "hard_tokens": HARD,
        "calibrate": False,
        "directive": "WRAP UP at {est} of {threshold}",
        "stop_message": "STOPPED at {est} over {threshold} {keep}",
    }
    fields.update(changes)
    return GovernorConfig(**fields)


def messages(chars: int, tail: str = "user") -> list[dict[str, Any]]:
    """A conversation of about `chars` characters whose chain ends as `tail` says."""
    chain: list[dict[str, Any]] = [{"role": "user", "content": "x" * chars}]
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    if tail in ("tool", "assistant_tool_calls"):
        chain.append({"role": "assistant", "content": None, "tool_calls": [call]})
    if tail == "tool":
        chain.append({"role": "tool", "tool_call_id": "call_1", "content": "42"})
    return chain
