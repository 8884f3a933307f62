"""Which catalog targets are known to be down, shared by every tick process.

A tick is a short-lived process, so the availability cache cannot live in memory. It is
derived from the store's `RouteFallback` events rather than kept in a file under the
spool or results folder: every tick, every replica and every host already shares the
store, the events are recorded anyway for the ledger, and so there is no second truth to
keep in step. This module stays small because the worker imports it at every start.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from harness.events import RouteFallback, decode
from harness.store import SqlEventStore, StoreError

MAX_FALLBACKS_READ = 10_000


def recently_down(store: SqlEventStore | None, ttl: float, now: datetime) -> dict[str, str]:
    """Targets with an observed infrastructure failure in the last `ttl` seconds, and why.

    Only uncached fallbacks count, so a target passed over is tried again once its TTL
    has passed. Without a store (it is down; events are spooled) nothing is known down.
    """
    if store is None or ttl <= 0:
        return {}
    try:
        since = store.first_position_since(now - timedelta(seconds=ttl))
        stored = store.read_all(since - 1, MAX_FALLBACKS_READ, ["RouteFallback"])
    except StoreError:
        return {}
    down: dict[str, str] = {}
    for record in stored:
        event = decode(record)
        if isinstance(event, RouteFallback) and not event.cached:
            down[event.from_target] = f"{event.reason} (at {event.occurred_at:%H:%M:%S} UTC)"
    return down
