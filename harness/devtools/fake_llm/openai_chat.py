"""OpenAI chat completions (`/v1/chat/completions`): JSON, or SSE chunks ending in `[DONE]`.

A stream's usage comes in its last chunk (no choices), asked for with `stream_options`;
the cache reads and writes are in `prompt_tokens_details`, the reasoning (the step's
thinking, never sent as text) in `completion_tokens_details`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from harness.devtools.fake_llm.turn import Turn, begin, pieces, send

router = APIRouter()


def error_body(status: int, message: str) -> dict[str, Any]:
    """OpenAI's error shape, shared by both OpenAI formats."""
    return {"error": {"message": message, "type": "fake", "code": str(status)}}


@router.get("/v1/models")
async def models() -> dict[str, Any]:
    """The one model the fake serves (any name is accepted)."""
    return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}


@router.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    """Answer a chat completion; usage is streamed only when `stream_options` asks for it."""
    turn = await begin(request, "openai-chat", error_body, usage_asked=_usage_asked)
    if isinstance(turn, Response):
        return turn
    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json},
        }
        for call in turn.calls
    ]
    usage = turn.usage_or(_usage(turn))
    extra: dict[str, Any] = {}
    if turn.fake.kv_cache == "llama":
        extra = {"timings": {"prompt_n": turn.prompt_tokens, "cache_n": turn.kv_cached}}
    finish = "length" if turn.step.max_tokens else "tool_calls" if calls else "stop"
    if not turn.stream:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if calls:
            message["tool_calls"] = calls
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": turn.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if turn.reported:
            completion.update(usage=usage, **extra)
        return JSONResponse(completion, headers=turn.step.headers)
    return StreamingResponse(
        _stream(turn, calls, finish, usage, extra),
        media_type="text/event-stream",
        headers=turn.step.headers,
    )


def _usage_asked(body: dict[str, Any]) -> bool:
    options = body.get("stream_options") or {}
    return not body.get("stream") or bool(options.get("include_usage"))


def _usage(turn: Turn) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    }
    if turn.cache_read or turn.cache_write:
        usage["prompt_tokens_details"] = {
            "cached_tokens": turn.cache_read,
            "cache_write_tokens": turn.cache_write,
        }
    if turn.reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": turn.reasoning_tokens}
    return usage


def _stream(
    turn: Turn,
    calls: list[dict[str, Any]],
    finish: str,
    usage: dict[str, Any],
    extra: dict[str, Any],
) -> Any:
    ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"

    def chunk(delta: dict[str, Any] | None, finish_reason: str | None = None, **more: Any) -> bytes:
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": turn.model,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **more,
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in pieces(turn.text)]
    for index, call in enumerate(calls):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        opening = {**call, "function": {**call["function"], "arguments": arguments[:half]}}
        deltas.append({"tool_calls": [{"index": index, **opening}]})
        deltas.append(
            {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}
        )
    tail = [chunk({}, finish)]
    if turn.reported:
        tail.append(chunk(None, usage=usage, **extra))
    tail.append(b"data: [DONE]\n\n")
    return send(turn, [chunk(delta) for delta in deltas], tail)
