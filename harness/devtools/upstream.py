"""The upstream a tick talks to: the configured one, or the fake one for a try without a server.

Every process that owns ticks (`tickwork run`, `tick`, `worker`, `serve`'s run-now button)
gives its ticks the same environment through here. Ticks started by hand on the host of a
live `tickwork run` use that service's fake (its heartbeat names it), so a scripted answer
(`POST /_script`) reaches them too. The fake upstream (FastAPI, uvicorn) is imported only
when it is needed.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from harness.contracts import API_KEY_ENV
from harness.store import EventStore, StoreError, beats


@dataclass(frozen=True)
class TickUpstream:
    """Where ticks send their model calls: the worker environment, and which upstream it is."""

    env: dict[str, str]
    fake: str | None
    """The fake upstream's URL when ticks talk to tickwork's own (None: OPENAI_BASE_URL)."""

    def describe(self) -> str:
        """The upstream for a banner: the fake's address, or the configured one's host."""
        if self.fake is not None:
            script = f"{self.fake.removesuffix('/v1')}/_script"
            return f"tickwork's fake at {self.fake} (script its answers: POST {script})"
        return f"{urlsplit(self.env['OPENAI_BASE_URL']).hostname} (OPENAI_BASE_URL)"


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
    shared = None if store is None else _service_fake(store)
    if shared is not None:
        warn(f"no OPENAI_BASE_URL set: ticks talk to the running service's fake at {shared}")
        yield TickUpstream({**os.environ, "OPENAI_BASE_URL": shared}, shared)
        return
    from harness.devtools.fake_llm import fake_upstream

    with fake_upstream() as fake:
        warn(f"no OPENAI_BASE_URL set: ticks talk to tickwork's fake upstream at {fake.url}")
        yield TickUpstream({**os.environ, "OPENAI_BASE_URL": fake.url}, fake.url)


@contextmanager
def env_for_ticks(
    warn: Callable[[str], None], store: EventStore | None = None
) -> Iterator[dict[str, str]]:
    """The worker environment alone, for an owner that prints no banner (the run-now button)."""
    with upstream_for_ticks(warn, store) as upstream:
        yield upstream.env


def _service_fake(store: EventStore) -> str | None:
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
