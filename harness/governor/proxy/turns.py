"""A streamed turn's tool calls, held back from the client until the turn has ended.

An agent CLI runs a tool call as soon as its block is complete in the stream, before the
turn's end marker (Anthropic's `message_stop`, an OpenAI `finish_reason`) has come: a
stream the upstream cuts after a complete tool call would have it run, though the turn
never ended (DESIGN invariant 15). `TurnGate` stands between the upstream's stream and
a tick's CLI: it lets whole events through as they come (text and thinking stream as
before) until one opens a tool call, holds that and every later event, and lets them go
only when an event ends the turn with a stop reason that is no cut at the output limit.
A turn that never ended, or ended at its limit, gives the client none of its tool calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

import orjson

from harness.governor.proxy.dialects import Dialect

EVENT_END = re.compile(rb"\r?\n\r?\n")
"""The blank line that ends an SSE event."""
TurnEnd = Literal["open", "ended", "truncated"]
"""Where the turn stands: no end marker yet, ended, or ended at its output limit."""
LENGTH_STOPS = frozenset({"max_tokens", "length"})
"""Stop reasons of a turn cut at its output limit (Anthropic's, OpenAI's): what it holds,
a tool call's arguments included, may be a prefix."""


@dataclass
class TurnGate:
    """Feeds the client whole SSE events, holding a tool call's until its turn has ended."""

    dialect: Dialect
    state: TurnEnd = "open"
    stop_reason: str | None = None
    holding: bool = False
    _partial: bytearray = field(default_factory=bytearray)
    _held: list[bytes] = field(default_factory=list)

    def feed(self, chunk: bytes) -> bytes:
        """What of the stream may go to the client now (whole events only)."""
        self._partial += chunk
        passed, start = bytearray(), 0
        for end in EVENT_END.finditer(self._partial):
            passed += self._event(bytes(self._partial[start : end.end()]))
            start = end.end()
        del self._partial[:start]
        return bytes(passed)

    def finish(self) -> bytes:
        """What is left for the client once the stream ended: nothing of an open turn."""
        rest, self._partial = bytes(self._partial), bytearray()
        return rest if self.state == "ended" and not self.holding else b""

    def _event(self, event: bytes) -> bytes:
        if self.state == "open":
            document = _data(event)
            if document is not None:
                self._read(document)
        if not self.holding:
            return event
        self._held.append(event)
        if self.state != "ended":
            return b""
        # The turn has ended: what was held goes now, and what follows passes.
        self.holding = False
        released, self._held = b"".join(self._held), []
        return released

    def _read(self, document: dict[str, object]) -> None:
        dialect = self.dialect
        self.holding = self.holding or dialect.opens_tool_call(document)
        self.stop_reason = dialect.stop_reason(document) or self.stop_reason
        if dialect.closes_turn(document) and self.stop_reason is not None:
            self.state = "truncated" if self.stop_reason in LENGTH_STOPS else "ended"


def _data(event: bytes) -> dict[str, object] | None:
    """The JSON document of an SSE event's `data:` lines (None: none, or not JSON)."""
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    try:
        document = orjson.loads(b"\n".join(lines))
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None
