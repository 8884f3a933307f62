"""Anthropic's Messages wire format, as far as the governor reads and writes it.

Reading: a request's body, checked for the fields the governor measures (a body it cannot
measure is refused, naming the field, as Anthropic's API would refuse it), and the usage
an answer reports: `message_start` carries the input tokens with the cache reads and
writes, `message_delta` the output tokens (and, from some gateways, every count: its
counts are cumulative, so they win). Writing: the directive, which goes into the
system prompt (Anthropic has no system messages; a user turn could break a tool_use /
tool_result pair, the system prompt cannot), the stop answer of the hard ceiling as a
whole message or as its SSE events, and the proxy's own errors.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from harness.governor.invalid import InvalidRequest
from harness.governor.policy import Tail
from harness.governor.usage import Usage, UsageScanner, count_at

ROLES = ("user", "assistant", "system")
"""Claude Code 2.1 sends `system` messages inside the chain (its environment notes)."""


def _blocks(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(block, dict) for block in value)
    )


def _problem(document: dict[str, Any]) -> InvalidRequest | None:
    """The first field of a Messages request the governor cannot measure, if any.

    Only what the governor reads is checked, in place (nothing copied or rebuilt): the
    check is on every request's path. Checked by hand, not by a pydantic model: a model
    of the messages cost up to the whole OpenAI path's parse again on freshly parsed
    requests (`ops/bench/governor_bench.py` prints each API's steps).
    """
    if "model" not in document:
        return InvalidRequest("model", "required")
    if not isinstance(document["model"], str):
        return InvalidRequest("model", "must be a string")
    messages = document.get("messages")
    if not isinstance(messages, list):
        return InvalidRequest("messages", "required, a list of messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return InvalidRequest(f"messages.{index}", "must be an object")
        if message.get("role") not in ROLES:
            return InvalidRequest(
                f"messages.{index}.role", "must be 'user', 'assistant' or 'system'"
            )
        if not _blocks(message.get("content")):
            return InvalidRequest(
                f"messages.{index}.content", "must be a string or a list of content blocks"
            )
    system = document.get("system")
    if system is not None and not _blocks(system):
        return InvalidRequest("system", "must be a string or a list of text blocks")
    tools = document.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(tool, dict) for tool in tools)
    ):
        return InvalidRequest("tools", "must be a list of tool objects")
    stream = document.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return InvalidRequest("stream", "must be true or false")
    return None


def messages_request(body: bytes) -> dict[str, Any]:
    """The parsed Messages request; InvalidRequest names the first field it cannot read."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest("body", f"not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise InvalidRequest("body", "must be a JSON object")
    problem = _problem(document)
    if problem is not None:
        raise problem
    return document


def messages_tail(body: dict[str, Any]) -> Tail:
    """The directive goes into the system prompt, which follows no message chain."""
    return "system"


def messages_opening(body: dict[str, Any]) -> Any:
    """What every turn of a conversation resends: model, system prompt, first messages."""
    return [body.get("model"), body.get("system"), body["messages"][:2]]


def with_system_directive(body: dict[str, Any], text: str) -> dict[str, Any]:
    """The request with the directive after its system prompt, in the prompt's own form.

    Appended, not prepended: a cached prefix of the system blocks stays a prefix.
    """
    system = body.get("system")
    if not system:
        return {**body, "system": text}
    if isinstance(system, str):
        return {**body, "system": f"{system}\n\n{text}"}
    return {**body, "system": [*system, {"type": "text", "text": text}]}


ZERO_USAGE = {"input_tokens": 0, "output_tokens": 0}


def _message(
    chat: dict[str, Any], content: list[dict[str, Any]], stop: str | None
) -> dict[str, Any]:
    return {
        "id": f"msg_governor_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": str(chat.get("model") or ""),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": ZERO_USAGE,
    }


def stop_message(chat: dict[str, Any], text: str) -> dict[str, Any]:
    """A complete message carrying the stop text; nothing was billed for it."""
    return _message(chat, [{"type": "text", "text": text}], "end_turn")


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def stop_events(chat: dict[str, Any], text: str) -> list[bytes]:
    """The same answer as the SSE events of a streamed message, `message_stop` last."""
    return [
        _event("message_start", {"type": "message_start", "message": _message(chat, [], None)}),
        _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        _event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
        ),
        _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 0},
            },
        ),
        _event("message_stop", {"type": "message_stop"}),
    ]


USAGE_FIELDS: dict[str, tuple[str, ...]] = {
    "input_tokens": ("input_tokens",),
    "cache_creation_input_tokens": ("cache_creation_input_tokens",),
    "cache_read_input_tokens": ("cache_read_input_tokens",),
    "output_tokens": ("output_tokens",),
    "cache_write_1h_tokens": ("cache_creation", "ephemeral_1h_input_tokens"),
    "web_search_requests": ("server_tool_use", "web_search_requests"),
    "reasoning_tokens": ("output_tokens_details", "thinking_tokens"),
}
"""Where each count sits in a usage object: `message_delta`'s counts are cumulative, so
the latest seen of each wins, whichever event carried it (some gateways send them all
only there)."""


class MessagesUsageScanner(UsageScanner):
    """A message's usage and the characters of its text, tool input and thinking.

    The usage is gathered from `message_start` and `message_delta`, or the whole message.
    """

    def __init__(self, streamed: bool, usage_only: bool = False) -> None:
        super().__init__(streamed, usage_only)
        self._counts: dict[str, int] = {}
        self._ended = False

    def read(self, document: dict[str, Any]) -> None:
        """Usage where the message or an event has it; its content counted."""
        kind = document.get("type")
        if kind == "message_start":
            self._take(document.get("message"))
        elif kind == "message_delta":
            self._take(document)
            self._ended = True
            self.stop_reason = (document.get("delta") or {}).get("stop_reason")
        elif kind == "message":
            self._take(document)
            self._ended = True
            self.stop_reason = document.get("stop_reason")
            for block in document.get("content") or []:
                self.content(_block_chars(block))
        elif kind == "content_block_delta":
            delta = document.get("delta") or {}
            for field in ("text", "partial_json", "thinking"):
                value = delta.get(field)
                self.content(len(value) if isinstance(value, str) else 0)

    def usage(self) -> Usage | None:
        """The usage once the message has ended; none from a stream cut before its end.

        A prompt of no tokens is no usage: zero counters are how a server that counts
        nothing says so, and no real prompt is empty.
        """
        if not self._ended or "input_tokens" not in self._counts:
            return None
        counts = self._counts
        written = counts.get("cache_creation_input_tokens")
        read = counts.get("cache_read_input_tokens")
        prompt = counts["input_tokens"] + (written or 0) + (read or 0)
        if prompt == 0:
            return None
        return Usage(
            prompt,
            counts.get("output_tokens", 0),
            read,
            False,
            written,
            counts.get("reasoning_tokens"),
            counts.get("cache_write_1h_tokens"),
            counts.get("web_search_requests"),
        )

    def _take(self, holder: Any) -> None:
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if not isinstance(usage, dict):
            return
        for field, path in USAGE_FIELDS.items():
            value = count_at(usage, *path)
            if value is not None:
                self._counts[field] = value


def _block_chars(block: Any) -> int:
    if not isinstance(block, dict):
        return 0
    if block.get("type") == "tool_use":
        return len(orjson.dumps(block.get("input") or {}))
    value = block.get("text") if block.get("type") == "text" else block.get("thinking")
    return len(value) if isinstance(value, str) else 0


def error_document(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    """An error of the proxy's own as Anthropic's clients read it (the field is in `message`)."""
    kind = "invalid_request_error" if status == 400 else "api_error"
    return {"type": "error", "error": {"type": kind, "message": message}}


def stream_error(message: str, status: int) -> bytes:
    """The `error` event that ends a stream the upstream cut, telling the client why."""
    return _event("error", error_document(message, status))


def opens_tool_call(event: dict[str, Any]) -> bool:
    """A streamed event that starts a `tool_use` block."""
    block = event.get("content_block")
    return (
        event.get("type") == "content_block_start"
        and isinstance(block, dict)
        and block.get("type") == "tool_use"
    )


def stop_reason(event: dict[str, Any]) -> str | None:
    """The stop reason of a `message_delta` (None: another event, or none said)."""
    delta = event.get("delta")
    if event.get("type") != "message_delta" or not isinstance(delta, dict):
        return None
    reason = delta.get("stop_reason")
    return reason if isinstance(reason, str) else None
