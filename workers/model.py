"""The tick's model: Strands' OpenAI-compatible provider on a client the tick owns.

The client has no retries of its own and a bounded timeout, so an unreachable upstream
fails the tick fast into the runner's retry policy instead of waiting minutes inside it.
The provider is wrapped to count the characters it streams back, which is what a spend
estimate needs when the upstream never reports usage (a stream cut before its last chunk),
and to refuse a turn whose stream ended without a stop reason (`finished_turn`).
"""

from __future__ import annotations

import functools
import os
import ssl
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import openai
from strands.models.openai import OpenAIModel
from strands.types.streaming import StreamEvent

from harness.contracts.payload import TICK_HEADER, RouteCandidate, TickPayload

ResponseHook = Callable[[httpx.Response], Awaitable[None]]


class MeteredOpenAIModel(OpenAIModel):
    """OpenAIModel that remembers how much text the current call has streamed so far, and when.

    Usage that is not a count (a string, a negative number) is dropped, so the call's
    spend is estimated and flagged as for an upstream that reports none: one gateway's
    odd accounting must not fail the tick.
    """

    response_chars = 0
    answered = False
    """Whether the current call's answer began (`messageStart`: the upstream accepted the
    request and started its turn), so a failure after it is no refusal: it may be billed."""
    provider: str | None = None
    """The endpoint's host, as the call ledger names it (`provider_of`)."""
    first_token_at: float | None = None
    """`time.monotonic()` when the current call streamed its first text or tool input."""

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """Count the streamed text as it passes, for the estimate when no usage comes back."""
        self.response_chars = 0
        self.first_token_at = None
        self.answered = False
        async for event in finished_turn(super().stream(*args, **kwargs)):
            self.answered = self.answered or (isinstance(event, dict) and "messageStart" in event)
            if isinstance(event, dict) and "metadata" in event:
                event = _with_countable_usage(dict(event))
            delta = (
                event.get("contentBlockDelta", {}).get("delta", {})
                if isinstance(event, dict)
                else {}
            )
            piece = delta.get("text") or delta.get("toolUse", {}).get("input") or ""
            if piece and self.first_token_at is None:
                self.first_token_at = time.monotonic()
            self.response_chars += len(piece)
            yield event

    def format_chunk(self, event: dict[str, Any], **kwargs: Any) -> StreamEvent:
        """As the SDK's, but a turn the upstream gave no finish reason keeps none.

        The SDK stands in `end_turn` (no OpenAI finish reason) for a missing one, and would
        then run the tool calls of a stream that merely stopped.
        """
        if event.get("chunk_type") == "message_stop" and event.get("data") == MISSING_FINISH:
            return {"messageStop": {}}
        return super().format_chunk(event, **kwargs)


MISSING_FINISH = "end_turn"
"""What Strands' OpenAI provider puts where the answer had no `finish_reason`."""


class UnfinishedTurnError(Exception):
    """The model's answer ended without a stop reason: the upstream never said it was done.

    A gateway closing the connection at its timeout can end the body cleanly, so the
    transport sees nothing wrong; only the missing end tells that what came may be a
    prefix. The call fails before the agent loop sees its message, so no tool call of it
    runs, and the tick fails on infrastructure.
    """


async def finished_turn(events: AsyncIterator[StreamEvent]) -> AsyncGenerator[StreamEvent, None]:
    """A model's events, ending in `UnfinishedTurnError` unless a stop reason ends the turn.

    Whatever the wire protocol, Strands' providers end a turn with a `messageStop`; a
    provider's model class leaves its `stopReason` out where the wire gave none, and this
    check, common to them all, refuses the turn then or when no `messageStop` comes at all.
    """
    stopped = False
    async for event in events:
        if "messageStop" in event:
            if not event["messageStop"].get("stopReason"):
                raise UnfinishedTurnError("the model's answer ended without a stop reason")
            stopped = True
        yield event
    if not stopped:
        raise UnfinishedTurnError("the model's answer ended before its end of turn")


def _with_countable_usage(event: dict[str, Any]) -> Any:
    usage = event["metadata"].get("usage") or {}
    if all(type(value) is int and value >= 0 for value in usage.values()):
        return event
    print(f"the upstream reported unusable usage {usage!r}: the call is estimated", file=sys.stderr)
    zero = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    return {**event, "metadata": {**event["metadata"], "usage": zero}}


class MalformedAnswerError(Exception):
    """The upstream answered 200 with something that is no completion stream.

    A gateway's HTML error page, a JSON body cut short: the upstream's fault, so the tick
    fails on infrastructure.
    """


async def _expect_event_stream(response: httpx.Response) -> None:
    """Every call of a tick streams: a 200 of another content type is no answer."""
    kind = response.headers.get("content-type", "")
    if response.status_code == 200 and not kind.startswith("text/event-stream"):
        raise MalformedAnswerError(
            f"the upstream answered 200 with {kind or 'no content type'}, not an event stream"
        )


def build_model(
    payload: TickPayload,
    candidate: RouteCandidate | None = None,
    observe: ResponseHook | None = None,
) -> MeteredOpenAIModel:
    """The tick's model: the catalog candidate's, or the payload's on `OPENAI_BASE_URL`.

    Endpoint and key are read from this process's environment here, so neither a URL
    given by variable nor any key ever travels in the payload. `observe` sees every
    answer's response (its rate-limit headers) before its body is read.
    """
    base_url = os.environ.get("OPENAI_BASE_URL") or None
    api_key = os.environ.get("OPENAI_API_KEY") or "not-set"
    model_id, effort = payload.model, payload.effort
    if candidate is not None:
        unset = unset_variables(candidate)
        if unset:
            raise MissingEndpointError(candidate.target, unset)
        base_url = candidate.base_url or os.environ[candidate.base_url_env or ""]
        api_key = os.environ[candidate.api_key_env] if candidate.api_key_env else api_key
        model_id, effort = candidate.model, candidate.effort
    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key=api_key,
        timeout=payload.model_timeout_seconds,
        max_retries=0,
        default_headers={TICK_HEADER: payload.tick_id},
        http_client=openai.DefaultAsyncHttpxClient(
            verify=_ssl_context(),
            event_hooks={"response": [_expect_event_stream, *([observe] if observe else [])]},
        ),
    )
    params: dict[str, Any] = {}
    if effort is not None:
        params["reasoning_effort"] = effort
    model = MeteredOpenAIModel(client=client, model_id=model_id, params=params or None)
    model.provider = provider_of(client.base_url)
    return model


def provider_of(url: httpx.URL) -> str:
    """Host and non-default port of an endpoint: a user, password or query may hold a key."""
    return url.host + (f":{url.port}" if url.port is not None else "")


def _ssl_context() -> ssl.SSLContext:
    """The TLS context httpx would build, built once per set of CA variables.

    Loading the CA bundle costs about 50 ms of CPU; a forked tick reuses the one its
    fork server loaded while warming up.
    """
    return _context_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _context_for(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context()  # reads the same two variables


def unset_variables(candidate: RouteCandidate) -> list[str]:
    """The variables a candidate names for its endpoint and key that are unset (or empty) here."""
    named = [None if candidate.base_url else candidate.base_url_env, candidate.api_key_env]
    return [variable for variable in named if variable and not os.environ.get(variable)]


class MissingEndpointError(Exception):
    """A catalog target names a variable this worker's environment does not have."""

    def __init__(self, target: str, variables: list[str]) -> None:
        names = ", ".join(variables)
        verb = "are" if len(variables) > 1 else "is"
        super().__init__(f"target {target!r}: environment variable {names} {verb} not set")
