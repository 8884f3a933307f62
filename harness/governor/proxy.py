"""`tickwork governor`: the context-size guard as an OpenAI-compatible HTTP proxy.

Every request goes to the upstream unchanged (method, path, query, end-to-end headers,
body) and its answer comes back chunk by chunk as it arrives, except chat completions:
those are measured first, and get the wrap-up directive (soft) or are answered by the
governor itself without reaching the upstream (hard). A body that is not a JSON chat
request is passed on untouched; the upstream answers it as it would without the proxy.

The usage of each answer calibrates the model's chars-per-token ratio and, for clients
that are not ticks, is booked as `BudgetSpent` (source `proxy`) in the same ledger as the
ticks' spend. Requests of ticks (the `X-Tickwork-Tick` header) are governed and
calibrated here but recorded by their own worker, so nothing is counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from base64 import b64encode
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import IO, Any, Literal
from urllib.parse import unquote, urlsplit

import aiohttp
import orjson
from multidict import CIMultiDict
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from harness.config import GovernorConfig
from harness.contracts.calibration import Sample
from harness.contracts.events import BudgetSpent
from harness.contracts.payload import TICK_HEADER
from harness.governor.alerts import Alerts, Announcer
from harness.governor.calibration import Calibrations
from harness.governor.estimate import openai_request_chars, tokens_from_chars
from harness.governor.ledger import Entry, Ledger
from harness.governor.policy import Verdict, decide
from harness.governor.wire import (
    MAX_BUFFERED_BYTES,
    Usage,
    UsageScanner,
    stop_completion,
    stop_stream,
    tail_of,
    with_directive,
)
from harness.projections.calibration import current_calibrations
from harness.store import EventStore, Spool

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Headers that describe one connection, not the request: never forwarded as they are."""

CLIENT_CLOSED = 499
"""nginx's status for a client that closed the connection before its answer: logged as
such, not as a traceback."""
RECENT_DECISIONS = 50
EARLIER_COUNTERS = ("chat", "soft", "hard", "passthrough", "tokens_prompt", "tokens_completion")
"""The earlier governor's counters, shown from the start (at 0) for the dashboards reading
them; `passthrough` counts the chat requests forwarded as sent (pass and defer)."""
FORWARDED_AS_SENT = ("pass", "defer")
Ending = Literal["answered", "cut", "client_gone", "unreachable"]
"""How a chat request ended: answered in full (by the upstream, or by the governor's hard
stop), its answer cut or stalled upstream, its client gone first, or no upstream answer."""
KEEPALIVE_SECONDS = 2.0
"""Shorter than servers' idle timeouts (uvicorn: 5 s), so a pooled connection is not reused
in the instant the upstream closes it."""
STATUS_PATHS = ("/governor/status", "/governor/status/", "/governor", "/governor/")
"""Where the status answers; the earlier governor answered with and without the slash."""
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
SKIP_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
"""The client's own headers go through as they came; aiohttp must not add defaults."""


def chat_request(method: str, path: str, body: bytes) -> dict[str, Any] | None:
    """The parsed chat request, or None for anything the proxy must only pass on."""
    if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
        return None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        return None
    return document


def episode_of(body: dict[str, Any]) -> str:
    """A conversation is known by its model and opening messages, which every turn resends."""
    opening = orjson.dumps([body.get("model"), body["messages"][:2]], default=str)
    return hashlib.sha256(opening).hexdigest()[:16]


class ProxyGovernor:
    """What the proxy knows between requests: calibration, counters, recent decisions."""

    def __init__(
        self,
        config: GovernorConfig,
        calibrations: Calibrations,
        ledger: Ledger | None,
        alerts: Alerts,
        decision_log: IO[str] | None = None,
    ) -> None:
        self.config = config
        self.limits = config.limits()
        self.calibrations = calibrations
        self.ledger = ledger
        self.alerts = alerts
        self.decision_log = decision_log
        self.announcer = Announcer(
            config.announce_url, config.announce_throttle_seconds, config.announce_text
        )
        self.started = time.monotonic()
        self.counters: Counter[str] = Counter()
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_DECISIONS)

    def judge(self, body: dict[str, Any], tick_id: str | None) -> tuple[Verdict, dict[str, Any]]:
        """Decide on one request, count it and keep it in the recent decisions the status shows.

        Returns the verdict and its entry among the recent decisions, which `settle` completes
        with the exact prompt tokens once the answer reports them.
        """
        model = str(body.get("model") or "")
        chars = openai_request_chars(body)
        verdict = decide(
            self.limits, model, chars, self.calibrations.ratio(model), tail_of(body["messages"])
        )
        self.counters[verdict.decision] += 1
        self.counters["chat"] += 1
        if verdict.decision in FORWARDED_AS_SENT:
            self.counters["passthrough"] += 1
        entry: dict[str, Any] = {
            "at": datetime.now(UTC).isoformat(),
            "decision": verdict.decision,
            "model": model,
            "chars": chars,
            "est_tokens": verdict.est_tokens,
            "threshold": verdict.threshold,
            "chars_per_token": round(verdict.ratio, 4),
            "exact_prompt_tokens": None,
            "streamed": bool(body.get("stream")),
            "status": None,
            "ended": None,
        }
        self.recent.append(entry)
        if verdict.decision != "pass":
            self._record(tick_id, lambda: verdict.event("proxy", None))
        if self.alerts.urls and self.alerts.opens_episode(episode_of(body), verdict):
            task = asyncio.get_running_loop().run_in_executor(
                None, self.alerts.send, verdict, "governor proxy"
            )
            task.add_done_callback(lambda done: done.exception())
        if self.announcer.due(verdict):
            announced = asyncio.get_running_loop().run_in_executor(
                None, self.announcer.post, verdict
            )
            announced.add_done_callback(lambda done: done.exception())
        return verdict, entry

    def settle(
        self,
        verdict: Verdict,
        entry: dict[str, Any],
        usage: Usage | None,
        answer_chars: int,
        tick_id: str | None,
    ) -> None:
        """Calibrate from the answer's usage, count its exact tokens and book its spend."""
        model = verdict.model
        if usage is not None:
            entry["exact_prompt_tokens"] = usage.prompt_tokens
            self.counters["tokens_prompt"] += usage.prompt_tokens
            self.counters["tokens_completion"] += usage.completion_tokens
        if usage is None:
            self.counters["no_usage"] += 1
            prompt = verdict.est_tokens
            completion = tokens_from_chars(answer_chars, verdict.ratio)
        else:
            sample = Sample(verdict.chars, usage.prompt_tokens, usage.cached_tokens, usage.cached)
            self.counters[f"calibration_{self.calibrations.learn(model, sample)}"] += 1
            if not sample.tiny:
                self._record(tick_id, lambda: sample.event(model, "proxy", None))
            prompt, completion = sample.tokens, usage.completion_tokens
        day = f"proxy-{datetime.now(UTC):%Y%m%d}"
        level = self.config.ledger_level
        cached = usage.cached_tokens if usage else None

        def spent() -> BudgetSpent:
            return BudgetSpent(
                tick_id=day,
                level=level,
                model=model,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cache_read_tokens=cached,
                estimated=usage is None,
                source="proxy",
            )

        self._record(tick_id, spent)

    def finish(self, entry: dict[str, Any], status: int | None, ended: Ending) -> None:
        """Complete a decision with how its answer ended, and write its line to the log.

        The line is written only now, so it holds the exact prompt tokens next to the
        estimate, and the upstream's status (None when the upstream was not asked or did
        not answer): estimate against truth can be checked from the log alone.
        """
        if entry["ended"] is not None:
            return  # the client left just as the relay had finished the answer: one line
        entry["status"] = status
        entry["ended"] = ended
        if self.decision_log is not None:
            self.decision_log.write(orjson.dumps(entry).decode() + "\n")

    def client_gone(self) -> None:
        """Count a client that left before its answer ended."""
        self.counters["client_gone"] += 1

    def _record(self, tick_id: str | None, entry: Entry) -> None:
        if self.ledger is not None and tick_id is None:
            self.ledger.record(entry)

    def status(self) -> dict[str, Any]:
        """What `/governor/status` reports: limits, counters, learned ratios, recent decisions."""
        learned = self.calibrations.models
        return {
            "ok": True,
            "uptime_s": int(time.monotonic() - self.started),
            "upstream": self.config.public_upstream,
            "soft_tokens": self.limits.soft_tokens,
            "hard_tokens": self.limits.hard,
            "soft": self.limits.soft_tokens,
            "hard": self.limits.hard or None,
            "calibrate": self.limits.calibrate,
            "initial_chars_per_token": self.limits.chars_per_token,
            "calibration_default": self.limits.chars_per_token,
            "exempt_models": list(self.limits.exempt_models),
            "counters": dict.fromkeys(EARLIER_COUNTERS, 0) | self.counters,
            "alerts": {"targets": len(self.alerts.urls), "sent": self.alerts.sent},
            "announce": {
                "on": self.announcer.url is not None,
                "sent": self.announcer.sent,
                "failed": self.announcer.failed,
            },
            "calibration": {
                model: {
                    "chars_per_token": round(self.calibrations.ratio(model), 4),
                    "samples": state.samples,
                    "ignored": state.ignored,
                }
                for model, state in sorted(learned.items())
            },
            "decisions": list(self.recent),
            "recent": [earlier_entry(entry) for entry in reversed(self.recent)],
        }


def earlier_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A decision as the earlier governor's `recent` listed it, for the dashboards reading it."""
    decision = entry["decision"]
    return {
        "t": int(datetime.fromisoformat(entry["at"]).timestamp()),
        "model": entry["model"],
        "est": entry["est_tokens"],
        "exact": entry["exact_prompt_tokens"],
        "action": "passthrough" if decision == "pass" else decision,
    }


@contextlib.contextmanager
def proxy_governor(
    config: GovernorConfig, store: EventStore | None, spool: Spool, alerts: Alerts
) -> Iterator[ProxyGovernor]:
    """The governor's state, started from the calibration projection; flushed on exit."""
    with contextlib.ExitStack() as stack:
        ledger = Ledger(store, spool)
        stack.callback(ledger.close)
        decision_log = None
        if config.log is not None:
            decision_log = stack.enter_context(config.log.open("a", encoding="utf-8", buffering=1))
        learned = current_calibrations(store) if store is not None else {}
        calibrations = Calibrations(config.chars_per_token, learned, config.calibrate)
        yield ProxyGovernor(config, calibrations, ledger, alerts, decision_log)


DROPPED = frozenset(name.encode() for name in HOP_BY_HOP)
"""The hop-by-hop headers as ASGI names them (bytes, lowercase)."""
DROPPED_FOR_CHAT = DROPPED | {b"accept-encoding"}
"""A chat answer's usage must be readable here, so it is asked for uncompressed."""
TICK_NAME = TICK_HEADER.lower().encode()


async def _body(receive: Receive) -> bytes | None:
    """The request's body as the server hands it on; None when the client left first."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def _answer(send: Send, status: int, document: Any = None, **headers: str) -> None:
    """A whole answer of the proxy's own (JSON when there is a document), sent in two messages."""
    body = b"" if document is None else orjson.dumps(document)
    raw = [(b"content-length", b"%d" % len(body))]
    if document is not None:
        raw.append((b"content-type", b"application/json"))
    raw.extend((name.lower().encode(), value.encode("latin-1")) for name, value in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _relay_to(
    send: Send,
    receive: Receive,
    chunks: AsyncIterator[bytes],
    watch: bool,
    on_gone: Callable[[], None],
) -> None:
    """Send the relayed body; a streamed one ends early (cancelled) when the client leaves.

    Starlette's StreamingResponse ran an anyio task group per response to notice a client
    that goes away, which was the proxy's largest cost after the HTTP client. An answer
    of unknown length that is not a stream is relayed without a watcher; a stream, which
    can last minutes, gets one plain asyncio task that cancels the relay (and so releases
    the upstream connection) when the client is gone.
    """
    if not watch:
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    relay = asyncio.current_task()
    assert relay is not None, "ASGI apps run in a task"
    gone = False

    async def watcher() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        relay.cancel()

    watching = asyncio.get_running_loop().create_task(watcher())
    try:
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except asyncio.CancelledError:
        if not gone:
            raise
        relay.uncancel()
        on_gone()
    finally:
        watching.cancel()


def _cut(governor: ProxyGovernor, exc: BaseException) -> str:
    """Count an upstream that cut or stalled its answer; why, in words for the client."""
    governor.counters["upstream_cut"] += 1
    reason = (
        f"the upstream was silent for {governor.config.upstream_idle_seconds:g} s"
        if isinstance(exc, TimeoutError)
        else f"the upstream cut the answer ({type(exc).__name__})"
    )
    log.warning("governor: %s", reason)
    return f"governor: {reason}"


def create_app(governor: ProxyGovernor) -> ASGIApp:
    """The proxy app, with one pooled aiohttp session to the upstream for its lifetime.

    aiohttp, not httpx: its HTTP/1.1 parser is C, and the outgoing client was two thirds
    of the proxy's CPU per request with httpx's pure-Python one (ops/bench/RESULTS.md).
    Requests are handled on the raw ASGI messages: Starlette's request and response
    objects (header and URL parsing, a response object per answer) were a fifth of a
    request's CPU and did nothing the proxy needs.
    """
    config = governor.config
    if not config.upstream:
        raise ValueError("the governor needs an upstream: set [governor] upstream or GOV_UPSTREAM")
    # Credentials in the URL become the Authorization of requests that bring none of their
    # own: aiohttp refuses a request with both.
    upstream = config.public_upstream.rstrip("/")
    given = urlsplit(config.upstream)
    basic = (
        "Basic "
        + b64encode(f"{unquote(given.username)}:{unquote(given.password or '')}".encode()).decode()
        if given.username
        else None
    )
    sessions: list[aiohttp.ClientSession] = []

    async def forward(scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(receive)
        if body is None:
            governor.client_gone()
            await _answer(send, CLIENT_CLOSED)
            return
        governor.counters["requests"] += 1
        method = scope["method"]
        path = scope.get("root_path", "") + scope["path"]
        chat = chat_request(method, path, body)
        drop = DROPPED if chat is None else DROPPED_FOR_CHAT
        tick_id: str | None = None
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in scope["headers"]:
            if name == TICK_NAME:
                tick_id = value.decode("latin-1")
            if name not in drop:
                headers.add(name.decode("latin-1"), value.decode("latin-1"))
        verdict: Verdict | None = None
        entry: dict[str, Any] = {}
        if chat is not None:
            verdict, entry = governor.judge(chat, tick_id)
            if verdict.decision == "hard":
                await _stop_answer(chat, verdict.text(governor.limits))(scope, receive, send)
                governor.finish(entry, None, "answered")
                return
            if verdict.decision == "soft":
                body = orjson.dumps(with_directive(chat, verdict.text(governor.limits)))
        elif method == "POST" and path.endswith("/chat/completions"):
            governor.counters["not_json_passed_through"] += 1
        query = scope.get("query_string", b"")
        url = upstream + path + (f"?{query.decode('latin-1')}" if query else "")
        if basic is not None and "authorization" not in headers:
            headers["Authorization"] = basic
        try:
            answer = await sessions[0].request(
                method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                auto_decompress=False,
                skip_auto_headers=SKIP_AUTO_HEADERS,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            governor.counters["upstream_errors"] += 1
            reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
            shown = governor.config.public_upstream
            message = f"governor: the upstream {shown} did not answer ({reason})"
            log.warning("%s", message)
            error = {"message": message, "type": "upstream_error", "code": 502}
            await _answer(send, 502, {"error": error})
            if verdict is not None:
                governor.finish(entry, None, "unreachable")
            return
        streamed = answer.headers.get("content-type", "").startswith("text/event-stream")
        entry["streamed"] = streamed
        scanner = UsageScanner(streamed) if verdict is not None and answer.ok else None
        head = [(name, value) for name, value in answer.raw_headers if name.lower() not in DROPPED]
        size = answer.content_length
        if not streamed and method != "HEAD" and size is not None and size <= MAX_BUFFERED_BYTES:
            # A whole answer of known size goes back in one piece, with its length.
            try:
                content = await answer.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = {"message": _cut(governor, exc), "type": "upstream_error", "code": 502}
                await _answer(send, 502, {"error": error})
                if verdict is not None:
                    governor.finish(entry, answer.status, "cut")
                return
            finally:
                answer.release()
            head.append((b"content-length", b"%d" % len(content)))
            await send({"type": "http.response.start", "status": answer.status, "headers": head})
            await send({"type": "http.response.body", "body": content})
            if verdict is not None:
                if scanner is not None:
                    scanner.feed(content)
                    governor.settle(verdict, entry, scanner.finish(), scanner.answer_chars, tick_id)
                governor.finish(entry, answer.status, "answered")
            return
        await send({"type": "http.response.start", "status": answer.status, "headers": head})
        relay = _relay(answer, scanner, governor, verdict, entry, tick_id, streamed)

        def gone() -> None:
            governor.client_gone()
            if verdict is not None:
                governor.finish(entry, answer.status, "client_gone")

        await _relay_to(send, receive, relay, streamed, gone)

    async def lifespan(receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS)
        timeout = aiohttp.ClientTimeout(
            total=None, connect=10.0, sock_read=config.upstream_idle_seconds
        )
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            sessions.append(session)
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        """Status or forward, told apart by two comparisons instead of Starlette's router.

        The router and its middleware cost about a tenth of a request's time in the proxy
        and decided nothing more than this.
        """
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method = scope["method"]
        if method == "GET" and scope["path"] in STATUS_PATHS:
            # Any origin may read it, as the earlier governor's UI did from its own page.
            await _answer(send, 200, governor.status(), **{"Access-Control-Allow-Origin": "*"})
        elif method in METHODS:
            await forward(scope, receive, send)
        else:
            await _answer(send, 405, Allow=", ".join(METHODS))

    return app


async def _relay(
    answer: aiohttp.ClientResponse,
    scanner: UsageScanner | None,
    governor: ProxyGovernor,
    verdict: Verdict | None,
    entry: dict[str, Any],
    tick_id: str | None,
    streamed: bool,
) -> AsyncIterator[bytes]:
    """The upstream's bytes as they arrive; a cut upstream ends the body where it broke.

    A stream cut or stalled past the idle timeout ends with an SSE error event, so the
    client reads why its answer stopped; a client that goes away just ends the relay (the
    caller finishes its decision then).
    """
    ended: Ending = "answered"
    try:
        async for chunk in answer.content.iter_any():
            if scanner is not None:
                scanner.feed(chunk)
            yield chunk
    except (aiohttp.ClientError, TimeoutError) as exc:
        ended = "cut"
        message = _cut(governor, exc)
        if streamed:
            error = {"message": message, "type": "upstream_error", "code": 504}
            yield b"data: " + orjson.dumps({"error": error}) + b"\n\n"
    finally:
        answer.release()
    if verdict is not None:
        if scanner is not None:
            governor.settle(verdict, entry, scanner.finish(), scanner.answer_chars, tick_id)
        governor.finish(entry, answer.status, ended)


def _stop_answer(chat: dict[str, Any], text: str) -> Response:
    model = str(chat.get("model") or "")
    if not chat.get("stream"):
        return JSONResponse(stop_completion(model, text))
    options = chat.get("stream_options")
    if options is not None and not isinstance(options, dict):
        message = 'stream_options must be an object, such as {"include_usage": true}'
        error = {"message": message, "type": "invalid_request_error", "param": "stream_options"}
        return JSONResponse({"error": error}, status_code=400)
    include_usage = bool(options and options.get("include_usage"))

    def chunks() -> Iterator[bytes]:
        yield from stop_stream(model, text, include_usage)

    return StreamingResponse(chunks(), media_type="text/event-stream")
