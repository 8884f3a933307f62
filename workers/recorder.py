"""Records a tick's events the moment they happen; the spool takes them if the store cannot."""

from __future__ import annotations

import logging
import os
import threading
import time

from harness.contracts import GovernorEvent, TickEvent, TickPayload, TickStarted, tick_stream
from harness.store import EventStore, Spool, StoreError, append_or_spool, open_store

log = logging.getLogger(__name__)

STARTED_WAIT_SECONDS = 5.0
"""How long a tick's first record waits for the runner's `TickStarted` of this process."""
STARTED_POLL_SECONDS = 0.005


class EventRecorder:
    """A tick never fails because the store is down: what cannot be appended is spooled.

    The store is opened on first use, not when the tick starts: opening it (an engine, a
    connection, the schema revision check) would otherwise delay the first model request,
    and a one-call tick first needs it once that call has been sent.
    """

    def __init__(self, payload: TickPayload) -> None:
        self.payload = payload
        self.spool = Spool(payload.spool_dir)
        self._store: EventStore | None = None
        self._opened = False
        self._lock = threading.Lock()

    @property
    def store(self) -> EventStore | None:
        """The tick's store, opened on first use; None when it was out of reach then."""
        with self._lock:
            if not self._opened:
                self._opened = True
                try:
                    self._store = open_store(
                        self.payload.store_url,
                        durability=self.payload.durability,
                        spool=self.spool,
                        checked=True,
                    )
                    self._await_started(self._store)
                except StoreError as exc:
                    log.warning("store unavailable, spooling this tick's events: %s", exc)
            return self._store

    def _await_started(self, store: EventStore) -> None:
        """Wait until the runner's `TickStarted` naming this process is readable.

        The runner records it once the launch returned the pid; a forked tick can reach its
        first record sooner. Its events wait for it, so the tick's stream reads started,
        then its steps: a story, and the pairing of call starts with their ends, follow
        the stream's order. Past the wait (a runner that could not record it) the tick
        records all the same.
        """
        stream, pid = tick_stream(self.payload.tick_id), os.getpid()
        deadline = time.monotonic() + STARTED_WAIT_SECONDS
        while not any(
            e.type == TickStarted.type and e.data.get("pid") == pid
            for e in store.read_stream(stream)
        ):
            if time.monotonic() > deadline:
                log.warning("no TickStarted for pid %s after %.0f s", pid, STARTED_WAIT_SECONDS)
                return
            time.sleep(STARTED_POLL_SECONDS)

    def record(self, event: TickEvent | GovernorEvent) -> None:
        """Append the event now, or spool it when the store is out of reach."""
        append_or_spool(self.store, self.spool, event.stream_id, [event.to_record()])

    def record_all(self, events: list[TickEvent]) -> None:
        """Append events of one tick in one commit (all or none), or spool them."""
        if not events:
            return
        records = [event.to_record() for event in events]
        append_or_spool(self.store, self.spool, events[0].stream_id, records)

    def close(self) -> None:
        """Release the store's connections when the tick ends (if it was ever opened)."""
        with self._lock:
            if self._store is not None:
                self._store.close()
