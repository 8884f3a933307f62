"""Ollama chat: Strands' `OllamaModel`, which builds a client per call from its arguments."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import ollama
from strands.models.ollama import OllamaModel
from strands.types.streaming import StreamEvent

from harness.contracts import Api, Effort
from workers.providers.base import Endpoint, Metered, SdkErrors, register
from workers.providers.tls import ssl_context

ERRORS = register(SdkErrors(infrastructure=(ConnectionError,), with_status=(ollama.ResponseError,)))
"""The client turns a refused connection into a plain `ConnectionError`; its
`ResponseError` carries the HTTP status."""

DEFAULT_HOST = "http://127.0.0.1:11434"


class MeteredOllamaModel(Metered, OllamaModel):
    """Ollama chat, metered."""

    api: Api = "ollama"
    done_reason: str | None = None
    """The last line's `done_reason` of the current call (`length`: cut at its limit)."""

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """As Metered's, but a turn cut at its length limit says so, tool calls or none.

        The SDK reports `tool_use` whenever a tool call came, whatever `done_reason` said,
        so a tool call cut at `num_predict` would run (DESIGN invariant 15). Its stop is
        held until the last line's counts, which come after it, have told the reason.
        """
        self.done_reason = None
        held: StreamEvent | None = None
        async for event in super().stream(*args, **kwargs):
            if "messageStop" in event and event["messageStop"].get("stopReason") == "tool_use":
                held = event
                continue
            if held is not None and "metadata" in event:
                yield self._stop_of(held)
                held = None
            yield event
        if held is not None:
            yield self._stop_of(held)

    def _stop_of(self, stop: StreamEvent) -> StreamEvent:
        if self.done_reason == "length":
            return {"messageStop": {"stopReason": "max_tokens"}}
        return stop

    def format_chunk(self, event: dict[str, Any]) -> StreamEvent:
        """As the SDK's, but a final line without counts reports none instead of failing.

        Ollama leaves `prompt_eval_count` out when its cache held the whole prompt, and
        a stream that never reached its `done` line has neither count.
        """
        if event["chunk_type"] != "metadata":
            return super().format_chunk(event)
        data = event["data"]
        self.done_reason = data.done_reason
        prompt, completion = data.prompt_eval_count or 0, data.eval_count or 0
        usage = {"inputTokens": prompt, "outputTokens": completion}
        usage["totalTokens"] = prompt + completion
        latency = int((data.total_duration or 0) / 1e6)
        return {"metadata": {"usage": usage, "metrics": {"latencyMs": latency}}}  # type: ignore[typeddict-item]


def think(effort: Effort) -> bool | str:
    """Ollama's `think`: off for `none`, else the level (which the config checked it takes)."""
    return False if effort == "none" else effort


def build(endpoint: Endpoint) -> Metered:
    """The model; a key, when the target names one, goes as a bearer token."""
    headers = dict(endpoint.headers)
    if endpoint.api_key:
        headers["authorization"] = f"Bearer {endpoint.api_key}"
    client_args = {
        "timeout": endpoint.timeout,
        "headers": headers,
        "verify": ssl_context(),
        "event_hooks": {"response": endpoint.watch.hooks},
    }
    return MeteredOllamaModel(
        endpoint.base_url or DEFAULT_HOST,
        ollama_client_args=client_args,
        model_id=endpoint.model_id,
        additional_args={"think": think(endpoint.effort)} if endpoint.effort else None,
    )
