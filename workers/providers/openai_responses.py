"""OpenAI Responses: Strands' `OpenAIResponsesModel`, a fresh client per call (it closes each)."""

from __future__ import annotations

from typing import Any

from strands.models.openai_responses import OpenAIResponsesModel
from strands.types.content import Messages
from strands.types.tools import ToolSpec

from harness.contracts import Api
from workers.providers.base import Endpoint, Metered
from workers.providers.openai_chat import client_args, http_client


class MeteredResponsesModel(Metered, OpenAIResponsesModel):
    """OpenAI Responses, metered.

    The provider opens and closes a client per call, so each call gets a fresh HTTP
    client carrying the tick's watch and TLS context.
    """

    api: Api = "openai-responses"
    endpoint: Endpoint

    def request_form(
        self, messages: Messages, tool_specs: list[ToolSpec], system_prompt: str | None
    ) -> dict[str, Any]:
        """The request body the provider would send for this conversation."""
        return self._format_request(messages, tool_specs, system_prompt)

    def _resolve_client_args(self) -> dict[str, Any]:
        return {**self.client_args, "http_client": http_client(self.endpoint)}


def build(endpoint: Endpoint) -> Metered:
    """The model; `effort` is sent as `reasoning.effort`, with summaries for the transcript."""
    params: dict[str, Any] = {}
    if endpoint.effort:
        params["reasoning"] = {"effort": endpoint.effort, "summary": "auto"}
    model = MeteredResponsesModel(client_args(endpoint), model_id=endpoint.model_id, params=params)
    model.endpoint = endpoint
    return model
