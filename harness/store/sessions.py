"""Which tickwork processes hold connections to the store's PostgreSQL server.

Every connection of a process is named after it (`engine.process_name`), so the server's
`pg_stat_activity` tells whether a process of another host still works: its connections
stay open and active while it lives, and idle out when its host is lost.
"""

from __future__ import annotations

import sqlalchemy as sa

from harness.store.base import EventStore

RECENTLY_ACTIVE = sa.text(
    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = :name "
    "AND coalesce(state_change, backend_start) > now() - make_interval(secs => :seconds))"
)


def recently_connected(store: EventStore, name: str, seconds: float) -> bool:
    """Whether a connection named `name` is open and was active in the last `seconds`."""
    with store.read_transaction() as conn:
        return bool(conn.execute(RECENTLY_ACTIVE, {"name": name, "seconds": seconds}).scalar())
