"""The proxy as an ASGI app: the status, or a request taken through its steps in order.

Requests are handled on the raw ASGI messages: Starlette's request and response objects
(header and URL parsing, a response object per answer) were a fifth of a request's CPU
and did nothing the proxy needs.
"""

from __future__ import annotations

import contextlib
import logging
import math

import aiohttp
import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from harness.governor.invalid import InvalidRequest
from harness.governor.proxy.dialects import ANTHROPIC_MESSAGES, counts_tokens, dialect_of
from harness.governor.proxy.incoming import Incoming, incoming, path_of, read_body
from harness.governor.proxy.limits import ProxyLimits
from harness.governor.proxy.replies import (
    send_answer,
    send_back,
    send_error,
    send_refusal,
    send_stop,
)
from harness.governor.proxy.state import Judged, ProxyGovernor
from harness.governor.proxy.upstream import UNANSWERED, upstreams
from harness.governor.rate_limit import TOO_MANY_REQUESTS, Outcome

log = logging.getLogger(__name__)

CLIENT_CLOSED = 499
"""nginx's status for a client that closed the connection before its answer: logged as
such, not as a traceback."""
STATUS_PATHS = ("/governor/status", "/governor/status/", "/governor", "/governor/")
"""Where the status answers; the earlier governor answered with and without the slash."""
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
NO_COUNT_TOKENS = frozenset({404, 405, 501})
"""An upstream's answers to `count_tokens` that mean it has none (an OpenAI-compatible
gateway, a local server): the governor answers from its estimate instead."""


class Proxy:
    """The governor in front of its upstreams (one per API); an instance is the ASGI app."""

    holds_tool_calls = False
    """Whether a streamed answer's tool calls wait for the end of its turn (`proxy.turns`):
    a tick's own governor holds them; the shared proxy relays every byte as it comes."""

    def __init__(self, governor: ProxyGovernor) -> None:
        self.governor = governor
        self.upstreams = upstreams(governor.config)
        self.limits = ProxyLimits(
            governor.ledger.store if governor.ledger is not None else None,
            governor.rate_limits,
            {api: upstream.public for api, upstream in self.upstreams.items()},
            governor.config.rate_limit_wait_seconds,
        )

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
        """The upstreams' sessions live from startup to shutdown."""
        await receive()  # lifespan.startup
        async with contextlib.AsyncExitStack() as stack:
            for upstream in dict.fromkeys(self.upstreams.values()):
                await stack.enter_async_context(upstream.connected())
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
        try:
            request = incoming(scope, body)
        except InvalidRequest as exc:
            governor.counters["invalid"] += 1
            await send_refusal(send, dialect_of(path_of(scope)), exc)
            return
        judged = self.decide(request)
        if judged is not None and (judged.reply is not None or judged.verdict.decision == "hard"):
            assert request.chat is not None, "only model calls are judged"
            stop = judged.reply or judged.verdict.text(governor.limits)
            await send_stop(send, judged.dialect, request.chat, stop)
            governor.finish(judged, None, "answered")
            return
        if judged is not None and judged.verdict.decision == "soft":
            assert request.chat is not None, "only model calls are judged"
            directive = judged.verdict.text(governor.limits)
            with_directive = judged.dialect.with_directive(request.chat, directive)
            request = request.with_body(orjson.dumps(with_directive))
        call = None
        if judged is not None:
            api = request.dialect.api
            call, outcome = await self.limits.turn(api, judged.verdict.est_tokens)
            if outcome is not None and not outcome.taken:
                await self.refuse_for_now(send, judged, outcome)
                return
        try:
            answer = await self.ask_upstream(send, request, judged)
            if answer is None:
                return
            await self.limits.answered(request.dialect.api, answer.status, answer.headers)
            if counts_tokens(request.method, request.path) and answer.status in NO_COUNT_TOKENS:
                answer.release()
                await self.count_tokens(send, request)
                return
            await send_back(send, receive, governor, request, answer, judged, self.holds_tool_calls)
        finally:
            await self.limits.ended(call)

    async def refuse_for_now(self, send: Send, judged: Judged, outcome: Outcome) -> None:
        """A 429 of the proxy's own: the call's turn under a shared rate limit is too far off."""
        self.governor.counters["rate_limited"] += 1
        wait = math.ceil(outcome.turn)
        message = (
            f"governor: the shared rate limit of {outcome.bucket} ({outcome.reason}) gives "
            f"this request a turn in {wait} s"
        )
        document = judged.dialect.error_document(message, TOO_MANY_REQUESTS, None)
        await send_answer(send, TOO_MANY_REQUESTS, document, **{"retry-after": str(wait)})
        self.governor.finish(judged, TOO_MANY_REQUESTS, "answered")

    def decide(self, request: Incoming) -> Judged | None:
        """The governor's verdict on a model call; None for a request only passed on."""
        if request.chat is None:
            if request.malformed_chat:
                self.governor.counters["not_json_passed_through"] += 1
            return None
        return self.governor.judge(request.dialect, request.chat, request.tick_id)

    async def ask_upstream(
        self, send: Send, request: Incoming, judged: Judged | None
    ) -> aiohttp.ClientResponse | None:
        """The upstream's answer; None when it gave none (the client has heard why)."""
        upstream = self.upstreams[request.dialect.api]
        try:
            return await upstream.forward(request)
        except UNANSWERED as exc:
            self.governor.counters["upstream_errors"] += 1
            message = upstream.unreachable(exc)
            log.warning("%s", message)
            await send_error(send, request.dialect, 502, message)
            if judged is not None:
                self.governor.finish(judged, None, "unreachable")
            return None

    async def count_tokens(self, send: Send, request: Incoming) -> None:
        """Anthropic's `count_tokens` from the governor's own estimate of the request."""
        try:
            body = ANTHROPIC_MESSAGES.parse(request.body)
        except InvalidRequest as exc:
            self.governor.counters["invalid"] += 1
            await send_refusal(send, ANTHROPIC_MESSAGES, exc)
            return
        assert body is not None, "Anthropic's parse refuses what it cannot read"
        tokens = self.governor.estimate(ANTHROPIC_MESSAGES, body)
        await send_answer(send, 200, {"input_tokens": tokens})


def create_app(governor: ProxyGovernor) -> ASGIApp:
    """The proxy app, with a pooled aiohttp session to each upstream for its lifetime."""
    return Proxy(governor)
