"""OpenAI Responses (`/v1/responses`): a response object, or SSE of typed events.

The stream is `response.created` → per output item `response.output_item.added`, its
deltas (`response.reasoning_summary_text.delta`, `response.output_text.delta`,
`response.function_call_arguments.delta`) and `….done` → `response.completed`, whose
response carries the usage (`input_tokens` with its cached part, `output_tokens` with
its reasoning part).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from harness.devtools.fake_llm.openai_chat import error_body
from harness.devtools.fake_llm.turn import Turn, begin, pieces, send

router = APIRouter()


def prompt_view(body: dict[str, Any]) -> dict[str, Any]:
    """The request as chat messages and tools: `instructions` lead as the system message."""
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
    instructions = body.get("instructions")
    system = [{"role": "system", "content": instructions}] if instructions else []
    return {"messages": system + items, "tools": body.get("tools")}


@router.post("/v1/responses")
async def responses(request: Request) -> Response:
    """Answer a Responses request, streamed when the body says `stream: true`."""
    turn = await begin(request, "openai-responses", error_body, prompt_view)
    if isinstance(turn, Response):
        return turn
    usage = turn.usage_or(_usage(turn))
    if not turn.stream:
        return JSONResponse(_final(turn, usage), headers=turn.step.headers)
    return StreamingResponse(
        _stream(turn, usage), media_type="text/event-stream", headers=turn.step.headers
    )


def _usage(turn: Turn) -> dict[str, Any] | None:
    if not turn.reported:
        return None
    return {
        "input_tokens": turn.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": turn.cache_read,
            "cache_write_tokens": turn.cache_write,
        },
        "output_tokens": turn.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    }


def _response(
    turn: Turn, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": f"resp_{turn.key}_{uuid.uuid4().hex[:12]}",
        "object": "response",
        "created_at": int(time.time()),
        "model": turn.model,
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def _items(turn: Turn) -> list[dict[str, Any]]:
    """The output items, complete: reasoning, the message, the function calls."""
    items: list[dict[str, Any]] = []
    if turn.thinking:
        summary = [{"type": "summary_text", "text": turn.thinking}]
        items.append({"id": "rs_0", "type": "reasoning", "summary": summary})
    if turn.text:
        content = [{"type": "output_text", "text": turn.text, "annotations": []}]
        items.append(
            {
                "id": "msg_0",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    items += [
        {
            "id": f"fc_{index}",
            "type": "function_call",
            "status": "completed",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments_json,
        }
        for index, call in enumerate(turn.calls)
    ]
    return items


def _stream(turn: Turn, usage: dict[str, Any] | None) -> Any:
    sequence = iter(range(1_000_000))

    def event(name: str, **data: Any) -> bytes:
        body = {"type": name, "sequence_number": next(sequence), **data}
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"

    frames = [event("response.created", response=_response(turn, "in_progress", [], None))]
    for index, item in enumerate(_items(turn)):
        opened = {**item, "status": "in_progress"}
        where: dict[str, Any] = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            opened["summary"] = []
            frames.append(event("response.output_item.added", output_index=index, item=opened))
            frames += [
                event("response.reasoning_summary_text.delta", summary_index=0, delta=p, **where)
                for p in pieces(turn.thinking)
            ]
        elif item["type"] == "message":
            opened["content"] = []
            frames.append(event("response.output_item.added", output_index=index, item=opened))
            frames += [
                event("response.output_text.delta", content_index=0, delta=p, logprobs=[], **where)
                for p in pieces(turn.text)
            ]
        else:
            arguments = item["arguments"]
            half = len(arguments) // 2
            opened["arguments"] = ""
            frames.append(event("response.output_item.added", output_index=index, item=opened))
            frames += [
                event("response.function_call_arguments.delta", delta=part, **where)
                for part in (arguments[:half], arguments[half:])
            ]
            frames.append(
                event("response.function_call_arguments.done", arguments=arguments, **where)
            )
        frames.append(event("response.output_item.done", output_index=index, item=item))
    final = _final(turn, usage)
    return send(turn, frames, [event(f"response.{final['status']}", response=final)])


def _final(turn: Turn, usage: dict[str, Any] | None) -> dict[str, Any]:
    """The whole response: completed, or incomplete at the output limit (`Step.max_tokens`)."""
    if not turn.step.max_tokens:
        return _response(turn, "completed", _items(turn), usage)
    cut = _response(turn, "incomplete", _items(turn), usage)
    cut["incomplete_details"] = {"reason": "max_output_tokens"}
    return cut
