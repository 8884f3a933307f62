"""Which errors of a tick are infrastructure: the runner retries those, then pauses the level.

An upstream that is down, throttles, is overloaded (Anthropic's 529), cuts a stream, ends
a turn without a stop reason, answers with something that does not parse as a completion
or is an endpoint of another protocol, and a store out of reach, are recognised by the
exception classes of the libraries that raise them: the openai, anthropic and ollama
clients Strands' models call (an error's HTTP status where its class says nothing: 429
and 5xx are infrastructure, 401 and 403 configuration), httpx (a stream cut after the
response began reaches the agent unwrapped), Strands (which turns a 429 into its own
throttling exception) and the store. Errors no class or status says anything about (a
tool's, a gateway's plain exception) are read for the markers the predecessor call layer
matched on, so an "overloaded" or "database is locked" is retried rather than counted a
bug. Anything else is internal; content failures are judged from the answer, not here.
"""

from __future__ import annotations

import json

import httpx
from strands.types.exceptions import ModelThrottledException

from harness.contracts import FailureClass
from harness.routing import QuotaExhaustedError
from harness.store import StoreUnavailableError
from workers.fallback import SelfCheckFailedError
from workers.model import AgentMissingError, MissingEndpointError
from workers.providers import LOADED_SDK_ERRORS, UnfinishedTurnError
from workers.wire import MalformedAnswerError, WrongEndpointError

INFRASTRUCTURE_ERRORS: tuple[type[Exception], ...] = (
    ModelThrottledException,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.ConnectError,
    json.JSONDecodeError,
    MalformedAnswerError,
    WrongEndpointError,
    UnfinishedTurnError,
    StoreUnavailableError,
    QuotaExhaustedError,
    SelfCheckFailedError,
)


CONFIGURATION_ERRORS: tuple[type[Exception], ...] = (MissingEndpointError, AgentMissingError)
"""A target's variable is unset: no retry can mend it (nor a key the upstream refuses:
each SDK's 401 and 403 classes, `workers.providers.SdkErrors`)."""

INFRASTRUCTURE_MARKERS: tuple[str, ...] = (
    "429",
    "rate limit",
    "rate_limit",
    "timeout",
    "timed out",
    "connection",
    "network",
    "overloaded",
    "unavailable",
    "database is locked",
)
"""Lower-case text that says infrastructure in an error no class or status classes:
the predecessor call layer's list, kept as it was."""


def says_infrastructure(message: str) -> bool:
    """Whether an error's text carries one of the infrastructure markers (any case)."""
    text = message.lower()
    return any(marker in text for marker in INFRASTRUCTURE_MARKERS)


def failure_class(exc: BaseException) -> FailureClass:
    """The class of the first configuration or infrastructure error in the chain, else internal.

    Types and statuses decide first, all along the chain; only when none of them does are
    the messages of the chain read for the infrastructure markers.
    """
    chain = _chain(exc)
    configuration, infrastructure, with_status = _known_errors()
    statuses = [
        status
        for error in chain
        if isinstance(error, with_status) and (status := getattr(error, "status_code", 0)) > 0
    ]
    for error in chain:
        if isinstance(error, configuration):
            return "configuration"
        if isinstance(error, infrastructure):
            return "infrastructure"
    if any(status in (401, 403) for status in statuses):
        return "configuration"
    if any(status == 429 or status >= 500 for status in statuses):
        return "infrastructure"
    if not statuses and any(says_infrastructure(str(error)) for error in chain):
        return "infrastructure"
    return "internal"


NAMED_ERRORS: tuple[type[Exception], ...] = (WrongEndpointError, MalformedAnswerError)
"""tickwork's own words for what the transport saw; an SDK wraps them in its generic
connection error, whose message ("Connection error.") names nothing."""


def failure_message(exc: BaseException) -> str:
    """What to tell the operator: a named cause, the upstream's own words, or the text.

    An SDK's status error reads `Error code: 500 - {'error': {'message': …}}`: the
    upstream's message inside a Python dict. The operator gets the status and the
    message the upstream wrote instead (OpenAI's and Anthropic's `error.message`,
    Ollama's `error`).
    """
    chain = _chain(exc)
    for error in chain:
        if isinstance(error, NAMED_ERRORS):
            return str(error)
    for error in chain:
        status = getattr(error, "status_code", None)
        said = _said(getattr(error, "body", None)) or _said(getattr(error, "error", None))
        if isinstance(status, int) and status > 0 and said:
            return f"the upstream answered {status}: {said}"
    return str(exc)


def _said(body: object) -> str | None:
    """The message an error body carries: `{"error": {"message"}}`, `{"message"}`, text."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        body = inner.get("message") if isinstance(inner, dict) else inner
    return body.strip() if isinstance(body, str) and body.strip() else None


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes (or contexts), outermost first, each once."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _known_errors() -> tuple[
    tuple[type[Exception], ...], tuple[type[Exception], ...], tuple[type[Exception], ...]
]:
    """Configuration, infrastructure and status-carrying classes, the loaded SDKs' included."""
    sdks = list(LOADED_SDK_ERRORS)
    return (
        CONFIGURATION_ERRORS + tuple(c for sdk in sdks for c in sdk.configuration),
        INFRASTRUCTURE_ERRORS + tuple(c for sdk in sdks for c in sdk.infrastructure),
        tuple(c for sdk in sdks for c in sdk.with_status),
    )
