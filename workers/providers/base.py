"""What every protocol's model does around its provider's stream, and what each is built from.

Each protocol's module (one per wire format, imported only when a tick talks it: the
Anthropic SDK alone costs a cold tick a second of imports) subclasses its Strands
provider with `Metered` and builds it from an `Endpoint`. `Metered` counts the
characters the provider streams back (what a spend estimate needs when the upstream
never reports usage), brings its usage to tickwork's convention (prompt tokens include
the cached ones), and refuses a turn whose stream never reached its protocol's end of
turn (`finished_turn`, fed by the transport's `WireWatch`). Each module registers its
SDK's error classes (`SdkErrors`) for `workers.failures` to class.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from strands.models import Model
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

from harness.contracts import Api, Effort
from workers.wire import WireWatch


@dataclass(frozen=True)
class Endpoint:
    """Everything a protocol's module needs to build the tick's model.

    The key is read from the environment by the caller and kept by the client only.
    """

    model_id: str
    effort: Effort | None
    base_url: str | None
    """None: the SDK's own default."""
    api_key: str | None
    """None: the protocol takes no key here (an Ollama target naming none)."""
    timeout: float
    headers: dict[str, str]
    watch: WireWatch


@dataclass(frozen=True)
class SdkErrors:
    """How a protocol's SDK says what went wrong, for `workers.failures` to class."""

    infrastructure: tuple[type[Exception], ...] = ()
    configuration: tuple[type[Exception], ...] = ()
    with_status: tuple[type[Exception], ...] = ()
    """Classes with a `status_code` (HTTP; -1 or 0 when none) to class by status."""


LOADED_SDK_ERRORS: list[SdkErrors] = []
"""The error classes of the SDKs this process has loaded: an error of an SDK that was
never imported cannot occur, so none needs importing to be classed."""


def register(errors: SdkErrors) -> SdkErrors:
    """Make a protocol's SDK errors known to `workers.failures`; once per module import."""
    LOADED_SDK_ERRORS.append(errors)
    return errors


class Metered(Model):
    """A Strands provider, metered. Subclasses put it first among their bases.

    Usage that is not a count (a string, a negative number) is dropped, so the call's
    spend is estimated and flagged as for an upstream that reports none: one gateway's
    odd accounting must not fail the tick.
    """

    api: Api = "openai-chat"
    watch: WireWatch
    response_chars = 0
    provider: str | None = None
    """The endpoint's host, as the call ledger names it (`workers.model.provider_of`)."""
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
