"""Which catalog targets are known to be down, shared by every tick process.

A tick is a short-lived process, so the availability cache cannot live in memory. It is
derived from the store's `RouteFallback` events rather than kept in a file under the
spool or results folder: every tick, every replica and every host already shares the
store, the events are recorded anyway for the ledger, and so there is no second truth to
keep in step. This module stays small because the worker imports it at every start.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from harness.contracts import RouteFallback, TargetSelfChecked, decode
from harness.store import EventStore, StoreError

LOOKBACK_EVENTS = 50_000
"""How far back (in events of any type) a tick looks for failures: the read is a range of
the primary key, bounded however large the store grows. A failure further back than that
within the TTL is forgotten, which costs one more try of the target, nothing worse."""


def recently_down(store: EventStore | None, ttl: float, now: datetime) -> dict[str, str]:
    """Targets with an observed infrastructure failure in the last `ttl` seconds, and why.

    Only uncached fallbacks count, so a target passed over is tried again once its TTL
    has passed. Without a store (it is down; events are spooled) nothing is known down.
    """
    if store is None or ttl <= 0:
        return {}
    since = now - timedelta(seconds=ttl)
    try:
        after = store.lookback(LOOKBACK_EVENTS)
        stored = store.read_all(after, LOOKBACK_EVENTS, [RouteFallback.type])
    except StoreError:
        return {}
    down: dict[str, str] = {}
    for record in stored:
        event = decode(record)
        if isinstance(event, RouteFallback) and not event.cached and event.occurred_at >= since:
            down[event.from_target] = f"{event.reason} (at {event.occurred_at:%H:%M:%S} UTC)"
    return down


def vouched_for(store: EventStore | None) -> set[str]:
    """Targets whose last self-check passed and that no uncached fallback marked down since.

    In the store's order, so whichever came last counts, whichever tick or host recorded
    it. Without a store nothing is vouched for: a tick checks its target itself.
    """
    if store is None:
        return set()
    kinds = [TargetSelfChecked.type, RouteFallback.type]
    try:
        stored = store.read_all(store.lookback(LOOKBACK_EVENTS), LOOKBACK_EVENTS, kinds)
    except StoreError:
        return set()
    vouched: set[str] = set()
    for record in stored:
        event = decode(record)
        if isinstance(event, TargetSelfChecked):
            (vouched.add if event.passed else vouched.discard)(event.target)
        elif isinstance(event, RouteFallback) and not event.cached:
            vouched.discard(event.from_target)
    return vouched
