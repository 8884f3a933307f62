"""Anthropic Messages (`/v1/messages`): a message, or SSE with named events.

The stream is `message_start` (input usage, cache reads and writes; zeros for
`Step.late_usage`) → per block `content_block_start` / `…_delta` / `…_stop` (a
`thinking` block with its signature, `text`, `tool_use` with `input_json_delta` halves)
→ `message_delta` (stop reason, the usage so far, cumulative) → `message_stop`.
`input_tokens` leaves the cached prompt out, as Anthropic bills it; the cache writes are
split by duration in `cache_creation`, server tool uses counted in `server_tool_use`,
thinking in `output_tokens_details`, as the SDK's `Usage` has them.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from harness.devtools.fake_llm.tokens import count_tokens
from harness.devtools.fake_llm.turn import Turn, begin, fake_of, pieces, send

router = APIRouter()

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error shape, typed by status as the API types it."""
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def prompt_view(body: dict[str, Any]) -> dict[str, Any]:
    """The request as chat messages and tools: `system` leads as a message of its own."""
    system = body.get("system")
    messages = [{"role": "system", "content": system}] if system else []
    return {"messages": messages + list(body.get("messages") or []), "tools": body.get("tools")}


@router.post("/v1/messages/count_tokens")
async def count(request: Request) -> dict[str, int]:
    """The prompt's size as the fake would bill it (no script step is used)."""
    body = await request.json()
    tokens, _ = fake_of(request).prompt_tokens("count_tokens", prompt_view(body))
    return {"input_tokens": tokens}


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    """Answer a Messages request, streamed when the body says `stream: true`."""
    turn = await begin(request, "anthropic", error_body, prompt_view)
    if isinstance(turn, Response):
        return turn
    usage = turn.usage_or(_usage(turn))
    stop = "max_tokens" if turn.step.max_tokens else "tool_use" if turn.calls else "end_turn"
    if not turn.stream:
        message = {**_message(turn, usage), "content": _blocks(turn), "stop_reason": stop}
        return JSONResponse(message, headers=turn.step.headers)
    return StreamingResponse(
        _stream(turn, usage, stop), media_type="text/event-stream", headers=turn.step.headers
    )


def _usage(turn: Turn) -> dict[str, Any]:
    """The usage as the SDK's `Usage` types it; the breakdowns only where there is one."""
    if not turn.reported:
        return dict(_NO_USAGE)
    usage: dict[str, Any] = {
        "input_tokens": turn.uncached_prompt,
        "cache_creation_input_tokens": turn.cache_write,
        "cache_read_input_tokens": turn.cache_read,
        "output_tokens": turn.completion_tokens,
    }
    if turn.cache_write:
        usage["cache_creation"] = {
            "ephemeral_5m_input_tokens": turn.cache_write - turn.cache_write_1h,
            "ephemeral_1h_input_tokens": turn.cache_write_1h,
        }
    if turn.web_searches:
        usage["server_tool_use"] = {
            "web_search_requests": turn.web_searches,
            "web_fetch_requests": 0,
        }
    if turn.reasoning_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": turn.reasoning_tokens}
    return usage


_NO_USAGE = {"input_tokens": 0, "output_tokens": 0}
"""Zero counters: the only way a message, whose usage is required, can say nothing."""


def _message(turn: Turn, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:20]}",
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }


def _signature(thinking: str) -> str:
    return f"sig_{count_tokens(thinking)}_{uuid.uuid4().hex[:8]}"


def _blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.thinking:
        signature = _signature(turn.thinking)
        blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": signature})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in turn.calls
    ]
    return blocks


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


def _stream(turn: Turn, usage: dict[str, Any], stop: str) -> Any:
    late = turn.step.late_usage or not turn.reported
    start_usage = dict(_NO_USAGE) if late else {**usage, "output_tokens": 1}
    frames = [_event("message_start", {"message": _message(turn, start_usage)})]

    def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        frames.append(_event("content_block_start", {"index": index, "content_block": start}))
        frames.extend(
            _event("content_block_delta", {"index": index, "delta": delta}) for delta in deltas
        )
        frames.append(_event("content_block_stop", {"index": index}))

    index = 0
    if turn.thinking:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(turn.thinking)]
        deltas.append({"type": "signature_delta", "signature": _signature(turn.thinking)})
        block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)
        index += 1
    if turn.text:
        deltas = [{"type": "text_delta", "text": p} for p in pieces(turn.text)]
        block(index, {"type": "text", "text": ""}, deltas)
        index += 1
    for call in turn.calls:
        arguments = call.arguments_json
        half = len(arguments) // 2
        deltas = [
            {"type": "input_json_delta", "partial_json": part}
            for part in (arguments[:half], arguments[half:])
        ]
        block(index, {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}, deltas)
        index += 1
    tail = [
        _event(
            "message_delta",
            {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage},
        ),
        _event("message_stop", {}),
    ]
    return send(turn, frames, tail)
