"""The usage an answer reports, read as the answer goes by on its way to the client.

An answer is either one JSON document or a stream of SSE events whose `data:` lines may
be split anywhere between chunks; each wire format says what its documents hold
(`read`), this module finds them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import orjson

MAX_BUFFERED_BYTES = 16 * 1024 * 1024
"""A non-streamed answer larger than this is passed on without reading its usage."""


@dataclass(frozen=True)
class Usage:
    """Tokens an answer reported; `cached` when `prompt_tokens` leaves the cache out.

    `prompt_tokens` counts the cache reads and writes in, as OpenAI reports it and as the
    prices take it; `cached_tokens` are the reads among them, `cache_write_tokens` the
    writes (Anthropic's cache creation, OpenAI's `cache_write_tokens`). The parts priced
    apart are None when the answer did not report them: `reasoning_tokens` (within
    `completion_tokens`), `cache_write_1h_tokens` (within the writes, Anthropic's hour-long
    ones) and `web_search_requests` (Anthropic's server tool, billed per use).
    """

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    cached: bool
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    web_search_requests: int | None = None


PRICED_APART = ("reasoning_tokens", "cache_write_1h_tokens", "web_search_requests")
"""The parts of a usage `BudgetSpent` keeps beside its tokens, under these same names."""


def priced_apart(usage: Usage | None) -> dict[str, int | None]:
    """The parts of `usage` priced apart, by their `BudgetSpent` names (None: unreported)."""
    return {name: getattr(usage, name, None) for name in PRICED_APART}


def count_at(document: Any, *path: str) -> int | None:
    """The token count at `path` in a usage document; None when absent or not a count.

    A gateway's odd value (a string, a negative number, a bool) is no count: the part is
    then unreported rather than the answer unreadable.
    """
    for key in path:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    if isinstance(document, int) and not isinstance(document, bool) and document >= 0:
        return document
    return None


class UsageScanner(ABC):
    """Watches an answer go by, chunk by chunk, for its usage and the text it carried.

    A wire format's scanner says what one JSON document (the whole answer, or one SSE
    event's data) tells, in `read`. It also keeps what a call's record shows beside its
    usage: the stop reason the answer gave and when its first content arrived. With
    `usage_only`, a stream's events that hold no `"usage"` key are not parsed at all (the
    key of a JSON string's text is escaped, so no content matches): the usage alone then
    costs a sixth of the CPU (`ops/bench/turn_gate_bench.py`), for a reader that counts
    the content its own way (a Strands tick's wire watch).
    """

    def __init__(self, streamed: bool, usage_only: bool = False) -> None:
        self.streamed = streamed
        self.usage_only = usage_only
        self.answer_chars = 0
        self.stop_reason: str | None = None
        """The answer's own stop reason (Anthropic `stop_reason`, OpenAI `finish_reason`)."""
        self.first_token_at: float | None = None
        """`time.monotonic()` when the first streamed text, thinking or tool input arrived."""
        self._buffer = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        """Take the next piece of the answer; a buffer past its cap stops being scanned."""
        if self._overflow:
            return
        self._buffer += chunk
        if not self.streamed:
            self._overflow = len(self._buffer) > MAX_BUFFERED_BYTES
            return
        end = self._buffer.rfind(b"\n")
        if end < 0:
            return
        if self.usage_only and self._buffer.find(b'"usage"', 0, end) < 0:
            del self._buffer[: end + 1]
            return
        lines = bytes(self._buffer[:end]).split(b"\n")
        del self._buffer[: end + 1]
        for line in lines:
            if not line.startswith(b"data:") or (self.usage_only and b'"usage"' not in line):
                continue
            if line[5:].strip() != b"[DONE]":
                self._parse(line[5:])

    def finish(self) -> Usage | None:
        """The usage the answer reported, once it is complete (None: it reported none)."""
        if not self.streamed and not self._overflow and self._buffer:
            self._parse(bytes(self._buffer))
        return self.usage()

    def content(self, chars: int) -> None:
        """Count `chars` of the answer's content; the first of a stream is its first token."""
        self.answer_chars += chars
        if chars and self.streamed and self.first_token_at is None:
            self.first_token_at = time.monotonic()

    @abstractmethod
    def read(self, document: dict[str, Any]) -> None:
        """Take what one document of the answer says (usage, text)."""

    @abstractmethod
    def usage(self) -> Usage | None:
        """The usage read so far, if the answer has reported all of it."""

    def _parse(self, text: bytes) -> None:
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError:
            return
        if isinstance(document, dict):
            self.read(document)
