"""Appends the proxy's events off its event loop, in the order they happened.

A request must not wait for the store: the event loop hands each event (or the function
that builds it, so the pydantic work happens here and not on the loop) to one writer
thread and moves on. The writer gathers what arrives for a moment and appends it in one
transaction per stream, so a busy proxy pays for a commit per batch, not per request, and
the writer wakes (and takes the GIL from the event loop) a few times a second instead of
once per request. What the store cannot take goes to the spool, as a tick's events do.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from harness.contracts import BudgetSpent, GovernorEvent
from harness.store import EventStore, NewEvent, Spool, append_or_spool

log = logging.getLogger(__name__)

LedgerEvent = GovernorEvent | BudgetSpent
Entry = LedgerEvent | Callable[[], LedgerEvent]
"""An event, or a function that builds it in the writer thread."""
MAX_BATCH = 500
GATHER_SECONDS = 0.05
"""How long the writer waits for more events after the first of a batch."""


class Ledger:
    """The proxy's writer thread: records its events without making a request wait for the store."""

    def __init__(self, store: EventStore | None, spool: Spool) -> None:
        self.store = store
        self.spool = spool
        self._queue: queue.SimpleQueue[Entry | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, name="governor-ledger", daemon=True)
        self._thread.start()

    def record(self, entry: Entry) -> None:
        """Queue an event (or its builder) for the writer thread; returns at once."""
        self._queue.put(entry)

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._queue.put(None)
        self._thread.join()

    def _write(self) -> None:
        closing = False
        while not closing:
            entries, closing = self._gather()
            batch: dict[str, list[NewEvent]] = {}
            for entry in entries:
                try:
                    event = entry() if callable(entry) else entry
                    batch.setdefault(event.stream_id, []).append(event.to_record())
                except Exception:
                    log.exception("governor could not build an event")
            for stream_id, records in batch.items():
                try:
                    append_or_spool(self.store, self.spool, stream_id, records)
                except Exception:
                    log.exception("governor could not record %d event(s)", len(records))

    def _gather(self) -> tuple[list[Entry], bool]:
        """The next batch and whether the ledger is closing.

        A batch is what arrives within GATHER_SECONDS of its first entry: waiting that long
        turns a commit (and a wake-up) per request into a few a second.
        """
        entry = self._queue.get()
        entries: list[Entry] = []
        until = time.monotonic() + GATHER_SECONDS
        while entry is not None:
            entries.append(entry)
            wait = until - time.monotonic()
            if len(entries) >= MAX_BATCH or wait <= 0:
                return entries, False
            try:
                entry = self._queue.get(timeout=wait)
            except queue.Empty:
                return entries, False
        return entries, True
