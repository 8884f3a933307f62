"""Ollama chat (`/api/chat`): NDJSON lines, the last with `done` and the token counts.

Streams unless the body says `stream: false`. A tool call comes whole in one line, with
its arguments as an object, as Ollama sends it. `prompt_eval_count` and `eval_count`
are the usage; Ollama reports no cache reads or writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from harness.devtools.fake_llm.turn import Turn, begin, pieces, send

router = APIRouter()


def error_body(status: int, message: str) -> dict[str, Any]:
    """Ollama's error shape: one string."""
    return {"error": message}


@router.get("/api/tags")
async def tags() -> dict[str, Any]:
    """The one model the fake serves (any name is accepted)."""
    return {"models": [{"name": "fake-model", "model": "fake-model"}]}


@router.post("/api/chat")
async def chat(request: Request) -> Response:
    """Answer a chat request in Ollama's NDJSON (or one JSON object unstreamed)."""
    turn = await begin(request, "ollama", error_body)
    if isinstance(turn, Response):
        return turn
    final = _line(turn, {"role": "assistant", "content": ""}, done=True)
    final.update(turn.usage_or(_usage(turn)))
    if not turn.stream:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if turn.thinking:
            message["thinking"] = turn.thinking
        if turn.calls:
            message["tool_calls"] = _calls(turn)
        return JSONResponse({**final, "message": message}, headers=turn.step.headers)
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "thinking": piece} for piece in pieces(turn.thinking)
    ]
    messages += [{"role": "assistant", "content": piece} for piece in pieces(turn.text)]
    if turn.calls:
        messages.append({"role": "assistant", "content": "", "tool_calls": _calls(turn)})
    frames = [_encode(_line(turn, message, done=False)) for message in messages]
    return StreamingResponse(
        send(turn, frames, [_encode(final)]),
        media_type="application/x-ndjson",
        headers=turn.step.headers,
    )


def _calls(turn: Turn) -> list[dict[str, Any]]:
    return [{"function": {"name": call.name, "arguments": call.arguments}} for call in turn.calls]


def _usage(turn: Turn) -> dict[str, Any]:
    if not turn.reported:
        return {}
    return {"prompt_eval_count": turn.prompt_tokens, "eval_count": turn.completion_tokens}


def _line(turn: Turn, message: dict[str, Any], done: bool) -> dict[str, Any]:
    line: dict[str, Any] = {
        "model": turn.model,
        "created_at": datetime.now(UTC).isoformat(),
        "message": message,
        "done": done,
    }
    if done:
        reason = "length" if turn.step.max_tokens else "stop"
        line.update(done_reason=reason, total_duration=1_000_000, load_duration=0)
    return line


def _encode(line: dict[str, Any]) -> bytes:
    return orjson.dumps(line) + b"\n"
