"""OpenAI chat completions: Strands' `OpenAIModel` on a client the tick owns."""

from __future__ import annotations

from typing import Any

import openai
from strands.models.openai import OpenAIModel

from workers.providers.base import Endpoint, Metered, SdkErrors, register
from workers.providers.tls import ssl_context

ERRORS = register(
    SdkErrors(
        infrastructure=(
            openai.APIConnectionError,
            openai.APITimeoutError,
            openai.RateLimitError,
            openai.InternalServerError,
        ),
        configuration=(openai.AuthenticationError, openai.PermissionDeniedError),
        with_status=(openai.APIStatusError,),
    )
)
"""The openai SDK's errors; both OpenAI protocols raise them."""


class MeteredOpenAIModel(Metered, OpenAIModel):
    """OpenAI chat completions, metered."""


def client_args(endpoint: Endpoint) -> dict[str, Any]:
    """The openai client's arguments: no retries of its own, the tick's bounded timeout."""
    return {
        "base_url": endpoint.base_url,
        "api_key": endpoint.api_key or "not-set",
        "timeout": endpoint.timeout,
        "max_retries": 0,
        "default_headers": endpoint.headers,
    }


def http_client(endpoint: Endpoint) -> openai.DefaultAsyncHttpxClient:
    """An HTTP client with the tick's TLS context and its wire watch."""
    hooks = {"response": endpoint.watch.hooks}
    return openai.DefaultAsyncHttpxClient(verify=ssl_context(), event_hooks=hooks)


def build(endpoint: Endpoint) -> Metered:
    """The model; `effort` is sent as `reasoning_effort`."""
    client = openai.AsyncOpenAI(**client_args(endpoint), http_client=http_client(endpoint))
    params = {"reasoning_effort": endpoint.effort} if endpoint.effort else None
    return MeteredOpenAIModel(client=client, model_id=endpoint.model_id, params=params)
