"""The OpenAI chat-completions wire format, as far as the governor reads and writes it.

Reading: where a request's message chain ends, and the usage a response reports (whole
JSON or a stream of SSE chunks, which may split anywhere). Writing: the directive as the
last user message, and the stop answer the hard ceiling gives instead of the model's.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from harness.governor.policy import Tail

MAX_BUFFERED_BYTES = 16 * 1024 * 1024
"""A non-streamed answer larger than this is passed on without reading its usage."""


def tail_of(messages: list[Any]) -> Tail:
    """How an OpenAI chat request ends, which decides whether a directive may be appended."""
    if not messages or not isinstance(messages[-1], dict):
        return "empty"
    last = messages[-1]
    role = last.get("role")
    if role in ("tool", "function"):
        return "tool_result"
    if role == "assistant":
        return "open_tool_calls" if last.get("tool_calls") else "assistant"
    return "user"


def with_directive(body: dict[str, Any], text: str) -> dict[str, Any]:
    """The request with the directive appended as a last user message."""
    return {**body, "messages": [*body["messages"], {"role": "user", "content": text}]}


def _completion_id() -> str:
    return f"chatcmpl-governor-{uuid.uuid4().hex[:12]}"


ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def stop_completion(model: str, text: str) -> dict[str, Any]:
    """A complete chat completion carrying the stop text; nothing was billed for it."""
    return {
        "id": _completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": ZERO_USAGE,
    }


def stop_stream(model: str, text: str, include_usage: bool) -> list[bytes]:
    """The same answer as SSE chunks, ending in `[DONE]` like any streamed completion."""
    ident, created = _completion_id(), int(time.time())

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
            **extra,
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    chunks = [
        event(
            [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]
        ),
        event([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    ]
    if include_usage:
        chunks.append(event([], usage=ZERO_USAGE))
    return [*chunks, b"data: [DONE]\n\n"]


@dataclass(frozen=True)
class Usage:
    """Tokens a response reported; `cached` when `prompt_tokens` leaves the cache out."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    cached: bool


def usage_of(document: Any) -> Usage | None:
    """Usage from a completion or chunk; llama.cpp's `timings` tell a cache-less count."""
    if not isinstance(document, dict):
        return None
    usage = document.get("usage")
    if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
        return None
    prompt = usage["prompt_tokens"]
    details = usage.get("prompt_tokens_details")
    cached_tokens = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = False
    timings = document.get("timings")
    timings = timings if isinstance(timings, dict) else {}
    cache_n = timings.get("cache_n")
    if isinstance(cache_n, int) and cache_n > 0 and timings.get("prompt_n") == prompt:
        cached_tokens, cached = cache_n, True
    return Usage(
        prompt,
        int(usage.get("completion_tokens") or 0),
        cached_tokens if isinstance(cached_tokens, int) else None,
        cached,
    )


class UsageScanner:
    """Watches a response go by, chunk by chunk, for its usage and the text it carried."""

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        self.usage: Usage | None = None
        self.answer_chars = 0
        self._buffer = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        """Take the next piece of the response; a buffer past its cap stops being scanned."""
        if self._overflow:
            return
        self._buffer += chunk
        if not self.streamed:
            self._overflow = len(self._buffer) > MAX_BUFFERED_BYTES
            return
        end = self._buffer.rfind(b"\n")
        if end < 0:
            return
        lines = bytes(self._buffer[:end]).split(b"\n")
        del self._buffer[: end + 1]
        for line in lines:
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                self._read(line[5:])

    def finish(self) -> Usage | None:
        """The usage the response reported, once it is complete (None: it reported none)."""
        if not self.streamed and not self._overflow and self._buffer:
            self._read(bytes(self._buffer))
        return self.usage

    def _read(self, text: bytes) -> None:
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError:
            return
        if not isinstance(document, dict):
            return
        self.usage = usage_of(document) or self.usage
        for choice in document.get("choices") or []:
            part = choice.get("delta") or choice.get("message") or {}
            self.answer_chars += len(part.get("content") or "")
            for call in part.get("tool_calls") or []:
                self.answer_chars += len((call.get("function") or {}).get("arguments") or "")
