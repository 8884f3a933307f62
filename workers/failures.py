"""Which errors of a tick are infrastructure: the runner retries those, then pauses the level.

An upstream that is down, throttles, cuts a stream or answers with something that does
not parse as a completion, and a store out of reach, are
recognised by the exception classes of the libraries that raise them: openai (the
client Strands' model calls), httpx (a stream cut after the response began reaches the
agent unwrapped), Strands (which turns a 429 into its own throttling exception) and the
store. Anything else is internal; content failures are judged from the answer, not here.
"""

from __future__ import annotations

import json

import httpx
import openai
from strands.types.exceptions import ModelThrottledException

from harness.contracts.result import FailureClass
from harness.routing.quota import QuotaExhaustedError
from harness.store import StoreUnavailableError
from workers.model import MalformedAnswerError

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
    StoreUnavailableError,
    QuotaExhaustedError,
)


CONFIGURATION_ERRORS: tuple[type[Exception], ...] = (
    openai.AuthenticationError,
    openai.PermissionDeniedError,
)
"""The upstream refused the credentials (401, 403): no retry can mend a wrong key."""


def failure_class(exc: BaseException) -> FailureClass:
    """The class of the first configuration or infrastructure error in the chain, else internal."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, CONFIGURATION_ERRORS):
            return "configuration"
        if isinstance(seen, INFRASTRUCTURE_ERRORS):
            return "infrastructure"
        if isinstance(seen, openai.APIStatusError) and (
            seen.status_code == 429 or seen.status_code >= 500
        ):
            return "infrastructure"
        seen = seen.__cause__ or seen.__context__
    return "internal"
