"""Appends the proxy's events off its event loop, in the order they happened.

A request must not wait for the store: the event loop hands each event to one writer
thread and moves on. What the store cannot take goes to the spool, as a tick's events do.
"""

from __future__ import annotations

import logging
import queue
import threading

from harness.events import BudgetSpent, GovernorEvent
from harness.store import SqlEventStore, append_or_spool
from harness.store.spool import Spool

log = logging.getLogger(__name__)

LedgerEvent = GovernorEvent | BudgetSpent


class Ledger:
    def __init__(self, store: SqlEventStore | None, spool: Spool) -> None:
        self.store = store
        self.spool = spool
        self._queue: queue.SimpleQueue[LedgerEvent | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, name="governor-ledger", daemon=True)
        self._thread.start()

    def record(self, event: LedgerEvent) -> None:
        self._queue.put(event)

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._queue.put(None)
        self._thread.join()

    def _write(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                append_or_spool(self.store, self.spool, event.stream_id, [event.to_record()])
            except Exception:
                log.exception("governor could not record a %s event", event.type)
