"""The tick's model: its target's wire protocol, endpoint and key, resolved in the worker.

Endpoint and key are read from this process's environment here, so neither a URL given
by variable nor any key ever travels in the payload: a catalog candidate's variables, or
without a catalog those its protocol's own SDK reads (`harness.contracts.wire`). The
model itself comes from the protocol's module (`workers.providers`), on clients with no
retries of their own and a bounded timeout, so an unreachable upstream fails the tick
fast into the runner's retry policy instead of waiting minutes inside it.
"""

from __future__ import annotations

import os

import httpx

from harness.contracts.payload import TICK_HEADER, RouteCandidate, TickPayload
from harness.contracts.wire import API_KEY_ENV_OF, BASE_URL_ENV, Api
from workers.providers import Endpoint, Metered, builder
from workers.wire import ResponseHook, WireWatch

DEFAULT_BASE_URLS: dict[Api, str] = {
    "openai-chat": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "ollama": "http://127.0.0.1:11434",
}
"""Where each SDK goes when neither the target nor the environment names an endpoint."""


def build_model(
    payload: TickPayload,
    candidate: RouteCandidate | None = None,
    observe: ResponseHook | None = None,
) -> Metered:
    """The tick's model: the catalog candidate's, or the level's on its protocol's variables.

    `observe` sees every answer's response (its rate-limit headers) before its body is read.
    """
    api, model_id, effort = payload.api, payload.model, payload.effort
    key_env = API_KEY_ENV_OF[api]
    base_url = os.environ.get(BASE_URL_ENV[api]) or None
    if candidate is not None:
        unset = unset_variables(candidate)
        if unset:
            raise MissingEndpointError(candidate.target, unset)
        api, model_id, effort = candidate.api, candidate.model, candidate.effort
        key_env = candidate.api_key_env or API_KEY_ENV_OF[api]
        base_url = candidate.base_url or os.environ[candidate.base_url_env or ""]
    watch = WireWatch(api, observe)
    endpoint = Endpoint(
        model_id=model_id,
        effort=effort,
        base_url=base_url,
        api_key=(os.environ.get(key_env) or "not-set") if key_env else None,
        timeout=payload.model_timeout_seconds,
        headers={TICK_HEADER: payload.tick_id},
        watch=watch,
    )
    model = builder(api)(endpoint)
    model.watch = watch
    model.provider = provider_of(httpx.URL(base_url or DEFAULT_BASE_URLS[api]))
    return model


def provider_of(url: httpx.URL) -> str:
    """Host and non-default port of an endpoint: a user, password or query may hold a key."""
    return url.host + (f":{url.port}" if url.port is not None else "")


def unset_variables(candidate: RouteCandidate) -> list[str]:
    """The variables a candidate names for its endpoint and key that are unset (or empty) here."""
    named = [None if candidate.base_url else candidate.base_url_env, candidate.api_key_env]
    return [variable for variable in named if variable and not os.environ.get(variable)]


class MissingEndpointError(Exception):
    """A catalog target names a variable this worker's environment does not have."""

    def __init__(self, target: str, variables: list[str]) -> None:
        names = ", ".join(variables)
        verb = "are" if len(variables) > 1 else "is"
        super().__init__(f"target {target!r}: environment variable {names} {verb} not set")
