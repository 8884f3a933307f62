"""The service's compaction: ended ticks move into their packed rows.

Every minute, so the hot store holds a tick as events only while the tick runs (and
`show --follow` reads it item by item) and until every projection has folded its end,
about a minute after (`harness.store.tick_rows`). A pass that fails is reported and
tried again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from harness.store import SqlEventStore, StoreError, compact

COMPACT_SECONDS = 60.0


class Compactor:
    """A `tickwork run` companion: compacts now, then every `COMPACT_SECONDS`."""

    def __init__(self, store: SqlEventStore, report: Callable[[str], None]) -> None:
        self.store = store
        self.report = report

    def run(self, stopping: threading.Event) -> None:
        """Compact until `stopping` is set; a store outage is waited out."""
        while not stopping.is_set():
            try:
                compact(self.store, stopping)
            except StoreError as exc:
                self.report(f"compaction failed, trying again: {exc}")
            stopping.wait(COMPACT_SECONDS)
