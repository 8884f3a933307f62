"""A tick's errors are classed by the exception classes of the libraries that raise them.

The end-to-end tick tests cover a 500, a 503 and a stream cut; this table pins every
class the worker retries as infrastructure, and the refused credentials that pause a
level at once, with instances of the real classes.
"""

from __future__ import annotations

import anthropic
import httpx
import ollama
import openai
import pytest
from strands.types.exceptions import ContextWindowOverflowException, ModelThrottledException

from harness.store import StoreUnavailableError
from workers.failures import failure_class
from workers.providers import load_all

load_all()  # a worker loads only its protocols' SDKs; every one's errors are classed here

REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def status(code: int) -> httpx.Response:
    return httpx.Response(code, request=REQUEST)


def caused_by(cause: BaseException) -> Exception:
    try:
        raise RuntimeError("the agent gave up") from cause
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize(
    "error",
    [
        openai.APIConnectionError(request=REQUEST),
        openai.APITimeoutError(request=REQUEST),
        openai.RateLimitError("slow down", response=status(429), body=None),
        openai.InternalServerError("down", response=status(503), body=None),
        openai.APIStatusError("bad gateway", response=status(502), body=None),
        ModelThrottledException("throttled"),
        httpx.RemoteProtocolError("peer closed connection"),
        httpx.ReadTimeout("read timed out", request=REQUEST),
        httpx.ConnectError("connection refused", request=REQUEST),
        StoreUnavailableError("event store unavailable"),
        caused_by(httpx.ConnectError("connection refused", request=REQUEST)),
        anthropic.RateLimitError("slow down", response=status(429), body=None),
        anthropic.OverloadedError("overloaded", response=status(529), body=None),
        anthropic.InternalServerError("down", response=status(500), body=None),
        anthropic.APIConnectionError(request=REQUEST),
        ollama.ResponseError("too many requests", 429),
        ollama.ResponseError("internal error", 500),
        ConnectionError("Failed to connect to Ollama."),
    ],
    ids=lambda error: f"{type(error).__module__.split('.')[0]}.{type(error).__name__}",
)
def test_upstream_and_store_outages_are_infrastructure(error: Exception) -> None:
    assert failure_class(error) == "infrastructure"


@pytest.mark.parametrize(
    "error",
    [
        openai.AuthenticationError("no key", response=status(401), body=None),
        openai.PermissionDeniedError("not yours", response=status(403), body=None),
        caused_by(openai.AuthenticationError("no key", response=status(401), body=None)),
        anthropic.AuthenticationError("no key", response=status(401), body=None),
        ollama.ResponseError("unauthorized", 401),
    ],
    ids=lambda error: f"{type(error).__module__.split('.')[0]}.{type(error).__name__}",
)
def test_refused_credentials_are_configuration(error: Exception) -> None:
    assert failure_class(error) == "configuration"


@pytest.mark.parametrize(
    "error",
    [
        openai.BadRequestError("bad request", response=status(400), body=None),
        anthropic.BadRequestError("bad request", response=status(400), body=None),
        ollama.ResponseError("invalid options", 400),
        ContextWindowOverflowException("too long"),
        ValueError("a bug"),
        caused_by(KeyError("missing")),
    ],
    ids=lambda error: type(error).__name__,
)
def test_other_errors_are_internal(error: Exception) -> None:
    assert failure_class(error) == "internal"


@pytest.mark.parametrize(
    "message",
    [
        "Upstream OVERLOADED, try later",
        "rate limit reached for this key",
        "read timed out",
        "service unavailable",
        "sqlite3.OperationalError: database is locked",
    ],
)
def test_infrastructure_is_also_recognised_by_the_text_when_no_class_says_it(message: str) -> None:
    assert failure_class(RuntimeError(message)) == "infrastructure"
    assert failure_class(caused_by(ValueError(message))) == "infrastructure"


def test_a_status_that_says_otherwise_wins_over_the_text() -> None:
    refused = openai.BadRequestError("model unavailable here", response=status(400), body=None)
    assert failure_class(refused) == "internal"
    assert failure_class(RuntimeError("a plain bug")) == "internal"
