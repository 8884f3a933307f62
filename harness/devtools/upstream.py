"""The upstream a tick talks to: the configured one, or the fake one for a try without a server.

Every process that owns ticks (`tickwork run`, `tick`, `worker`, `serve`'s run-now button)
gives its ticks the same environment through here. Without `OPENAI_BASE_URL` (fake mode)
every wire protocol whose own base URL variable is unset (`ANTHROPIC_BASE_URL`,
`OLLAMA_HOST`) talks to the fake too, which speaks all four: no tick of a try goes to a
provider's real host. Ticks started by hand and the ticks of a `tickwork worker` on the
host of a live `tickwork run` use that service's fake (its heartbeat names it), so a
scripted answer (`POST /_script`) reaches them too. The fake upstream (FastAPI,
uvicorn) is imported only when it is needed.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from harness.contracts import (
    API_KEY_ENV,
    APIS,
    BASE_URL_ENV,
    DEFAULT_BASE_URLS,
    Api,
    missing_key,
)
from harness.store import EventStore, StoreError, beats


@dataclass(frozen=True)
class TickUpstream:
    """Where ticks send their model calls: the worker environment, and which upstream it is."""

    env: dict[str, str]
    fake: str | None
    """The fake upstream's URL when ticks talk to tickwork's own (None: OPENAI_BASE_URL)."""

    def describe(self, api: Api) -> str:
        """Where ticks on `api` go, for a banner.

        The fake, the configured host, or the provider's own host, with whether its ticks
        are refused for want of a key (`missing_key`).
        """
        variable = BASE_URL_ENV[api]
        url = self.env.get(variable)
        if self.fake is not None and url == fake_base_urls(self.fake)[variable]:
            script = f"{self.fake.removesuffix('/v1')}/_script"
            return f"tickwork's fake at {url} (script its answers: POST {script})"
        if url:
            return f"{urlsplit(url).hostname} ({variable})"
        refused = missing_key(api, self.env)
        if refused is not None:
            return f"none: its ticks are refused: {refused}"
        return f"{urlsplit(DEFAULT_BASE_URLS[api]).hostname} ({variable} not set)"


def fake_base_urls(fake: str) -> dict[str, str]:
    """Each protocol's base URL variable set to the fake at `fake` (its OpenAI URL, `…/v1`)."""
    origin = fake.removesuffix("/v1")
    return {BASE_URL_ENV[api]: fake if api.startswith("openai") else origin for api in APIS}


def _fake_env(fake: str) -> dict[str, str]:
    """The ticks' environment in fake mode: the fake for every protocol not set to another."""
    env = dict(os.environ)
    for variable, url in fake_base_urls(fake).items():
        if not env.get(variable):
            env[variable] = url
    return env


@contextmanager
def upstream_for_ticks(
    warn: Callable[[str], None], store: EventStore | None = None
) -> Iterator[TickUpstream]:
    """The real upstream if OPENAI_BASE_URL is set, else a fake one.

    With `store`, the fake of a `tickwork run` alive on this host is used when it answers;
    otherwise this process serves a fake of its own for as long as it runs. `warn` is told
    of a setup that will fail every call, and of the fake upstream's address.
    """
    if os.environ.get("OPENAI_BASE_URL"):
        if not os.environ.get(API_KEY_ENV):
            warn(
                f"warning: OPENAI_BASE_URL is set but {API_KEY_ENV} is not: "
                "an upstream that needs a key will refuse every call"
            )
        yield TickUpstream(dict(os.environ), None)
        return
    shared = None if store is None else service_fake(store)
    if shared is not None:
        warn(f"no OPENAI_BASE_URL set: ticks talk to the running service's fake at {shared}")
        yield TickUpstream(_fake_env(shared), shared)
        return
    from harness.devtools.fake_llm import fake_upstream

    with fake_upstream() as fake:
        warn(f"no OPENAI_BASE_URL set: ticks talk to tickwork's fake upstream at {fake.url}")
        yield TickUpstream(_fake_env(fake.url), fake.url)


@contextmanager
def env_for_ticks(
    warn: Callable[[str], None], store: EventStore | None = None
) -> Iterator[dict[str, str]]:
    """The worker environment alone, for an owner that prints no banner (the run-now button)."""
    with upstream_for_ticks(warn, store) as upstream:
        yield upstream.env


def service_fake(store: EventStore) -> str | None:
    """The fake upstream a live scheduler on this host serves, if one answers."""
    try:
        found = beats(store)
    except StoreError:
        return None
    now, host = datetime.now(UTC), socket.gethostname()
    for beat in found:
        if beat.role == "scheduler" and beat.host == host and beat.upstream and beat.live(now):
            where = urlsplit(beat.upstream)
            try:
                socket.create_connection((where.hostname, where.port or 80), timeout=1).close()
            except OSError:
                continue
            return beat.upstream
    return None
