"""A model server of tickwork's own, for tests and demos, in the four wire formats ticks talk.

OpenAI chat completions (`/v1/chat/completions`), OpenAI Responses (`/v1/responses`),
Anthropic Messages (`/v1/messages`) and Ollama chat (`/api/chat`), one module each,
answered from scripts, one queue per tick (the worker sends its tick id in
`X-Tickwork-Tick`), so parallel ticks can each get their own conversation: text, thinking
and tool-call rounds (parallel calls included), HTTP errors, delays, cut streams and
streams that end cleanly before the turn's end. Every answer is written to a ledger with
the tokens it billed and the format it spoke, so a test can hold the store's spend against
what the upstream charged. Token counts follow a fixed rule (a token per 4 characters of
the request or answer), so they are reproducible.
"""

from __future__ import annotations

from harness.devtools.fake_llm.script import (
    DEFAULT_TEXT,
    LedgerEntry,
    Script,
    Step,
    ToolCallSpec,
)
from harness.devtools.fake_llm.server import FakeUpstream, create_app, fake_upstream
from harness.devtools.fake_llm.state import FakeState, KvCache, Tokenizer
from harness.devtools.fake_llm.tokens import count_tokens, count_word_tokens, render_prompt

__all__ = [
    "DEFAULT_TEXT",
    "FakeState",
    "FakeUpstream",
    "KvCache",
    "LedgerEntry",
    "Script",
    "Step",
    "Tokenizer",
    "ToolCallSpec",
    "count_tokens",
    "count_word_tokens",
    "create_app",
    "fake_upstream",
    "render_prompt",
]
