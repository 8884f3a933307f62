"""The wire protocols a tick can talk, the reasoning efforts each takes, and their variables.

A level or a catalog target names its protocol (`api`); everything else an operator
set up (model, effort, budgets, routing) means the same whichever it is. The efforts
are the union of what the providers take; each protocol accepts only its own, and a
level or target asking one it cannot take is refused when its file loads, not at the
first call. Without a catalog, a level's endpoint and key come from the variables its
protocol's own SDK reads, so switching a level from one provider to another changes
its `api` and the environment it is given, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

from harness.contracts.secrets import ANTHROPIC_API_KEY_ENV, API_KEY_ENV

Api = Literal["openai-chat", "openai-responses", "anthropic", "ollama"]
APIS: tuple[Api, ...] = get_args(Api)

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
"""How hard the model reasons: OpenAI's `reasoning_effort` / `reasoning.effort` values,
Anthropic's thinking budget (`max` the largest), Ollama's `think` levels."""

EFFORTS: dict[Api, tuple[Effort, ...]] = {
    "openai-chat": ("none", "minimal", "low", "medium", "high", "xhigh"),
    "openai-responses": ("none", "minimal", "low", "medium", "high", "xhigh"),
    "anthropic": ("none", "low", "medium", "high", "xhigh", "max"),
    "ollama": ("none", "low", "medium", "high"),
}

THINKING_BUDGETS: dict[Effort, int] = {
    "low": 1024,
    "medium": 4096,
    "high": 16_384,
    "xhigh": 32_768,
    "max": 63_999,
}
"""Anthropic's thinking budget per effort (1,024 is the API's least; `none`: no thinking),
the same whichever agent sends it (Strands' `thinking`, Claude Code's `MAX_THINKING_TOKENS`)."""

BASE_URL_ENV: dict[Api, str] = {
    "openai-chat": "OPENAI_BASE_URL",
    "openai-responses": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "ollama": "OLLAMA_HOST",
}
"""Where a level without a catalog finds its endpoint: the protocol's own SDK variable."""

DEFAULT_BASE_URLS: dict[Api, str] = {
    "openai-chat": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "ollama": "http://127.0.0.1:11434",
}
"""Where each SDK goes when neither the target nor the environment names an endpoint."""

API_KEY_ENV_OF: dict[Api, str | None] = {
    "openai-chat": API_KEY_ENV,
    "openai-responses": API_KEY_ENV,
    "anthropic": ANTHROPIC_API_KEY_ENV,
    "ollama": None,
}
"""The key a level without a catalog, or a target naming none, sends (Ollama takes none)."""


def require_effort(api: Api, effort: Effort | None) -> None:
    """Refuse an effort `api` cannot take (a validator's `ValueError`, with what it takes)."""
    if effort is not None and effort not in EFFORTS[api]:
        accepted = ", ".join(EFFORTS[api])
        raise ValueError(f"effort {effort!r} is not one {api} takes (it takes: {accepted})")


def missing_key(api: Api, env: Mapping[str, str]) -> str | None:
    """Why a level without a catalog on `api` cannot call its upstream from `env`, or None.

    Without its base URL variable, the protocol's SDK goes to its provider's own host
    (`DEFAULT_BASE_URLS`), which answers nothing without a key: every call would be
    refused, every retry spent and the level paused. Such a tick is refused before it
    starts instead. An upstream named by its variable may need no key (a local gateway).
    """
    key = API_KEY_ENV_OF[api]
    if env.get(BASE_URL_ENV[api]) or key is None or env.get(key):
        return None
    return (
        f"api {api!r} goes to {DEFAULT_BASE_URLS[api]} ({BASE_URL_ENV[api]} is not set) and "
        f"{key} is not set: set {key} for it, or {BASE_URL_ENV[api]} for another upstream"
    )
