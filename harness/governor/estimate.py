"""Size of a model request in characters, and tokens estimated from it.

The size counts everything the model is sent (system prompt, messages with their tool
calls and results, tool schemas): counting message text alone misjudges tool-heavy agents
by a factor of about 3. Ticks and the governor proxy measure the same thing, a request in
the form its wire protocol sends it (OpenAI chat's `messages` and `tools`, Anthropic's
`system`, `messages` and `tools`, Responses' `instructions`, `input` and `tools`,
Ollama's `messages` and `tools`), so a ratio learned by one is right for the other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from harness.contracts import Api

DEFAULT_CHARS_PER_TOKEN = 3.2


def _json_chars(parts: list[Any]) -> int:
    return len(orjson.dumps(parts, default=str).decode())


def request_chars(system_prompt: str | None, messages: Any, tool_specs: Any) -> int:
    """Size of a request still in the SDK's own form (before the provider formats it)."""
    return _json_chars([system_prompt or "", messages or [], tool_specs or []])


def openai_request_chars(body: Mapping[str, Any]) -> int:
    """Size of an OpenAI chat-completions request: its messages and tool schemas.

    Sampling parameters (temperature, stream, …) are not shown to the model and are left out.
    """
    return _json_chars(
        [body.get("messages") or [], body.get("tools") or body.get("functions") or []]
    )


PROMPT_PARTS: dict[Api, tuple[str, ...]] = {
    "openai-chat": ("messages", "tools"),
    "openai-responses": ("instructions", "input", "tools"),
    "anthropic": ("system", "messages", "tools"),
    "ollama": ("messages", "tools"),
}
"""The fields of each protocol's request the model is shown."""


def wire_request_chars(api: Api, body: Mapping[str, Any]) -> int:
    """Size of a request in its protocol's form: the parts the model is shown."""
    if api == "openai-chat":
        return openai_request_chars(body)
    return _json_chars([body.get(part) or [] for part in PROMPT_PARTS[api]])


def tokens_from_chars(chars: int, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """Tokens a text of `chars` characters is estimated at, rounded up so a guard errs high."""
    return math.ceil(chars / chars_per_token) if chars > 0 else 0
