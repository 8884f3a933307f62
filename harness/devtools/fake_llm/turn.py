"""What every wire format does alike: pick the step, refuse or answer, bill, send the stream.

A format's module turns a `Turn` into its own JSON and frames; the scripted behaviour
(errors, delays, barriers, cuts, the ledger) lives here once, so a step means the same
whichever API a test talks.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from harness.contracts import TICK_HEADER, Api
from harness.devtools.fake_llm.script import DEFAULT_TEXT, LedgerEntry, Step
from harness.devtools.fake_llm.state import FakeState
from harness.devtools.fake_llm.tokens import count_tokens

ErrorBody = Callable[[int, str], dict[str, Any]]
"""A format's error JSON for a status and a message."""
View = Callable[[dict[str, Any]], dict[str, Any]]
"""A format's request as chat messages and tools: how the fake counts a prompt."""


@dataclass(frozen=True)
class Call:
    """A tool call of the answer, with the id the format sends and its arguments as JSON."""

    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        """The arguments as the OpenAI formats send them: a JSON string."""
        return orjson.dumps(self.arguments).decode()


@dataclass(frozen=True)
class Turn:
    """One answered request: what to say and the tokens it bills."""

    fake: FakeState
    key: str
    step: Step
    model: str
    stream: bool
    text: str
    thinking: str
    calls: list[Call]
    prompt_tokens: int
    """The whole prompt, cached parts included."""
    kv_cached: int
    """Tokens a KV cache spared (the llama emulation; not in `prompt_tokens`)."""
    cache_read: int
    cache_write: int
    cache_write_1h: int
    """Of `cache_write`, the tokens written for an hour."""
    web_searches: int
    completion_tokens: int
    reasoning_tokens: int
    reported: bool
    """Whether the answer carries its usage."""

    def usage_or(self, counted: Any) -> Any:
        """The usage to report: the step's scripted one, else the counted one."""
        return self.step.usage if self.step.usage is not None else counted

    @property
    def uncached_prompt(self) -> int:
        """The prompt's tokens neither read from nor written to the prompt cache."""
        return self.prompt_tokens - self.cache_read - self.cache_write


def key_of(request: Request) -> str:
    """The script queue a request draws from: its tick's, or the default one."""
    return request.headers.get(TICK_HEADER, "default")


def fake_of(request: Request) -> FakeState:
    """The fake's state, held by the app."""
    state: FakeState = request.app.state.fake
    return state


def _as_is(body: dict[str, Any]) -> dict[str, Any]:
    return body


async def begin(
    request: Request,
    wire: Api,
    error_body: ErrorBody,
    view: View = _as_is,
    usage_asked: Callable[[dict[str, Any]], bool] | None = None,
) -> Turn | Response:
    """The turn a request gets and bills, or the scripted refusal or raw body instead.

    `usage_asked`: whether the client asked for usage (OpenAI chat streams it only on
    request); without it, always.
    """
    body = await request.json()
    fake = fake_of(request)
    fake.received.append(body)
    key = key_of(request)
    step = fake.next_step(key)
    fake.asked(key)
    if step.together:
        await fake.gather(key, step.together)
    if step.delay:
        await asyncio.sleep(step.delay)
    if step.status:
        authorization = request.headers.get("authorization", "")
        credential = request.headers.get("x-api-key") or authorization.removeprefix("Bearer ")
        message = step.error_message.format(
            status=step.status, authorization=authorization, key=credential
        )
        return JSONResponse(
            error_body(step.status, message), status_code=step.status, headers=step.headers
        )
    if step.raw_body is not None:
        return Response(step.raw_body, media_type=step.raw_content_type)
    calls = [
        Call(f"call_{uuid.uuid4().hex[:12]}", call.name, call.arguments) for call in step.tool_calls
    ]
    text = step.text if step.text is not None else ("" if calls else DEFAULT_TEXT)
    thinking = step.thinking or ""
    prompt, kv_cached = fake.prompt_tokens(key, view(body))
    caches = wire != "ollama"  # Ollama has no prompt cache to report
    cache_read = min(step.cache_read_tokens, prompt) if caches else 0
    cache_write = min(step.cache_write_tokens, prompt - cache_read) if caches else 0
    splits = wire == "anthropic"  # the one format with write durations and server tools
    cache_write_1h = min(step.cache_write_1h_tokens, cache_write) if splits else 0
    web_searches = step.web_search_requests if splits else 0
    reasoning = count_tokens(thinking) if thinking else 0
    calls_json = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json},
        }
        for call in calls
    ]
    completion = count_tokens(text + orjson.dumps(calls_json).decode()) + reasoning
    stream = bool(body.get("stream", wire == "ollama"))
    asked = usage_asked is None or usage_asked(body)
    reported = asked and not (step.omit_usage or step.cut_stream or step.unfinished)
    turn = Turn(
        fake=fake,
        key=key,
        step=step,
        model=str(body.get("model", "fake-model")),
        stream=stream,
        text=text,
        thinking=thinking,
        calls=calls,
        prompt_tokens=prompt,
        kv_cached=kv_cached,
        cache_read=cache_read,
        cache_write=cache_write,
        cache_write_1h=cache_write_1h,
        web_searches=web_searches,
        completion_tokens=completion,
        reasoning_tokens=reasoning,
        reported=reported,
    )
    fake.bill(
        LedgerEntry(
            key=key,
            model=turn.model,
            prompt_tokens=prompt,
            completion_tokens=completion,
            usage_reported=reported,
            stream=stream,
            received_at=time.time(),
            api=wire,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=reasoning,
            cache_write_1h_tokens=cache_write_1h,
            web_search_requests=web_searches,
            prompt_tokens_total=prompt + kv_cached,
        )
    )
    return turn


def pieces(text: str, size: int = 16) -> list[str]:
    """A text in the small deltas a real server streams it in."""
    return [text[start : start + size] for start in range(0, len(text), size)]


async def send(turn: Turn, frames: list[bytes], tail: list[bytes]) -> AsyncIterator[bytes]:
    """Stream the content `frames`, then the `tail` that ends the turn and carries its usage.

    The scripted faults act here: a cut after some frames, a cut before the tail, a
    clean end without it, or no end after it (`Step.cut_after_chunks`, `cut_stream`,
    `unfinished`, `held_open`).
    """
    step = turn.step
    for sent, frame in enumerate(frames):
        if sent == step.cut_after_chunks:
            raise ConnectionAbortedError("scripted cut in the middle of the answer")
        if sent:
            await asyncio.sleep(step.chunk_delay)
        yield frame
    if step.cut_stream:
        await asyncio.sleep(0.05)
        raise ConnectionAbortedError("scripted cut before the usage")
    if not step.unfinished:
        for frame in tail:
            yield frame
    turn.fake.answered(turn.key)
    if step.held_open:
        await asyncio.Future()  # until the server cancels the answer: its client went
