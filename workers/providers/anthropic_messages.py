"""Anthropic Messages: Strands' `AnthropicModel`, thinking budgeted by effort."""

from __future__ import annotations

from typing import Any

import anthropic
from strands.models.anthropic import AnthropicModel

from harness.contracts import THINKING_BUDGETS, Api, Effort
from workers.providers.base import Endpoint, Metered, SdkErrors, register
from workers.providers.tls import ssl_context

ERRORS = register(
    SdkErrors(
        infrastructure=(
            anthropic.APIConnectionError,
            anthropic.RateLimitError,
            anthropic.InternalServerError,
            anthropic.OverloadedError,
        ),
        configuration=(anthropic.AuthenticationError, anthropic.PermissionDeniedError),
        with_status=(anthropic.APIStatusError,),
    )
)

MAX_TOKENS = 8192
"""Anthropic requires an answer cap; thinking's budget comes on top of it."""


class MeteredAnthropicModel(Metered, AnthropicModel):
    """Anthropic Messages, metered; `input_tokens` leaves the cache out, tickwork counts it in."""

    api: Api = "anthropic"
    prompt_excludes_cache = True


def config(model_id: str, effort: Effort | None) -> dict[str, Any]:
    """The model config of a call: the answer's cap, and thinking's budget."""
    if effort is None or effort == "none":
        return {"model_id": model_id, "max_tokens": MAX_TOKENS}
    budget = THINKING_BUDGETS[effort]
    return {
        "model_id": model_id,
        "max_tokens": MAX_TOKENS + budget,
        "params": {"thinking": {"type": "enabled", "budget_tokens": budget}},
    }


def build(endpoint: Endpoint) -> Metered:
    """The model on a client with no retries, the tick's timeout, TLS context and watch."""
    client_args = {
        "base_url": endpoint.base_url,
        "api_key": endpoint.api_key or "not-set",
        "timeout": endpoint.timeout,
        "max_retries": 0,
        "default_headers": endpoint.headers,
        "http_client": anthropic.DefaultAsyncHttpxClient(
            verify=ssl_context(), event_hooks={"response": endpoint.watch.hooks}
        ),
    }
    return MeteredAnthropicModel(
        client_args=client_args, **config(endpoint.model_id, endpoint.effort)
    )
