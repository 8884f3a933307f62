"""The four wire protocols' models: one module each, imported only when a tick talks it.

`base` holds what all share (`Metered`, `finished_turn`, `Endpoint`, the SDK error
registry); `openai_chat`, `openai_responses`, `anthropic_messages` and `ollama_chat`
each subclass their Strands provider and `build` it from an `Endpoint`. `builder(api)`
imports the one a tick needs; `load_all` imports every one (the fork server, so forked
ticks share them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from harness.contracts import APIS, Api
from workers.providers.base import (
    LOADED_SDK_ERRORS,
    Endpoint,
    Metered,
    SdkErrors,
    UnfinishedTurnError,
    finished_turn,
)

MODULES: dict[Api, str] = {
    "openai-chat": "workers.providers.openai_chat",
    "openai-responses": "workers.providers.openai_responses",
    "anthropic": "workers.providers.anthropic_messages",
    "ollama": "workers.providers.ollama_chat",
}


def builder(api: Api) -> Callable[[Endpoint], Metered]:
    """The `build` of the protocol's module, imported now if it was not yet."""
    build: Callable[[Endpoint], Metered] = importlib.import_module(MODULES[api]).build
    return build


def load_all() -> None:
    """Import every protocol's module (and SDK)."""
    for api in APIS:
        builder(api)


__all__ = [
    "LOADED_SDK_ERRORS",
    "MODULES",
    "Endpoint",
    "Metered",
    "SdkErrors",
    "UnfinishedTurnError",
    "builder",
    "finished_turn",
    "load_all",
]
