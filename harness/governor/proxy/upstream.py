"""The forward step: a request goes to the upstream on one pooled aiohttp session.

aiohttp, not httpx: its HTTP/1.1 parser is C, and the outgoing client was two thirds
of the proxy's CPU per request with httpx's pure-Python one (ops/bench/RESULTS.md).
"""

from __future__ import annotations

import contextlib
from base64 import b64encode
from collections.abc import AsyncIterator
from urllib.parse import unquote, urlsplit

import aiohttp

from harness.config import GovernorConfig
from harness.governor.proxy.incoming import Incoming

KEEPALIVE_SECONDS = 2.0
"""Shorter than servers' idle timeouts (uvicorn: 5 s), so a pooled connection is not reused
in the instant the upstream closes it."""
SKIP_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
"""The client's own headers go through as they came; aiohttp must not add defaults."""
UNANSWERED = (aiohttp.ClientError, TimeoutError)
"""What a request to the upstream, or the reading of its answer, raises when it fails."""


class Upstream:
    """Where requests go: the upstream's base URL, its credentials, the session while serving."""

    def __init__(self, url: str, public: str, idle_seconds: float) -> None:
        self.public = public
        """The URL without credentials, for errors and logs."""
        self.base = public.rstrip("/")
        self.idle_seconds = idle_seconds
        # Credentials in the URL become the Authorization of requests that bring none of
        # their own: aiohttp refuses a request with both.
        given = urlsplit(url)
        self.basic = (
            "Basic "
            + b64encode(
                f"{unquote(given.username)}:{unquote(given.password or '')}".encode()
            ).decode()
            if given.username
            else None
        )
        self._session: aiohttp.ClientSession | None = None

    @contextlib.asynccontextmanager
    async def connected(self) -> AsyncIterator[None]:
        """The pooled session for the app's lifetime (its ASGI lifespan)."""
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS)
        timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=self.idle_seconds)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            self._session = session
            try:
                yield
            finally:
                self._session = None

    async def forward(self, request: Incoming) -> aiohttp.ClientResponse:
        """The upstream's answer to `request`, its body not read yet; raises UNANSWERED."""
        assert self._session is not None, "the app's lifespan opens the session"
        query = request.query
        url = self.base + request.path + (f"?{query.decode('latin-1')}" if query else "")
        headers = request.headers
        if self.basic is not None and "authorization" not in headers:
            headers["Authorization"] = self.basic
        return await self._session.request(
            request.method,
            url,
            headers=headers,
            data=request.body,
            allow_redirects=False,
            auto_decompress=False,
            skip_auto_headers=SKIP_AUTO_HEADERS,
        )

    def unreachable(self, exc: BaseException) -> str:
        """Why the upstream gave no answer, naming it without its credentials."""
        reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
        return f"governor: the upstream {self.public} did not answer ({reason})"


def upstreams(config: GovernorConfig) -> dict[str, Upstream]:
    """Each API's upstream: Anthropic's own when configured, else the one upstream."""
    if not config.upstream:
        raise ValueError("the governor needs an upstream: set [governor] upstream or GOV_UPSTREAM")
    idle = config.upstream_idle_seconds
    main = Upstream(config.upstream, config.public_upstream, idle)
    anthropic = config.anthropic_upstream
    return {
        "openai": main,
        "anthropic": (
            Upstream(anthropic, config.public_anthropic_upstream, idle) if anthropic else main
        ),
    }
