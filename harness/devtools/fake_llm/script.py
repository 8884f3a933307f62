"""What a test scripts (steps) and what the fake bills (ledger entries), for every wire format."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.contracts import Api

DEFAULT_TEXT = "All done: nothing needed attention."


class ToolCallSpec(BaseModel):
    """A tool call a scripted step makes the model ask for."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Step(BaseModel):
    """One scripted answer. With neither text nor tool calls, the default text is sent.

    Each field means the same in every wire format; how it looks on the wire is the
    format's own (an Anthropic error is `{"type": "error", …}`, an Ollama one `{"error": …}`).
    """

    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    thinking: str | None = None
    """Reasoning sent before the answer: an Anthropic `thinking` block, a Responses
    reasoning summary, Ollama's `message.thinking`; billed as output tokens (OpenAI chat
    has no such field and ignores it)."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    """Of the prompt's tokens, how many the upstream says it read from or wrote to its
    prompt cache (capped at the prompt's size; Ollama reports neither)."""
    cache_write_1h_tokens: int = 0
    """Of the cache writes, how many were written for an hour rather than five minutes
    (capped at the writes; only Anthropic reports the split, in `cache_creation`)."""
    web_search_requests: int = 0
    """Server-side web searches the answer says it ran (Anthropic's `server_tool_use`;
    the other formats report no server tool use)."""
    late_usage: bool = False
    """Streaming only: the counts come only in the stream's last usage, as some gateways
    send them (Anthropic: `message_start` reports zeros and `message_delta` every count;
    the OpenAI formats report usage last anyway, Ollama in its `done` line)."""
    status: int | None = None
    """Answer with this HTTP error status instead (429, 500, 529 …)."""
    error_message: str = "scripted status {status}"
    """The error's message; `{key}` and `{authorization}` quote the request's credentials,
    as careless gateways do (`Incorrect API key provided: {key}`)."""
    delay: float = 0.0
    """Seconds to wait before answering."""
    cut_stream: bool = False
    """Streaming only: send the content, then drop the connection before the usage."""
    omit_usage: bool = False
    """Report no usage (Anthropic: zero counters, the only way it can say nothing)."""
    chunk_delay: float = 0.0
    """Streaming only: seconds between two chunks."""
    unfinished: bool = False
    """Streaming only: send the content, then end the body cleanly with no end of turn or
    usage, as a gateway that closes the connection at its own timeout: nothing below the
    model's stream sees an error, only the turn's missing end tells."""
    max_tokens: bool = False
    """End the turn at the output limit, its stop reason saying so (Anthropic `max_tokens`,
    OpenAI chat and Ollama `length`, a Responses `incomplete` response): the turn ended,
    but what it holds, a tool call included, may be cut short."""
    cut_after_chunks: int | None = None
    """Streaming only: drop the connection after this many chunks (a tool call's arguments
    come in two chunks, so a cut can leave one half-sent)."""
    raw_body: str | None = None
    """Answer 200 with exactly this body instead (an HTML error page, broken JSON)."""
    raw_content_type: str = "application/json"
    usage: dict[str, Any] | None = None
    """Report this usage, in the wire format's own shape, instead of the counted one."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra headers of the answer (`x-ratelimit-remaining-requests`, `retry-after` …)."""
    together: int = 0
    """Answer only once this many requests of the same key have arrived: a barrier that
    shows requests were in flight at once without timing them."""
    held_open: bool = False
    """Streaming only: after the whole answer, end of turn and usage included, keep the
    connection open until the client goes. Whoever relays it has the answer and has not
    seen it end: a test acts in between (`FakeUpstream.when_answered`)."""


class Script(BaseModel):
    """The steps a test queues for requests carrying `key` (its tick header, or `default`)."""

    model_config = ConfigDict(extra="forbid")
    key: str = "default"
    steps: list[Step]


class LedgerEntry(BaseModel):
    """What one answered request billed, so a test can compare it with the recorded spend.

    `prompt_tokens` counts the whole prompt, cached parts included, whatever the wire
    format reports (Anthropic's `input_tokens` leaves the cache out): tickwork's own
    convention, the one its `BudgetSpent` keeps.
    """

    key: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    usage_reported: bool
    stream: bool
    received_at: float
    api: Api = "openai-chat"
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Of the completion, the thinking's tokens."""
    cache_write_1h_tokens: int = 0
    web_search_requests: int = 0
    prompt_tokens_total: int = 0
    """Cached prefix included: what a server without a KV cache would report."""
