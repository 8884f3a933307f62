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
from dataclasses import dataclass

import httpx

from harness.contracts import (
    API_KEY_ENV_OF,
    BASE_URL_ENV,
    DEFAULT_BASE_URLS,
    TICK_HEADER,
    Api,
    Effort,
    RouteCandidate,
    TickPayload,
)
from workers.providers import Endpoint, Metered, builder
from workers.wire import ResponseHook, WireWatch


@dataclass(frozen=True)
class Target:
    """The endpoint a tick calls, resolved from its candidate (or level) and the environment."""

    api: Api
    model_id: str
    effort: Effort | None
    base_url: str | None
    """None: the protocol's SDK default (`DEFAULT_BASE_URLS`)."""
    key_env: str | None

    @property
    def api_key(self) -> str | None:
        """The key from this process's environment (`not-set` when the variable is empty)."""
        return (os.environ.get(self.key_env) or "not-set") if self.key_env else None

    @property
    def url(self) -> str:
        """The base URL, the protocol's default when none was given."""
        return self.base_url or DEFAULT_BASE_URLS[self.api]


def resolve_target(payload: TickPayload, candidate: RouteCandidate | None = None) -> Target:
    """The candidate's endpoint, or the level's on its protocol's variables.

    Raises:
        MissingEndpointError: the candidate names a variable that is unset here.
    """
    if candidate is None:
        api = payload.api
        return Target(
            api,
            payload.model,
            payload.effort,
            os.environ.get(BASE_URL_ENV[api]) or None,
            API_KEY_ENV_OF[api],
        )
    unset = unset_variables(candidate)
    if unset:
        raise MissingEndpointError(candidate.target, unset)
    return Target(
        candidate.api,
        candidate.model,
        candidate.effort,
        candidate.base_url or os.environ[candidate.base_url_env or ""],
        candidate.api_key_env or API_KEY_ENV_OF[candidate.api],
    )


def build_model(
    payload: TickPayload,
    candidate: RouteCandidate | None = None,
    observe: ResponseHook | None = None,
) -> Metered:
    """The tick's model: the catalog candidate's, or the level's on its protocol's variables.

    `observe` sees every answer's response (its rate-limit headers) before its body is read.
    """
    target = resolve_target(payload, candidate)
    watch = WireWatch(target.api, observe)
    endpoint = Endpoint(
        model_id=target.model_id,
        effort=target.effort,
        base_url=target.base_url,
        api_key=target.api_key,
        timeout=payload.model_timeout_seconds,
        headers={TICK_HEADER: payload.tick_id},
        watch=watch,
    )
    model = builder(target.api)(endpoint)
    model.watch = watch
    model.provider = provider_of(httpx.URL(target.url))
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


class AgentMissingError(Exception):
    """A candidate's agent CLI is not installed on this host (the message says how to)."""
