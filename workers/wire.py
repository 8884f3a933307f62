"""The answer as it crosses the wire: whether it began, whether its turn ended, and what it was.

Each protocol's SDK parses its stream its own way and forgives different things (Strands'
Responses and Ollama providers stand in a stop reason when the stream just stopped; the
Ollama client sends a request only once its stream is read, after the provider said the
message started). So the worker watches the bytes itself, the same way for all four: a
2xx answer of the protocol's content type began the turn (a failure after it may be
billed), and the protocol's end-of-turn marker in the body ended it (without it, what
came may be a prefix). A 200 of another content type is no answer, and a 404 or 405 is
an endpoint of another kind (an Ollama URL given to an Anthropic target): both fail the
call on infrastructure, named. The usage is read from the same bytes, with the scanners
the agent CLIs' governor reads it with: the SDKs keep only its input, output and cache
counts, and drop the parts priced apart (reasoning, hour-long cache writes, web searches).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx

from harness.contracts import Api
from harness.governor import (
    ChatUsageScanner,
    MessagesUsageScanner,
    ResponsesUsageScanner,
    Usage,
    UsageScanner,
)

ResponseHook = Callable[[httpx.Response], Awaitable[None]]

ERROR_BODY_CHARS = 200


def observing(*hooks: ResponseHook) -> ResponseHook:
    """One response hook that runs each of `hooks` in turn (quota, rate limits)."""

    async def observe(response: httpx.Response) -> None:
        for hook in hooks:
            await hook(response)

    return observe


class MalformedAnswerError(Exception):
    """The upstream answered 200 with something that is no completion stream.

    A gateway's HTML error page, a JSON body cut short: the upstream's fault, so the tick
    fails on infrastructure.
    """


class WrongEndpointError(Exception):
    """The endpoint has no such route: its URL is of another protocol, or lacks a path part."""


@dataclass(frozen=True)
class WireFormat:
    """How a protocol's streamed answer looks: its content type and its end of turn."""

    content_type: str
    turn_end: re.Pattern[bytes]


FORMATS: dict[Api, WireFormat] = {
    "openai-chat": WireFormat("text/event-stream", re.compile(rb'"finish_reason"\s*:\s*"')),
    "openai-responses": WireFormat(
        "text/event-stream", re.compile(rb'"type"\s*:\s*"response\.(?:completed|incomplete)"')
    ),
    "anthropic": WireFormat("text/event-stream", re.compile(rb"event:\s*message_stop")),
    "ollama": WireFormat("application/x-ndjson", re.compile(rb'"done"\s*:\s*true')),
}

SCANNERS: dict[Api, type[UsageScanner]] = {
    "openai-chat": ChatUsageScanner,
    "openai-responses": ResponsesUsageScanner,
    "anthropic": MessagesUsageScanner,
}
"""The protocols whose usage has parts priced apart (Ollama's counts have none)."""

_CARRY = 64
"""Bytes kept from one chunk to the next, so a marker split between two is still seen."""


class WireWatch:
    """The current call's answer, as the transport saw it; `reset` before each call."""

    def __init__(self, api: Api, observe: ResponseHook | None = None) -> None:
        self.api = api
        self.format = FORMATS[api]
        self.observe = observe
        self.answered = False
        """A 2xx answer of the protocol's kind began: the upstream took the request."""
        self.ended = False
        """The body carried the protocol's end of turn."""
        self.scanner: UsageScanner | None = None
        """The current answer's usage, read as it passed (None: no answer, or Ollama)."""

    @property
    def hooks(self) -> list[ResponseHook]:
        """The httpx response hooks to install on the protocol's client."""
        return [self.on_response, *([self.observe] if self.observe else [])]

    def reset(self) -> None:
        """A new call starts: nothing of it seen yet."""
        self.answered = self.ended = False
        self.scanner = None

    def usage(self) -> Usage | None:
        """The usage the current answer reported on the wire, once it has passed."""
        return None if self.scanner is None else self.scanner.finish()

    async def on_response(self, response: httpx.Response) -> None:
        """Judge the answer's status and kind, and watch its body for the end of turn."""
        if response.status_code in (404, 405):
            await response.aread()
            request = response.request
            raise WrongEndpointError(
                f"{request.url.host} answered {response.status_code} to {request.method} "
                f"{request.url.path}: is the target's base_url an {self.api} endpoint "
                f"serving this model? ({response.text[:ERROR_BODY_CHARS]})"
            )
        if not response.is_success:
            return
        kind = response.headers.get("content-type", "")
        if not kind.startswith(self.format.content_type):
            raise MalformedAnswerError(
                f"the upstream answered {response.status_code} with "
                f"{kind or 'no content type'}, not {self.format.content_type}"
            )
        self.answered = True
        scanner = SCANNERS.get(self.api)
        self.scanner = None if scanner is None else scanner(True, usage_only=True)
        response.stream = _Watched(response.stream, self)

    def saw(self, data: bytes, chunk: bytes) -> None:
        """A piece of the body passed: `chunk`, after the end of the one before in `data`."""
        if self.format.turn_end.search(data):
            self.ended = True
        if self.scanner is None:
            return
        try:
            self.scanner.feed(chunk)
        except Exception:  # an observer: the SDK judges the answer, its parts go unreported
            self.scanner = None


class _Watched(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream | httpx.SyncByteStream, watch: WireWatch):
        assert isinstance(inner, httpx.AsyncByteStream), "the tick's clients are async"
        self.inner = inner
        self.watch = watch

    async def __aiter__(self) -> AsyncIterator[bytes]:
        carried = b""
        async for chunk in self.inner:
            self.watch.saw(carried + chunk, chunk)
            carried = chunk[-_CARRY:]
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()
