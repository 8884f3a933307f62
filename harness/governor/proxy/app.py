"""The proxy as an ASGI app: the status, or a request taken through its steps in order.

Requests are handled on the raw ASGI messages: Starlette's request and response objects
(header and URL parsing, a response object per answer) were a fifth of a request's CPU
and did nothing the proxy needs.
"""

from __future__ import annotations

import logging

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from harness.governor.proxy.incoming import Incoming, incoming, read_body
from harness.governor.proxy.replies import send_answer, send_back, stop_answer
from harness.governor.proxy.state import Judged, ProxyGovernor
from harness.governor.proxy.upstream import UNANSWERED, Upstream
from harness.governor.wire import with_directive

log = logging.getLogger(__name__)

CLIENT_CLOSED = 499
"""nginx's status for a client that closed the connection before its answer: logged as
such, not as a traceback."""
STATUS_PATHS = ("/governor/status", "/governor/status/", "/governor", "/governor/")
"""Where the status answers; the earlier governor answered with and without the slash."""
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


class Proxy:
    """The governor in front of one upstream; an instance is the ASGI app."""

    def __init__(self, governor: ProxyGovernor) -> None:
        self.governor = governor
        self.upstream = Upstream(governor.config)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Status or forward, told apart by two comparisons instead of Starlette's router.

        The router and its middleware cost about a tenth of a request's time in the proxy
        and decided nothing more than this.
        """
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method = scope["method"]
        if method == "GET" and scope["path"] in STATUS_PATHS:
            # Any origin may read it, as the earlier governor's UI did from its own page.
            status = self.governor.status()
            await send_answer(send, 200, status, **{"Access-Control-Allow-Origin": "*"})
        elif method in METHODS:
            await self.forward(scope, receive, send)
        else:
            await send_answer(send, 405, Allow=", ".join(METHODS))

    async def lifespan(self, receive: Receive, send: Send) -> None:
        """The upstream session lives from startup to shutdown."""
        await receive()  # lifespan.startup
        async with self.upstream.connected():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})

    async def forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request's path: read, decide, forward, send back (settling on the way out)."""
        governor = self.governor
        body = await read_body(receive)
        if body is None:
            governor.client_gone()
            await send_answer(send, CLIENT_CLOSED)
            return
        governor.counters["requests"] += 1
        request = incoming(scope, body)
        judged = self.decide(request)
        if judged is not None and judged.verdict.decision == "hard":
            assert request.chat is not None, "only chats are judged"
            stop = stop_answer(request.chat, judged.verdict.text(governor.limits))
            await stop(scope, receive, send)
            governor.finish(judged, None, "answered")
            return
        if judged is not None and judged.verdict.decision == "soft":
            assert request.chat is not None, "only chats are judged"
            directive = judged.verdict.text(governor.limits)
            request = request.with_body(orjson.dumps(with_directive(request.chat, directive)))
        try:
            answer = await self.upstream.forward(request)
        except UNANSWERED as exc:
            governor.counters["upstream_errors"] += 1
            message = self.upstream.unreachable(exc)
            log.warning("%s", message)
            error = {"message": message, "type": "upstream_error", "code": 502}
            await send_answer(send, 502, {"error": error})
            if judged is not None:
                governor.finish(judged, None, "unreachable")
            return
        await send_back(send, receive, governor, request.method, answer, judged)

    def decide(self, request: Incoming) -> Judged | None:
        """The governor's verdict on a chat; None for a request that is only passed on."""
        if request.chat is None:
            if request.malformed_chat:
                self.governor.counters["not_json_passed_through"] += 1
            return None
        return self.governor.judge(request.chat, request.tick_id)


def create_app(governor: ProxyGovernor) -> ASGIApp:
    """The proxy app, with one pooled aiohttp session to the upstream for its lifetime."""
    return Proxy(governor)
