"""The two APIs the proxy governs, and which one a request speaks.

Each is a table of its wire format's functions, so the request path is one and the same
for both: OpenAI chat completions (`POST …/chat/completions`) and Anthropic Messages
(`POST …/v1/messages`; the version in the path tells it from OpenAI's
`/v1/threads/…/messages`). Any other request is passed on; its errors of the proxy's own
come in the format of the API its path belongs to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from harness.governor import anthropic_wire, openai_wire
from harness.governor.estimate import openai_request_chars, wire_request_chars
from harness.governor.policy import Tail
from harness.governor.usage import UsageScanner

Body = dict[str, Any]


@dataclass(frozen=True)
class Dialect:
    """One API's wire format, as the request path needs it."""

    api: Literal["openai", "anthropic"]
    parse: Callable[[bytes], Body | None]
    """The governed request; None: pass it on as it is; InvalidRequest: refuse it."""
    chars: Callable[[Body], int]
    tail: Callable[[Body], Tail]
    opening: Callable[[Body], Any]
    """What every turn of one conversation resends: the alerts' episode key."""
    with_directive: Callable[[Body, str], Body]
    stop_document: Callable[[Body, str], Body]
    stop_events: Callable[[Body, str], list[bytes]]
    scanner: Callable[[bool], UsageScanner]
    error_document: Callable[[str, int, str | None], Body]
    stream_error: Callable[[str, int], bytes]
    opens_tool_call: Callable[[Body], bool]
    """A streamed event that starts a tool call (`proxy.turns` holds it back)."""
    stop_reason: Callable[[Body], str | None]
    """The turn's stop reason, in the event that carries it."""
    closes_turn: Callable[[Body], bool]
    """The event that ends the turn: with a stop reason before it, the turn is over."""


OPENAI_CHAT = Dialect(
    api="openai",
    parse=openai_wire.chat_request,
    chars=openai_request_chars,
    tail=openai_wire.chat_tail,
    opening=openai_wire.chat_opening,
    with_directive=openai_wire.with_directive,
    stop_document=openai_wire.stop_completion,
    stop_events=openai_wire.stop_stream,
    scanner=openai_wire.ChatUsageScanner,
    error_document=openai_wire.error_document,
    stream_error=openai_wire.stream_error,
    opens_tool_call=openai_wire.opens_tool_call,
    stop_reason=openai_wire.finish_reason,
    closes_turn=lambda event: openai_wire.finish_reason(event) is not None,
)
ANTHROPIC_MESSAGES = Dialect(
    api="anthropic",
    parse=anthropic_wire.messages_request,
    chars=partial(wire_request_chars, "anthropic"),
    tail=anthropic_wire.messages_tail,
    opening=anthropic_wire.messages_opening,
    with_directive=anthropic_wire.with_system_directive,
    stop_document=anthropic_wire.stop_message,
    stop_events=anthropic_wire.stop_events,
    scanner=anthropic_wire.MessagesUsageScanner,
    error_document=anthropic_wire.error_document,
    stream_error=anthropic_wire.stream_error,
    opens_tool_call=anthropic_wire.opens_tool_call,
    stop_reason=anthropic_wire.stop_reason,
    closes_turn=lambda event: event.get("type") == "message_stop",
)
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"


def dialect_of(path: str) -> Dialect:
    """The API a path belongs to: Anthropic's under `…/v1/messages`, OpenAI's otherwise."""
    trimmed = path.rstrip("/")
    if trimmed.endswith(MESSAGES) or f"{MESSAGES}/" in trimmed:
        return ANTHROPIC_MESSAGES
    return OPENAI_CHAT


def counts_tokens(method: str, path: str) -> bool:
    """Whether the request asks Anthropic's `count_tokens`.

    The proxy answers it from its estimate when the upstream has none.
    """
    return method == "POST" and path.rstrip("/").endswith(COUNT_TOKENS)


def governed(method: str, path: str) -> Dialect | None:
    """The dialect of a request the governor measures (a model call), else None."""
    if method != "POST":
        return None
    trimmed = path.rstrip("/")
    if trimmed.endswith("/chat/completions"):
        return OPENAI_CHAT
    if trimmed.endswith(MESSAGES):
        return ANTHROPIC_MESSAGES
    return None
