"""The shared rate limits of the proxy's upstreams: each model call waits its turn first.

Agent CLIs (and any client) reach their provider through the proxy, so the limits of the
provider host it forwards to (`[rate_limits."HOST"]`) are taken here for every chat
request, in the same store buckets a Strands tick takes them from
(`harness.governor.rate_limit`): the request waits its turn, or is answered 429 with a
`retry-after` when its turn lies further off than `[governor] rate_limit_wait_seconds`,
as the provider would answer, without asking it. A 429 of the provider with
`retry-after` holds the bucket back for every caller; the call's parallel slot is freed
when its answer ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping

from harness.contracts import RateLimit, Scope, provider_host, provider_key
from harness.governor.rate_limit import Outcome, await_turn_async, hold_back, refused_for
from harness.store import Call, EventStore, StoreError, settle

log = logging.getLogger(__name__)

LEASE_SECONDS = 600.0
"""A call's parallel slot, if the proxy dies holding it, frees itself after this long."""


class ProxyLimits:
    """The proxy's rate limits, by API (`openai`, `anthropic`): those of its upstream's host."""

    def __init__(
        self,
        store: EventStore | None,
        limits: Mapping[str, RateLimit],
        upstream_urls: Mapping[str, str],
        max_wait: float,
    ) -> None:
        self.store = store
        self.max_wait = max_wait
        """A request waits this long for its turn at most; a turn further off is refused."""
        self.scopes: dict[str, list[Scope]] = {}
        for api, url in upstream_urls.items():
            host = provider_host(url)
            if host in limits:
                self.scopes[api] = [(provider_key(host), limits[host])]

    async def turn(self, api: str, tokens: int) -> tuple[Call | None, Outcome | None]:
        """Wait for a call's turn; the call taken (None: no limit, or no store) and how."""
        scopes = self.scopes.get(api)
        if not scopes or self.store is None:
            return None, None
        call = Call(uuid.uuid4().hex, tokens, LEASE_SECONDS)
        try:
            outcome = await await_turn_async(self.store, scopes, call, time.time() + self.max_wait)
        except StoreError as exc:
            log.warning("rate limits unchecked, the store is out of reach: %s", exc)
            return None, None
        return (call if outcome.taken else None), outcome

    async def answered(self, api: str, status: int, headers: Mapping[str, str]) -> None:
        """The upstream's answer began: a 429 with `retry-after` holds the buckets back."""
        seconds = refused_for(status, headers)
        scopes = self.scopes.get(api)
        if seconds is None or not scopes or self.store is None:
            return
        try:
            keys = [key for key, _ in scopes]
            await asyncio.to_thread(hold_back, self.store, keys, seconds)
        except StoreError as exc:
            log.warning("a provider's retry-after is not shared: %s", exc)

    async def ended(self, call: Call | None) -> None:
        """The call's answer ended: its parallel slot goes back (its estimate stays counted)."""
        if call is None or self.store is None:
            return
        try:
            await asyncio.to_thread(settle, self.store, call.call_id, None)
        except StoreError as exc:
            log.warning("a rate-limit lease is left to expire: %s", exc)
