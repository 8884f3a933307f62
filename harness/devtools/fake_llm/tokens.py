"""Reproducible token counts: what the fake bills, so spend can be checked to the token."""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

_PIECES = re.compile(r"[A-Za-z]+|[0-9]+|\s+|[^\sA-Za-z0-9]")


def count_tokens(text: str) -> int:
    """A crude token count (4 characters each), enough to make spend add up in tests."""
    return max(1, math.ceil(len(text) / 4))


def count_word_tokens(text: str) -> int:
    """Like a subword tokenizer: a word per 6 letters, numbers by 3 digits, each symbol one."""
    total = 0
    for match in _PIECES.finditer(text):
        piece = match.group()
        if piece[0].isalpha():
            total += math.ceil(len(piece) / 6)
        elif piece[0].isdigit():
            total += math.ceil(len(piece) / 3)
        elif not piece.isspace() or "\n" in piece:
            total += 1
    return max(1, total)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def shared_prefix(first: str, second: str) -> int:
    """Length of the common start, compared in blocks (prompts run to megabytes)."""
    end, size = min(len(first), len(second)), 0
    while size + 4096 <= end and first[size : size + 4096] == second[size : size + 4096]:
        size += 4096
    while size < end and first[size] == second[size]:
        size += 1
    return size


def render_prompt(body: dict[str, Any]) -> str:
    """The prompt as a chat template lays it out: what a real server tokenizes.

    `body` is a chat-shaped view (`messages`, `tools`); each wire format's module makes
    its own request into one (`prompt_view`).
    """
    parts = []
    for tool in body.get("tools") or []:
        parts.append("<|tool|>" + orjson.dumps(tool.get("function", tool)).decode() + "\n")
    for message in body.get("messages") or []:
        parts.append(f"<|{message.get('role')}|>\n{_text(message.get('content'))}")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(f"<tool_call>{function.get('name')}({function.get('arguments')})")
        parts.append("<|end|>\n")
    return "".join(parts)
