"""Which errors of a tick are infrastructure: the runner retries those, then pauses the level.

An upstream that is down, throttles, cuts a stream, ends a turn without a stop reason or
answers with something that does not parse as a completion, and a store out of reach, are
recognised by the exception classes of the libraries that raise them: openai (the
client Strands' model calls), httpx (a stream cut after the response began reaches the
agent unwrapped), Strands (which turns a 429 into its own throttling exception) and the
store. Errors no class or status says anything about (a tool's, a gateway's plain
exception) are read for the markers the predecessor call layer matched on, so an
"overloaded" or "database is locked" is retried rather than counted a bug. Anything else
is internal; content failures are judged from the answer, not here.
"""

from __future__ import annotations

import json

import httpx
import openai
from strands.types.exceptions import ModelThrottledException

from harness.contracts.result import FailureClass
from harness.routing.quota import QuotaExhaustedError
from harness.store import StoreUnavailableError
from workers.fallback import SelfCheckFailedError
from workers.model import MalformedAnswerError, MissingEndpointError, UnfinishedTurnError

INFRASTRUCTURE_ERRORS: tuple[type[Exception], ...] = (
    openai.APIConnectionError,
    openai.APITimeoutError,
    openai.RateLimitError,
    openai.InternalServerError,
    ModelThrottledException,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.ConnectError,
    json.JSONDecodeError,
    MalformedAnswerError,
    UnfinishedTurnError,
    StoreUnavailableError,
    QuotaExhaustedError,
    SelfCheckFailedError,
)


CONFIGURATION_ERRORS: tuple[type[Exception], ...] = (
    openai.AuthenticationError,
    openai.PermissionDeniedError,
    MissingEndpointError,
)
"""The upstream refused the credentials (401, 403), or a target's variable is unset: no
retry can mend a wrong key or a missing variable."""

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
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    statuses = [error for error in chain if isinstance(error, openai.APIStatusError)]
    for error in chain:
        if isinstance(error, CONFIGURATION_ERRORS):
            return "configuration"
        if isinstance(error, INFRASTRUCTURE_ERRORS):
            return "infrastructure"
    if any(error.status_code == 429 or error.status_code >= 500 for error in statuses):
        return "infrastructure"
    if not statuses and any(says_infrastructure(str(error)) for error in chain):
        return "infrastructure"
    return "internal"
