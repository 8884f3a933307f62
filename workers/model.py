"""The tick's model: the Strands provider of the target's wire protocol, on clients it owns.

Four protocols, one behaviour. Each provider's client has no retries of its own and a
bounded timeout, so an unreachable upstream fails the tick fast into the runner's retry
policy instead of waiting minutes inside it; the key is read from the environment
variable the target names, never carried. Every provider is wrapped alike (`Metered`)
to count the characters it streams back (what a spend estimate needs when the upstream
never reports usage), to bring its usage to tickwork's convention (prompt tokens
include the cached ones), and to refuse a turn whose stream never reached its protocol's
end of turn (`finished_turn`, fed by the transport's `WireWatch`).
"""

from __future__ import annotations

import functools
import os
import ssl
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
from strands.models import Model
from strands.models.anthropic import AnthropicModel
from strands.models.ollama import OllamaModel
from strands.models.openai import OpenAIModel
from strands.models.openai_responses import OpenAIResponsesModel
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

from harness.contracts.payload import TICK_HEADER, RouteCandidate, TickPayload
from harness.contracts.wire import API_KEY_ENV_OF, BASE_URL_ENV, Api, Effort
from workers.wire import ResponseHook, WireWatch

DEFAULT_BASE_URLS: dict[Api, str] = {
    "openai-chat": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "ollama": "http://127.0.0.1:11434",
}
"""Where each SDK goes when neither the target nor the environment names an endpoint."""

ANTHROPIC_MAX_TOKENS = 8192
"""Anthropic requires an answer cap; thinking's budget comes on top of it."""

THINKING_BUDGETS: dict[Effort, int] = {
    "low": 1024,
    "medium": 4096,
    "high": 16_384,
    "xhigh": 32_768,
    "max": 63_999,
}
"""Anthropic's thinking budget per effort (1,024 is the API's least; `none`: no thinking)."""


class Metered(Model):
    """What every protocol's model does around its provider's stream.

    Usage that is not a count (a string, a negative number) is dropped, so the call's
    spend is estimated and flagged as for an upstream that reports none: one gateway's
    odd accounting must not fail the tick.
    """

    api: Api = "openai-chat"
    watch: WireWatch
    response_chars = 0
    provider: str | None = None
    """The endpoint's host, as the call ledger names it (`provider_of`)."""
    first_token_at: float | None = None
    """`time.monotonic()` when the current call streamed its first text or tool input."""
    prompt_excludes_cache = False
    """Whether the provider's `inputTokens` leave out cache reads and writes (Anthropic)."""

    def request_form(
        self, messages: Messages, tool_specs: list[ToolSpec], system_prompt: str | None
    ) -> dict[str, Any]:
        """The request body the provider would send for this conversation."""
        request: dict[str, Any] = self.format_request(  # type: ignore[attr-defined]
            messages, tool_specs, system_prompt
        )
        return request

    @property
    def answered(self) -> bool:
        """Whether the current call's answer began (a 2xx of the protocol's kind).

        A failure after it is no refusal: it may be billed.
        """
        return self.watch.answered

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """Count the streamed text as it passes, for the estimate when no usage comes back."""
        self.response_chars = 0
        self.first_token_at = None
        self.watch.reset()
        provided = super().stream(*args, **kwargs)  # type: ignore[safe-super]
        async for event in finished_turn(self._ended(provided)):
            if "metadata" in event:
                event = self._usage(dict(event))
            delta = event.get("contentBlockDelta", {}).get("delta", {})
            piece = delta.get("text") or delta.get("toolUse", {}).get("input") or ""
            piece = piece or delta.get("reasoningContent", {}).get("text") or ""
            if piece and self.first_token_at is None:
                self.first_token_at = time.monotonic()
            self.response_chars += len(piece)
            yield event

    async def _ended(self, events: AsyncIterable[StreamEvent]) -> AsyncGenerator[StreamEvent, None]:
        """The provider's events, its stop reason dropped when the wire never ended the turn.

        Providers stand in a stop reason for a stream that merely stopped (OpenAI's
        `end_turn`, Responses' `stop`, Ollama's last `done_reason`) and would then run
        the tool calls of a prefix.
        """
        async for event in events:
            if "messageStop" in event and not self.watch.ended:
                yield {"messageStop": {}}
                continue
            yield event

    def _usage(self, event: dict[str, Any]) -> Any:
        usage = dict(event["metadata"].get("usage") or {})
        if not all(type(value) is int and value >= 0 for value in usage.values()):
            print(f"the upstream reported unusable usage {usage!r}: estimated", file=sys.stderr)
            usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        elif self.prompt_excludes_cache:
            cached = usage.get("cacheReadInputTokens", 0) + usage.get("cacheWriteInputTokens", 0)
            usage["inputTokens"] = usage.get("inputTokens", 0) + cached
        return {**event, "metadata": {**event["metadata"], "usage": usage}}


class MeteredOpenAIModel(Metered, OpenAIModel):
    """OpenAI chat completions."""


class MeteredResponsesModel(Metered, OpenAIResponsesModel):
    """OpenAI Responses.

    The provider opens and closes a client per call, so each call gets a fresh HTTP
    client carrying the tick's watch and TLS context.
    """

    api: Api = "openai-responses"

    def request_form(
        self, messages: Messages, tool_specs: list[ToolSpec], system_prompt: str | None
    ) -> dict[str, Any]:
        """The request body the provider would send for this conversation."""
        return self._format_request(messages, tool_specs, system_prompt)

    def _resolve_client_args(self) -> dict[str, Any]:
        return {**self.client_args, "http_client": _http_client(self.watch)}


class MeteredAnthropicModel(Metered, AnthropicModel):
    """Anthropic Messages; `input_tokens` leaves the cache out, tickwork counts it in."""

    api: Api = "anthropic"
    prompt_excludes_cache = True


class MeteredOllamaModel(Metered, OllamaModel):
    """Ollama chat. The provider builds a client per call from `client_args`."""

    api: Api = "ollama"

    def format_chunk(self, event: dict[str, Any]) -> StreamEvent:
        """As the SDK's, but a final line without counts reports none instead of failing.

        Ollama leaves `prompt_eval_count` out when its cache held the whole prompt, and
        a stream that never reached its `done` line has neither count.
        """
        if event["chunk_type"] == "metadata":
            data = event["data"]
            prompt, completion = data.prompt_eval_count or 0, data.eval_count or 0
            usage = {"inputTokens": prompt, "outputTokens": completion}
            usage["totalTokens"] = prompt + completion
            latency = int((data.total_duration or 0) / 1e6)
            return {"metadata": {"usage": usage, "metrics": {"latencyMs": latency}}}  # type: ignore[typeddict-item]
        return super().format_chunk(event)


class UnfinishedTurnError(Exception):
    """The model's answer ended without a stop reason: the upstream never said it was done.

    A gateway closing the connection at its timeout can end the body cleanly, so the
    transport sees nothing wrong; only the missing end tells that what came may be a
    prefix. The call fails before the agent loop sees its message, so no tool call of it
    runs, and the tick fails on infrastructure.
    """


async def finished_turn(events: AsyncIterator[StreamEvent]) -> AsyncGenerator[StreamEvent, None]:
    """A model's events, ending in `UnfinishedTurnError` unless a stop reason ends the turn.

    Whatever the wire protocol, Strands' providers end a turn with a `messageStop`; one
    without `stopReason` (see `Metered._ended`), or none at all, refuses the turn.
    """
    stopped = False
    async for event in events:
        if "messageStop" in event:
            if not event["messageStop"].get("stopReason"):
                raise UnfinishedTurnError("the model's answer ended without a stop reason")
            stopped = True
        yield event
    if not stopped:
        raise UnfinishedTurnError("the model's answer ended before its end of turn")


def build_model(
    payload: TickPayload,
    candidate: RouteCandidate | None = None,
    observe: ResponseHook | None = None,
) -> Metered:
    """The tick's model: the catalog candidate's, or the level's on its protocol's variables.

    Endpoint and key are read from this process's environment here, so neither a URL
    given by variable nor any key ever travels in the payload. `observe` sees every
    answer's response (its rate-limit headers) before its body is read.
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
    api_key = (os.environ.get(key_env) if key_env else None) or "not-set"
    watch = WireWatch(api, observe)
    timeout = payload.model_timeout_seconds
    headers = {TICK_HEADER: payload.tick_id}
    model: Metered
    if api == "anthropic":
        client_args: dict[str, Any] = {
            "base_url": base_url,
            "api_key": api_key,
            "timeout": timeout,
            "max_retries": 0,
            "default_headers": headers,
            "http_client": anthropic.DefaultAsyncHttpxClient(
                verify=_ssl_context(), event_hooks={"response": watch.hooks}
            ),
        }
        model = MeteredAnthropicModel(client_args=client_args, **anthropic_config(model_id, effort))
    elif api == "ollama":
        if key_env:
            headers["authorization"] = f"Bearer {api_key}"
        ollama_args = {
            "timeout": timeout,
            "headers": headers,
            "verify": _ssl_context(),
            "event_hooks": {"response": watch.hooks},
        }
        model = MeteredOllamaModel(
            base_url or DEFAULT_BASE_URLS[api],
            ollama_client_args=ollama_args,
            model_id=model_id,
            additional_args={"think": _think(effort)} if effort else None,
        )
    else:
        openai_args: dict[str, Any] = {
            "base_url": base_url,
            "api_key": api_key,
            "timeout": timeout,
            "max_retries": 0,
            "default_headers": headers,
        }
        if api == "openai-responses":
            params: dict[str, Any] = {}
            if effort:
                params["reasoning"] = {"effort": effort, "summary": "auto"}
            model = MeteredResponsesModel(openai_args, model_id=model_id, params=params)
        else:
            client = openai.AsyncOpenAI(**openai_args, http_client=_http_client(watch))
            params = {"reasoning_effort": effort} if effort else {}
            model = MeteredOpenAIModel(client=client, model_id=model_id, params=params or None)
    model.watch = watch
    model.provider = provider_of(httpx.URL(base_url or DEFAULT_BASE_URLS[api]))
    return model


def anthropic_config(model_id: str, effort: Effort | None) -> dict[str, Any]:
    """The model config of an Anthropic call: the answer's cap, and thinking's budget."""
    if effort is None or effort == "none":
        return {"model_id": model_id, "max_tokens": ANTHROPIC_MAX_TOKENS}
    budget = THINKING_BUDGETS[effort]
    return {
        "model_id": model_id,
        "max_tokens": ANTHROPIC_MAX_TOKENS + budget,
        "params": {"thinking": {"type": "enabled", "budget_tokens": budget}},
    }


def _think(effort: Effort) -> bool | str:
    """Ollama's `think`: off for `none`, else the level (which the config checked it takes)."""
    return False if effort == "none" else effort


def _http_client(watch: WireWatch) -> httpx.AsyncClient:
    """An OpenAI SDK HTTP client with the tick's TLS context and response hooks."""
    return openai.DefaultAsyncHttpxClient(
        verify=_ssl_context(), event_hooks={"response": watch.hooks}
    )


def provider_of(url: httpx.URL) -> str:
    """Host and non-default port of an endpoint: a user, password or query may hold a key."""
    return url.host + (f":{url.port}" if url.port is not None else "")


def _ssl_context() -> ssl.SSLContext:
    """The TLS context httpx would build, built once per set of CA variables.

    Loading the CA bundle costs about 50 ms of CPU; a forked tick reuses the one its
    fork server loaded while warming up.
    """
    return _context_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _context_for(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context()  # reads the same two variables


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
