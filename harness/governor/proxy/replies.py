"""The last step of a request's path: its answer goes back to the client.

Three kinds: the upstream's answer of known size, sent whole with its length; any other
upstream answer, relayed chunk by chunk as it arrives (a stream for as long as it lasts);
and the proxy's own (the hard stop, an error, the status). The upstream's usage is read
as the answer goes by, and the decision is settled and finished when it has ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from starlette.types import Receive, Send

from harness.governor.invalid import InvalidRequest
from harness.governor.proxy.dialects import Body, Dialect
from harness.governor.proxy.incoming import DROPPED, Incoming
from harness.governor.proxy.state import Ending, Judged, ProxyGovernor
from harness.governor.proxy.turns import TurnGate
from harness.governor.proxy.upstream import UNANSWERED
from harness.governor.usage import MAX_BUFFERED_BYTES, UsageScanner

log = logging.getLogger(__name__)


async def send_answer(send: Send, status: int, document: Any = None, **headers: str) -> None:
    """A whole answer of the proxy's own (JSON when there is a document), sent in two messages."""
    body = b"" if document is None else orjson.dumps(document)
    raw = [(b"content-length", b"%d" % len(body))]
    if document is not None:
        raw.append((b"content-type", b"application/json"))
    raw.extend((name.lower().encode(), value.encode("latin-1")) for name, value in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_refusal(send: Send, dialect: Dialect, exc: InvalidRequest) -> None:
    """A 400 in the request's own format for a request the governor cannot measure."""
    await send_answer(send, 400, dialect.error_document(f"governor: {exc}", 400, exc.param))


async def send_error(send: Send, dialect: Dialect, status: int, message: str) -> None:
    """An error of the proxy's own (the upstream unreachable or its answer cut)."""
    await send_answer(send, status, dialect.error_document(message, status, None))


async def send_stop(send: Send, dialect: Dialect, chat: Body, text: str) -> None:
    """The hard ceiling's answer in place of the model's, streamed when the request streams.

    A streamed one whose options make no sense is refused (400), as the model's would be.
    """
    if not chat.get("stream"):
        await send_answer(send, 200, dialect.stop_document(chat, text))
        return
    try:
        events = dialect.stop_events(chat, text)
    except InvalidRequest as exc:
        await send_refusal(send, dialect, exc)
        return
    body = b"".join(events)
    head = [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": body})


def cut_reason(governor: ProxyGovernor, exc: BaseException) -> str:
    """Count an upstream that cut or stalled its answer; why, in words for the client."""
    governor.counters["upstream_cut"] += 1
    reason = (
        f"the upstream was silent for {governor.config.upstream_idle_seconds:g} s"
        if isinstance(exc, TimeoutError)
        else f"the upstream cut the answer ({type(exc).__name__})"
    )
    log.warning("governor: %s", reason)
    return f"governor: {reason}"


def unfinished_reason(governor: ProxyGovernor, gate: TurnGate) -> str:
    """Count a turn the upstream never ended (or ended at its limit); why, for the client."""
    governor.counters[f"upstream_{gate.state}"] += 1
    if gate.state == "truncated":
        return f"governor: the answer ended at its output limit ({gate.stop_reason})"
    return "governor: the upstream's answer ended before its end of turn"


async def send_back(
    send: Send,
    receive: Receive,
    governor: ProxyGovernor,
    request: Incoming,
    answer: aiohttp.ClientResponse,
    judged: Judged | None,
    holds_tool_calls: bool = False,
) -> None:
    """The upstream's answer to the client: whole when its size allows, else relayed.

    With `holds_tool_calls` (a tick's own governor), a streamed model answer's tool calls
    reach the client only once its turn has ended (`TurnGate`).
    """
    streamed = answer.headers.get("content-type", "").startswith("text/event-stream")
    scanner = gate = None
    if judged is not None:
        judged.entry["streamed"] = streamed
        scanner = judged.dialect.scanner(streamed) if answer.ok else None
        if holds_tool_calls and streamed and answer.ok:
            gate = TurnGate(judged.dialect)
    head = [(name, value) for name, value in answer.raw_headers if name.lower() not in DROPPED]
    size = answer.content_length
    whole = not streamed and request.method != "HEAD"
    if whole and size is not None and size <= MAX_BUFFERED_BYTES:
        await _send_whole(send, governor, request.dialect, answer, head, scanner, judged)
        return
    await send({"type": "http.response.start", "status": answer.status, "headers": head})
    relay = _relay(answer, scanner, gate, governor, request.dialect, judged, streamed)

    def gone() -> None:
        governor.client_gone()
        if judged is not None:
            governor.finish(judged, answer.status, "client_gone")

    await _relay_to(send, receive, relay, streamed, gone)


async def _send_whole(
    send: Send,
    governor: ProxyGovernor,
    dialect: Dialect,
    answer: aiohttp.ClientResponse,
    head: list[tuple[bytes, bytes]],
    scanner: UsageScanner | None,
    judged: Judged | None,
) -> None:
    """A whole answer of known size goes back in one piece, with its length."""
    try:
        content = await answer.read()
    except UNANSWERED as exc:
        await send_error(send, dialect, 502, cut_reason(governor, exc))
        if judged is not None:
            governor.finish(judged, answer.status, "cut")
        return
    finally:
        answer.release()
    head.append((b"content-length", b"%d" % len(content)))
    await send({"type": "http.response.start", "status": answer.status, "headers": head})
    await send({"type": "http.response.body", "body": content})
    if judged is not None:
        if scanner is not None:
            scanner.feed(content)
            governor.settle(judged, scanner)
        governor.finish(judged, answer.status, "answered")


async def _relay(
    answer: aiohttp.ClientResponse,
    scanner: UsageScanner | None,
    gate: TurnGate | None,
    governor: ProxyGovernor,
    dialect: Dialect,
    judged: Judged | None,
    streamed: bool,
) -> AsyncIterator[bytes]:
    """The upstream's bytes as they arrive; a cut upstream ends the body where it broke.

    A stream cut or stalled past the idle timeout ends with an SSE error event, so the
    client reads why its answer stopped; a client that goes away just ends the relay (the
    caller finishes its decision then). Through a gate, a turn that did not end (or ended
    at its output limit) ends with such an event too, and none of its tool calls.
    """
    ended: Ending = "answered"
    error: tuple[str, int] | None = None
    try:
        async for chunk in answer.content.iter_any():
            if scanner is not None:
                scanner.feed(chunk)
            passed = chunk if gate is None else gate.feed(chunk)
            if passed:
                yield passed
    except UNANSWERED as exc:
        ended, error = "cut", (cut_reason(governor, exc), 504)
    finally:
        answer.release()
    if gate is not None and ended == "answered":
        if rest := gate.finish():
            yield rest
        if gate.state != "ended":
            ended = "unfinished" if gate.state == "open" else "truncated"
            error = (unfinished_reason(governor, gate), 502)
    # Settled before the client reads why: a tick's governor stops its CLI on a failure
    # before the CLI could ask again.
    if judged is not None:
        if scanner is not None:
            governor.settle(judged, scanner)
        governor.finish(judged, answer.status, ended)
    if error is not None and streamed:
        yield dialect.stream_error(*error)


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
