"""The OpenAI chat-completions wire format, as far as the governor reads and writes it.

Reading: a request's body (a body that is no chat request is passed on untouched, as the
upstream would answer it without the proxy), where its message chain ends, and the usage
a response reports. Writing: the directive as the last user message, the stop answer the
hard ceiling gives instead of the model's, and the proxy's own errors.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from harness.governor.invalid import InvalidRequest
from harness.governor.policy import Tail
from harness.governor.usage import Usage, UsageScanner, count_at


def chat_request(body: bytes) -> dict[str, Any] | None:
    """The parsed chat request, or None for a body the proxy must only pass on."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        return None
    return document


def chat_tail(body: dict[str, Any]) -> Tail:
    """How a chat request's message chain ends."""
    return tail_of(body["messages"])


def chat_opening(body: dict[str, Any]) -> Any:
    """What every turn of a conversation resends: its model and first two messages."""
    return [body.get("model"), body["messages"][:2]]


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


def stop_completion(chat: dict[str, Any], text: str) -> dict[str, Any]:
    """A complete chat completion carrying the stop text; nothing was billed for it."""
    model = str(chat.get("model") or "")
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


def stop_stream(chat: dict[str, Any], text: str) -> list[bytes]:
    """The same answer as SSE chunks, ending in `[DONE]` like any streamed completion.

    Its usage chunk comes when the request asked for one (`stream_options`).
    """
    options = chat.get("stream_options")
    if options is not None and not isinstance(options, dict):
        message = 'stream_options must be an object, such as {"include_usage": true}'
        raise InvalidRequest("stream_options", message)
    include_usage = bool(options and options.get("include_usage"))
    model = str(chat.get("model") or "")
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
        count_at(usage, "completion_tokens") or 0,
        cached_tokens if isinstance(cached_tokens, int) else None,
        cached,
        count_at(usage, "prompt_tokens_details", "cache_write_tokens"),
        count_at(usage, "completion_tokens_details", "reasoning_tokens"),
    )


class ChatUsageScanner(UsageScanner):
    """A chat completion's usage (the last chunk that has one) and its answer's text."""

    def __init__(self, streamed: bool, usage_only: bool = False) -> None:
        super().__init__(streamed, usage_only)
        self._usage: Usage | None = None

    def read(self, document: dict[str, Any]) -> None:
        """Usage where a completion or chunk has it; text and tool arguments counted."""
        self._usage = usage_of(document) or self._usage
        for choice in document.get("choices") or []:
            self.stop_reason = choice.get("finish_reason") or self.stop_reason
            part = choice.get("delta") or choice.get("message") or {}
            self.content(len(part.get("content") or ""))
            for call in part.get("tool_calls") or []:
                self.content(len((call.get("function") or {}).get("arguments") or ""))

    def usage(self) -> Usage | None:
        """The usage of the last document that reported one."""
        return self._usage


class ResponsesUsageScanner(UsageScanner):
    """A Responses answer's usage: the whole response's, or that of the stream's last event.

    Only the `response.completed` (or `.incomplete`) event carries the usage, with the
    cached input in `input_tokens_details` and the reasoning in `output_tokens_details`.
    """

    def __init__(self, streamed: bool, usage_only: bool = False) -> None:
        super().__init__(streamed, usage_only)
        self._usage: Usage | None = None

    def read(self, document: dict[str, Any]) -> None:
        """Usage of a whole response, or of the event that ends a stream; text counted."""
        delta = document.get("delta")
        self.content(len(delta) if isinstance(delta, str) else 0)
        response = document.get("response", document)
        usage = response.get("usage") if isinstance(response, dict) else None
        prompt, completion = count_at(usage, "input_tokens"), count_at(usage, "output_tokens")
        if prompt is None or completion is None:
            return
        self.stop_reason = response.get("status")
        self._usage = Usage(
            prompt,
            completion,
            count_at(usage, "input_tokens_details", "cached_tokens"),
            False,
            count_at(usage, "input_tokens_details", "cache_write_tokens"),
            count_at(usage, "output_tokens_details", "reasoning_tokens"),
        )

    def usage(self) -> Usage | None:
        """The usage the response reported, if it did."""
        return self._usage


def error_document(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    """An error of the proxy's own as OpenAI clients read it: a 400 names its `param`."""
    if param is not None:
        return {"error": {"message": message, "type": "invalid_request_error", "param": param}}
    return {"error": {"message": message, "type": "upstream_error", "code": status}}


def stream_error(message: str, status: int) -> bytes:
    """The SSE chunk that ends a stream the upstream cut, telling the client why."""
    return b"data: " + orjson.dumps(error_document(message, status)) + b"\n\n"


def opens_tool_call(chunk: dict[str, Any]) -> bool:
    """A streamed chunk whose delta starts (or continues) a tool call."""
    return any(
        isinstance(choice, dict) and (choice.get("delta") or {}).get("tool_calls")
        for choice in chunk.get("choices") or []
    )


def finish_reason(chunk: dict[str, Any]) -> str | None:
    """The finish reason a streamed chunk ends its choice with (None: it ends nothing)."""
    for choice in chunk.get("choices") or []:
        if isinstance(choice, dict) and isinstance(reason := choice.get("finish_reason"), str):
            return reason
    return None
