"""Size of a model request in characters, and tokens estimated from it.

The size counts everything the model is sent (system prompt, messages with their tool
calls and results, tool schemas): counting message text alone misjudges tool-heavy agents.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

DEFAULT_CHARS_PER_TOKEN = 3.2


def request_chars(system_prompt: str | None, messages: Any, tool_specs: Any) -> int:
    parts = [system_prompt or "", messages or [], tool_specs or []]
    return len(orjson.dumps(parts, default=str).decode())


def tokens_from_chars(chars: int, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    return math.ceil(chars / chars_per_token) if chars > 0 else 0
